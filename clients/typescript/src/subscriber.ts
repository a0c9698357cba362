/**
 * The WebSocket shell of one relay connection: moves bytes between the platform's WebSocket
 * and a ClientCore, owns the clock, and turns the core's events into LiveViews, wake-ups and
 * answers (fanout.client.subscriber). Browsers use their own WebSocket; Node.js 18 and 20 have
 * none, so a program passes the `ws` package's (`{WebSocket}` from "ws"); Node.js 22 has one.
 *
 *     const relay = await connect("wss://relay.example:7701", { token });
 *     const view = await relay.subscribe("agents", box([0, 0], [100, 100]));
 *     for await (const update of view) console.log(update.tick, view.rows.size);
 */

import { ClientCore, checkWelcome, hello, type Event, type HelloOptions } from "./core.js";
import { ConnectionFailed, ProtocolError, SubscriptionError } from "./errors.js";
import { decode, encode, type Mode, type Relevance, type ToRelay, type Transduce, type Transform } from "./frames.js";
import { LiveView, type Holder } from "./liveview.js";
import type { Row, Value } from "./values.js";
import type { View } from "./views.js";

/** What the client needs of a WebSocket: the browser's and the `ws` package's both fit. */
export interface WebSocketLike {
  binaryType: string;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket constructor: `globalThis.WebSocket`, or `ws`'s (whose third argument takes TLS options). */
export type WebSocketClass = new (url: string, protocols?: string[], options?: object) => WebSocketLike;

export interface ConnectOptions extends HelloOptions {
  /** Updates not yet yielded a `latest` view keeps (default 256). */
  buffer?: number;
  /** The WebSocket class (default: the platform's `globalThis.WebSocket`). */
  WebSocket?: WebSocketClass;
  /** Passed to the WebSocket constructor as its third argument (`ws`: `{ca}`, `{maxPayload}`...). */
  webSocketOptions?: object;
  /** Seconds to wait for the connection and the relay's `welcome` (default 10). */
  openTimeout?: number;
}

export interface SubscribeOptions {
  /** Pushes per second at most (default 10; not for `every`). */
  rate?: number;
  /** Served before lower priorities when the relay cannot serve every view at once. */
  priority?: number;
  transform?: Transform | null;
  /** `latest` (default: the view at one tick, ticks may be skipped) or `every` (every seq, once). */
  mode?: Mode;
  /** An `every` view of an earlier connection to continue from: no gap, no duplicate. */
  resume?: LiveView | null;
  /** Be served here even if another relay is responsible (no redirect). */
  stay?: boolean;
  /** A view another connection held: that same object is held here from now on. */
  into?: LiveView | null;
  /** A region view's rate tiers by distance from its focus, and its priority from its rows. */
  relevance?: Relevance | null;
  /** A transducer the relay runs over the pushes, which then carry its output (docs/transducers.md). */
  transduce?: Transduce | null;
  /** `latest`: only rows the publisher confirmed, no write shown before (docs/concepts.md). */
  confirmed?: boolean;
}

const now = () => Date.now() / 1000;

/** One connection to a relay, holding any number of views. */
export class Subscriber implements Holder {
  private readonly core: ClientCore;
  private readonly live = new Map<number, LiveView>();
  private readonly subscribing = new Map<number, { resolve: () => void; reject: (e: Error) => void; into: LiveView | null }>();
  private readonly writing = new Map<number, { resolve: (r: [number, number]) => void; reject: (e: Error) => void }>();
  private closedResolve!: () => void;
  /** Resolves once the connection closed (its views ended, or were stranded). */
  readonly closed = new Promise<void>((resolve) => (this.closedResolve = resolve));
  /** Told when the relay ends a held view with a redirect: the view is handed over, not ended. */
  onMoved: ((view: LiveView, location: string) => void) | null = null;
  /** Told, once it failed, of the views the connection held (then not ended: re-hold them). */
  onStranded: ((views: LiveView[], failure: SubscriptionError) => void) | null = null;

