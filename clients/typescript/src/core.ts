/**
 * The subscriber's side of one relay connection, with no I/O: frames in, events and frames
 * out (fanout.client.core). Its caller (`Subscriber`, the WebSocket shell) moves the bytes,
 * owns the clock (`now`: wall-clock seconds) and turns events into wake-ups and answers.
 *
 * 0. The first frame from the relay answers our `hello`: a `welcome` opens the connection, an
 *    `error` is a HandshakeRefused.
 * 1. A request is a frame returned to the caller to send; once the connection failed every
 *    request throws its failure.
 * 2. Frames are handled in the order they arrive; one the core cannot place (an answer to no
 *    request, a push for no subscription) is a ProtocolError: the connection is broken.
 * 3. A held view ended by a redirect is handed over (`moved`) if `followsMoves`, and is no
 *    longer this core's; otherwise it ends with the redirect as its error.
 * 4. A connection that fails ends every held view with its failure (they stay listed), or, if
 *    `rehomes`, hands each over (`stranded`) to be held on another connection; it refuses every
 *    request in flight.
 */

import { encodeColumns } from "./columns.js";
import { HandshakeRefused, ProtocolError, SubscriptionError } from "./errors.js";
import {
  decode, PROTOCOL_VERSION,
  type ErrorFrame, type Hello, type Publish, type Subscribe, type ToSubscriber, type Unsubscribe, type Welcome,
} from "./frames.js";
import type { Row, Value } from "./values.js";
import { ViewState, type Asked, type Update } from "./viewstate.js";
import type { View } from "./views.js";

export type Event =
  | { type: "held"; sub: number }
  | { type: "refused"; sub: number; error: SubscriptionError }
  | { type: "updated"; sub: number; update: Update }
  | { type: "ended"; sub: number; state: ViewState }
  | { type: "moved"; sub: number; state: ViewState; location: string }
  | { type: "stranded"; sub: number; state: ViewState; failure: SubscriptionError }
  | { type: "written"; req: number; first: number; last: number }
  | { type: "write_refused"; req: number; error: SubscriptionError };

interface Asking {
  asked: Asked;
  resume: ViewState | null; // an earlier view to continue from
  into: ViewState | null; // a view moved here from another connection
}

export interface HelloOptions {
  name?: string;
  capabilities?: string[];
  token?: string;
}

/** The frame opening a subscriber's connection. */
export function hello(options: HelloOptions = {}): Hello {
  return {
    type: "hello", version: PROTOCOL_VERSION, role: "subscriber",
    name: options.name ?? "", capabilities: options.capabilities ?? [], token: options.token ?? "",
  };
}

/**
 * Validate the relay's first frame (rule 0).
 * @throws HandshakeRefused it is an `error`; ProtocolError anything else but a `welcome` of our version.
 */
export function checkWelcome(frame: ToSubscriber): Welcome {
  if (frame.type === "error") throw new HandshakeRefused(frame.code, frame.message);
  if (frame.type !== "welcome") throw new ProtocolError(`expected welcome, got ${frame.type}`);
  if (frame.version !== PROTOCOL_VERSION) {
    throw new ProtocolError(`relay speaks protocol ${frame.version}, we speak ${PROTOCOL_VERSION}`);
  }
  return frame;
}

/** One connection's subscriptions and requests (rules 1-4). */
export class ClientCore {
  /** Why the connection can serve no more, if so. */
  failure: SubscriptionError | null = null;
  /** Errors the relay sent about nothing this core holds or asked. */
  readonly errors: ErrorFrame[] = [];
  /** Whether a held view ended by a redirect is handed over (rule 3). */
  followsMoves = false;
  /** Whether the held views of a failed connection are handed over rather than ended (rule 4). */
  rehomes = false;
  private nextId = 1;
  private readonly held = new Map<number, ViewState>();
  private readonly asking = new Map<number, Asking>();
  private readonly writing = new Set<number>();

