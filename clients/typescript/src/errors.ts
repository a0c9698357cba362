/**
 * The errors the client throws: a relay's refusal, a broken protocol, a refused handshake.
 * Mirrors fanout.errors and fanout.client.viewstate.SubscriptionError (docs/protocol.md).
 */

/** Something every fanout error is. */
export class FanoutError extends Error {
  override name = "FanoutError";
}

/** A frame that does not decode or cannot be placed: the connection is broken. */
export class ProtocolError extends FanoutError {
  override name = "ProtocolError";
}

/**
 * The relay refused or ended a subscription (or the connection failed); `code` is the relay's
 * error code (`invalid_view`, `invalid_transform`, `forbidden`, `redirect`, `closed`...). With code `redirect`,
 * `location` is the URL of the relay responsible for the view.
 */
export class SubscriptionError extends FanoutError {
  override name = "SubscriptionError";
  constructor(
    readonly code: string,
    readonly detail: string,
    readonly location: string | null = null,
  ) {
    super(`${code}: ${detail}`);
  }
}

/**
 * The relay answered our `hello` with an `error`: `handshake` (version or role refused),
 * `unauthorized` / `forbidden` (token), `unavailable` (no room: try another relay).
 */
export class HandshakeRefused extends ProtocolError {
  override name = "HandshakeRefused";
  constructor(
    readonly code: string,
    readonly detail: string,
  ) {
    super(`${code}: ${detail}`);
  }
}

/** A view built with arguments the relay would refuse (the same rules as fanout.views). */
export class InvalidView extends FanoutError {
  override name = "InvalidView";
}

/** The relay could not be reached, or closed the connection before answering the `hello`. */
export class ConnectionFailed extends FanoutError {
  override name = "ConnectionFailed";
}