  constructor(
    private readonly socket: WebSocketLike,
    /** The datasets the relay serves and the kind of index of each (`space`, `sql`, ...). */
    readonly datasets: Readonly<Record<string, string>>,
    /** The URL connected to. */
    readonly url: string,
    buffer = 256,
  ) {
    this.core = new ClientCore(buffer);
    socket.onmessage = (event) => this.received(event.data);
    socket.onclose = (event) => this.failed(new SubscriptionError("closed", `connection to the relay closed (${event.code} ${event.reason})`.trim()));
    socket.onerror = () => {}; // a close event follows
  }

  /** The views held. */
  get views(): LiveView[] {
    return this.core.views.map((state) => this.live.get(state.sub)!);
  }

  /** Why the connection can serve no more, if so. */
  get failure(): SubscriptionError | null {
    return this.core.failure;
  }

  /** Errors the relay sent about no view or request of this connection. */
  get errors() {
    return this.core.errors;
  }

  /** Hand views over on redirects and failures (set by `Client`) rather than ending them. */
  rehoming(moved: (view: LiveView, location: string) => void, stranded: (views: LiveView[], failure: SubscriptionError) => void): void {
    this.onMoved = moved;
    this.onStranded = stranded;
    this.core.followsMoves = true;
    this.core.rehomes = true;
  }

  /**
   * Hold `view` of `dataset`.
   * @throws SubscriptionError the relay refused it (`invalid_view`, `invalid_transform`,
   *   `redirect` with its `location`...), or the connection can serve no more.
   */
  async subscribe(dataset: string, view: View, options: SubscribeOptions = {}): Promise<LiveView> {
    const asked = {
      dataset, view, rate: options.rate ?? 10, priority: options.priority ?? 0,
      transform: options.transform ?? null, mode: options.mode ?? "latest", relevance: options.relevance ?? null,
      transduce: options.transduce ?? null, confirmed: options.confirmed ?? false,
    };
    const request = this.core.subscribe(asked, {
      resume: options.resume?.state ?? null, stay: options.stay ?? false, into: options.into?.state ?? null,
    });
    try {
      await new Promise<void>((resolve, reject) => {
        this.subscribing.set(request.sub, { resolve, reject, into: options.into ?? null });
        this.send(request);
      });
    } finally {
      this.core.withdraw(request.sub);
      this.subscribing.delete(request.sub);
    }
    return this.live.get(request.sub)!;
  }

  /**
   * Upsert whole `rows` and delete keys `deletes` of an ingest dataset, through the relay.
   * @returns the ingest-log offsets [first, last] once the events are durable.
   * @throws SubscriptionError the publisher refused them, or the relay could not forward them.
   */
  async publish(dataset: string, rows: readonly Row[], deletes: readonly Value[] = [], key?: string): Promise<[number, number]> {
    const request = this.core.publish(dataset, rows, deletes, key);
    try {
      return await new Promise<[number, number]>((resolve, reject) => {
        this.writing.set(request.req, { resolve, reject });
        this.send(request);
      });
    } finally {
      this.core.withdraw(request.req);
      this.writing.delete(request.req);
    }
  }

  change(live: LiveView, view: View, rate?: number): void {
    this.send(this.core.change(live.state, view, rate));
  }

  async unsubscribe(live: LiveView): Promise<void> {
    this.send(this.core.unsubscribe(live.state));
    while (!live.state.ended) await live.waitUpdates().catch(() => undefined);
  }

  /** Close the connection; its views end with it. */
  async close(): Promise<void> {
    this.socket.close(1000, "");
    await this.closed;
  }

  private send(frame: ToRelay): void {
    this.socket.send(encode(frame));
  }

  private received(data: unknown): void {
    if (this.core.failure !== null) return;
    let events: Event[];
    try {
      events = this.core.receiveData(binary(data), now());
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.socket.close(1002, error.message.slice(0, 120)); // nobody reads it any more: say why
      this.failed(new SubscriptionError("protocol", error.message));
      return;
    }
    this.handle(events);
  }