  /** `buffer`: updates not yet yielded a `latest` view keeps (`ViewState.buffer`). */
  constructor(readonly buffer = 256) {}

  /** The views held (and, once the connection failed, those it ended). */
  get views(): ViewState[] {
    return [...this.held.values()];
  }

  /** The state of held view `sub`, if held. */
  view(sub: number): ViewState | undefined {
    return this.held.get(sub);
  }

  /**
   * The request to hold `asked`; answered by `held` or `refused` with its `sub`.
   * @param options.resume an `every` view of an earlier connection to continue from.
   * @param options.stay be served by this relay even if another is responsible.
   * @param options.into a view moved from another connection: held here as the same state.
   * @throws RangeError `resume` is not an `every` view of the same dataset and view.
   * @throws SubscriptionError the connection failed.
   */
  subscribe(asked: Asked, options: { resume?: ViewState | null; stay?: boolean; into?: ViewState | null } = {}): Subscribe {
    const { resume = null, stay = false, into = null } = options;
    let token = null;
    if (resume !== null) {
      const same = resume.asked.dataset === asked.dataset && JSON.stringify(resume.asked.view) === JSON.stringify(asked.view);
      if (!same || asked.mode !== "every") throw new RangeError("resume takes an 'every' view of the same dataset and view");
      token = resume.seq >= 0 ? resume.token() : null;
    }
    this.check();
    const sub = this.nextId++;
    this.asking.set(sub, { asked, resume: into === null && token !== null ? resume : null, into });
    return {
      type: "subscribe", sub, dataset: asked.dataset, view: asked.view, rate: asked.rate, priority: asked.priority,
      transform: asked.transform, mode: asked.mode, resume: token, stay, relevance: asked.relevance ?? null,
      transduce: asked.transduce ?? null, ...(asked.confirmed ? { confirmed: true } : {}),
    };
  }

  /** The request moving held `state` to `view` (and `rate`, if given). */
  change(state: ViewState, view: View, rate?: number): Subscribe {
    this.check();
    const asked = state.asked;
    state.asked = { ...asked, view, rate: rate ?? asked.rate };
    return {
      type: "subscribe", sub: state.sub, dataset: asked.dataset, view, rate: state.asked.rate, priority: asked.priority,
      transform: asked.transform, mode: asked.mode, resume: null, stay: false, relevance: asked.relevance ?? null,
      transduce: asked.transduce ?? null, // left out, the relay would refuse the change
      ...(asked.confirmed ? { confirmed: true } : {}), // left out, live writes would start
    };
  }

  /** The request ending held `state`; `ended` follows once the relay confirms. */
  unsubscribe(state: ViewState): Unsubscribe {
    this.check();
    return { type: "unsubscribe", sub: state.sub };
  }

  /**
   * The request writing `rows` and deleting keys `deletes` of ingest dataset `dataset`;
   * answered by `written` or `write_refused` with its `req`.
   * @throws RangeError deletes without `key`, or rows whose columns differ.
   */
  publish(dataset: string, rows: readonly Row[], deletes: readonly Value[] = [], key?: string): Publish {
    if (deletes.length && key === undefined) throw new RangeError("deletes need the dataset's key column (key)");
    const names = rows.length ? Object.keys(rows[0]!) : [];
    if (rows.some((row) => Object.keys(row).join("\0") !== names.join("\0"))) {
      throw new RangeError("every row must have the same columns, in the same order");
    }
    const upserts = encodeColumns(Object.fromEntries(names.map((n) => [n, rows.map((row) => row[n]!)])));
    const request: Publish = {
      type: "publish", req: this.nextId++, dataset, upserts,
      deletes: deletes.length ? encodeColumns({ [key!]: deletes }) : { length: 0, columns: [] },
    };
    this.check();
    this.writing.add(request.req);
    return request;
  }