  private failed(failure: SubscriptionError): void {
    if (this.core.failure === null) this.handle(this.core.fail(failure), failure);
    this.closedResolve();
  }

  private handle(events: Event[], failure: SubscriptionError | null = null): void {
    const stranded: LiveView[] = [];
    for (const event of events) {
      switch (event.type) {
        case "updated":
          this.live.get(event.sub)!.wake();
          break;
        case "held":
          this.hold(event.sub);
          break;
        case "refused":
          this.subscribing.get(event.sub)?.reject(event.error);
          break;
        case "ended": {
          const live = this.live.get(event.sub)!;
          if (failure === null) this.live.delete(event.sub);
          live.wake();
          break;
        }
        case "moved": {
          const live = this.live.get(event.sub)!;
          this.live.delete(event.sub);
          live.holder = null;
          this.onMoved!(live, event.location);
          break;
        }
        case "stranded": {
          const live = this.live.get(event.sub)!;
          this.live.delete(event.sub);
          live.holder = null;
          stranded.push(live);
          break;
        }
        case "written":
          this.writing.get(event.req)?.resolve([event.first, event.last]);
          break;
        case "write_refused":
          this.writing.get(event.req)?.reject(event.error);
          break;
      }
    }
    if (stranded.length) this.onStranded!(stranded, failure!);
  }

  /** The LiveView of a subscription just held: the one moved here (`into`), or new. */
  private hold(sub: number): void {
    const state = this.core.view(sub)!;
    const asking = this.subscribing.get(sub);
    const live = asking?.into ?? new LiveView(state, this);
    live.state = state;
    live.holder = this;
    this.live.set(sub, live);
    asking?.resolve();
    live.wake(); // a moved view's state came with it: updates not yet yielded, if any
  }
}

function binary(data: unknown): Uint8Array | string {
  if (typeof data === "string") return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (Array.isArray(data)) return concat(data as Uint8Array[]); // ws's "fragments"
  throw new ProtocolError(`unexpected WebSocket message of type ${typeof data}`);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/**
 * Connect to the relay at `url` (`ws://` or `wss://`; TLS is the platform's: a browser's
 * authorities, or `webSocketOptions: {ca}` with `ws`), do the handshake, and return the
 * connection.
 *
 * @throws HandshakeRefused the relay refused: `unavailable` (no room: try another relay),
 *   `unauthorized` / `forbidden` (the token), `handshake` (version or role).
 * @throws ConnectionFailed the relay cannot be reached, or closed before answering.
 */
export async function connect(url: string, options: ConnectOptions = {}): Promise<Subscriber> {
  const Impl = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketClass }).WebSocket;
  if (Impl === undefined) {
    throw new ConnectionFailed("this platform has no WebSocket: pass one, e.g. connect(url, { WebSocket }) with `import { WebSocket } from \"ws\"`");
  }
  const socket = options.webSocketOptions === undefined ? new Impl(url) : new Impl(url, [], options.webSocketOptions);
  socket.binaryType = "arraybuffer";
  const welcome = await new Promise<ReturnType<typeof checkWelcome>>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new ConnectionFailed(`no welcome from ${url} within ${options.openTimeout ?? 10} s`));
      socket.close();
    }, 1000 * (options.openTimeout ?? 10));
    const settle = (outcome: () => void) => {
      clearTimeout(timer);
      socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
      outcome();
    };
    socket.onopen = () => socket.send(encode(hello(options)));
    socket.onerror = () => {}; // a close event follows
    socket.onclose = (event) => settle(() => reject(new ConnectionFailed(`cannot reach the relay at ${url} (${event.code} ${event.reason})`.trim())));
    socket.onmessage = (event) =>
      settle(() => {
        try {
          resolve(checkWelcome(decode(binary(event.data))));
        } catch (error) {
          socket.close(1002, "");
          reject(error);
        }
      });
  });
  return new Subscriber(socket, welcome.datasets, url, options.buffer);
}