  /** Forget request `ref`: its asker stopped waiting. */
  withdraw(ref: number): void {
    this.asking.delete(ref);
    this.writing.delete(ref);
  }

  private check(): void {
    if (this.failure !== null) throw this.failure;
  }

  /** Decode and handle one message from the relay (rule 2). @throws ProtocolError */
  receiveData(data: Uint8Array | ArrayBuffer | string, now: number): Event[] {
    return this.receive(decode(data), now);
  }

  /** Handle one decoded frame from the relay, received at wall-clock seconds `now`. */
  receive(frame: ToSubscriber, now: number): Event[] {
    switch (frame.type) {
      case "push":
      case "no_update": {
        const state = this.held.get(frame.sub);
        if (state === undefined) break;
        return [{ type: "updated", sub: frame.sub, update: state.apply(frame, now) }];
      }
      case "subscribed":
        if (!this.asking.has(frame.sub)) break;
        this.held.set(frame.sub, this.hold(frame.sub, frame.key, frame.columns));
        return [{ type: "held", sub: frame.sub }];
      case "unsubscribed":
        if (!this.held.has(frame.sub)) break;
        return [this.end(frame.sub, null)];
      case "published":
        if (!this.writing.delete(frame.req)) break;
        return [{ type: "written", req: frame.req, first: frame.first, last: frame.last }];
      case "error":
        return this.error(frame);
    }
    throw new ProtocolError(`unexpected frame from the relay: ${JSON.stringify(frame).slice(0, 200)}`);
  }

  private error(frame: ErrorFrame): Event[] {
    const ref = frame.ref;
    const error = new SubscriptionError(frame.code, frame.message, frame.location);
    if (ref !== null && frame.code === "resync" && this.held.has(ref)) {
      this.held.get(ref)!.resyncs += 1; // a full push follows
      return [];
    }
    if (ref !== null && this.writing.delete(ref)) return [{ type: "write_refused", req: ref, error }];
    if (ref !== null && this.asking.delete(ref)) return [{ type: "refused", sub: ref, error }];
    if (ref !== null && this.held.has(ref)) {
      if (frame.code === "redirect" && frame.location !== null && this.followsMoves) {
        const state = this.held.get(ref)!;
        this.held.delete(ref);
        return [{ type: "moved", sub: ref, state, location: frame.location }];
      }
      return [this.end(ref, error)];
    }
    this.errors.push(frame);
    return [];
  }

  /** The connection can serve no more (rule 4). */
  fail(failure: SubscriptionError): Event[] {
    this.failure = failure;
    const events: Event[] = [];
    for (const [sub, state] of this.held) {
      if (this.rehomes) {
        events.push({ type: "stranded", sub, state, failure });
      } else if (!state.ended) {
        state.end(failure);
        events.push({ type: "ended", sub, state });
      }
    }
    if (this.rehomes) this.held.clear();
    for (const sub of this.asking.keys()) events.push({ type: "refused", sub, error: failure });
    for (const req of this.writing) events.push({ type: "write_refused", req, error: failure });
    this.asking.clear();
    this.writing.clear();
    return events;
  }

  private end(sub: number, error: SubscriptionError | null): Event {
    const state = this.held.get(sub)!;
    this.held.delete(sub);
    state.end(error);
    return { type: "ended", sub, state };
  }

  /** The state a `subscribed` answer starts holding: new, resumed, or moved here (`into`). */
  private hold(sub: number, key: string, columns: string[]): ViewState {
    const asking = this.asking.get(sub)!;
    this.asking.delete(sub);
    const moved = asking.into;
    if (moved !== null) {
      Object.assign(moved, { sub, key, columns, asked: asking.asked });
      moved.moves += 1;
      moved.ended = false;
      moved.error = null;
      return moved;
    }
    const state = new ViewState(sub, asking.asked, key, columns, this.buffer);
    if (asking.resume !== null) state.takeOver(asking.resume);
    return state;
  }
}
