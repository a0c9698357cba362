/**
 * Views that outlive their connection: redirects followed, relays failed over, `every` views
 * resumed with their token (fanout.client.following, plus reconnecting). Rules:
 *
 * 1. A subscription starts at the first relay of `relays` that answers; a redirect is followed
 *    at most `maxHops` times, then the last relay is asked to `stay`. A relay it is sent to but
 *    cannot reach, or that refuses it, is not waited for: the relay that redirected is asked
 *    to `stay`.
 * 2. One connection per relay URL, shared; a connection that fails is forgotten.
 * 3. A held view whose part moved (a redirect ending it) is held at its new relay as the same
 *    object: an `every` view resumes with its token, a `latest` view gets a full push.
 * 4. The views of a failed connection are held again the same way, at the relay they were at
 *    or else the others of `relays` in turn, retried with a growing delay until one holds
 *    them (at most `retries` rounds). Only a refusal that is not about the connection
 *    (`invalid_view`, `forbidden`, ...) ends such a view, with that error.
 */

import { ConnectionFailed, HandshakeRefused, SubscriptionError } from "./errors.js";
import type { LiveView } from "./liveview.js";
import { connect, type ConnectOptions, type SubscribeOptions, Subscriber } from "./subscriber.js";
import type { View } from "./views.js";

/** Redirects followed for one subscription before a relay is asked to stay. */
export const MAX_HOPS = 3;

export interface ClientOptions extends ConnectOptions {
  maxHops?: number;
  /** Rounds over the relays to hold a stranded view again before it ends (default: no limit). */
  retries?: number;
  /** Seconds before the first retry round, doubled each round up to `maxDelay` (0.25, 5). */
  delay?: number;
  maxDelay?: number;
}

const unreachable = (error: unknown) =>
  error instanceof ConnectionFailed || error instanceof HandshakeRefused ||
  (error instanceof SubscriptionError && ["closed", "unavailable"].includes(error.code));

const sleep = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

/** Connections to the relays of one deployment, opened as subscriptions lead to them. */
export class Client {
  readonly relays: string[];
  private readonly connections = new Map<string, Promise<Subscriber>>();
  private closing = false;
  /** Redirects followed so far; views moved or failed over so far. */
  redirects = 0;
  moves = 0;
  failovers = 0;

  constructor(relays: string | string[], private readonly options: ClientOptions = {}) {
    this.relays = typeof relays === "string" ? [relays] : [...relays];
    if (!this.relays.length) throw new RangeError("no relay to connect to");
  }

  /** The open connection to `url`, opened now if there is none (rule 2). */
  connection(url: string): Promise<Subscriber> {
    let opening = this.connections.get(url);
    if (opening === undefined) {
      opening = connect(url, this.options).then((subscriber) => {
        subscriber.rehoming(
          (view, location) => void this.rehold(view, [location], "moved"),
          (views) => {
            this.connections.delete(url);
            for (const view of views) void this.rehold(view, this.order(url), "failover");
          },
        );
        void subscriber.closed.then(() => {
          if (this.connections.get(url) === opening) this.connections.delete(url);
        });
        return subscriber;
      });
      opening.catch(() => this.connections.delete(url));
      this.connections.set(url, opening);
    }
    return opening;
  }

  /**
   * Hold `view` of `dataset` at the relay responsible for it (rule 1).
   * @throws SubscriptionError a relay refused it for another reason than a redirect.
   * @throws ConnectionFailed, HandshakeRefused no relay of `relays` could be reached.
   */
  async subscribe(dataset: string, view: View, options: SubscribeOptions = {}): Promise<LiveView> {
    let failure: unknown = null;
    for (const url of this.relays) {
      try {
        return await this.follow(url, dataset, view, options);
      } catch (error) {
        if (!unreachable(error)) throw error;
        failure = error;
      }
    }
    throw failure;
  }

  /** Subscribe at `url`, following redirects (rule 1). */
  private async follow(entry: string, dataset: string, view: View, options: SubscribeOptions): Promise<LiveView> {
    const maxHops = this.options.maxHops ?? MAX_HOPS;
    let url = entry;
    let previous: string | null = null;
    for (let hop = 0; ; hop++) {
      let subscriber: Subscriber;
      try {
        subscriber = await this.connection(url);
      } catch (error) {
        if (previous === null || !unreachable(error)) throw error;
        return (await this.connection(previous)).subscribe(dataset, view, { ...options, stay: true });
      }
      try {
        return await subscriber.subscribe(dataset, view, { ...options, stay: options.stay || hop >= maxHops });
      } catch (error) {
        if (!(error instanceof SubscriptionError) || error.code !== "redirect" || error.location === null) throw error;
        this.redirects += 1;
        previous = url;
        url = error.location;
      }
    }
  }

  /** The relays to try for a view of the relay at `url` that failed: it first, then the others. */
  private order(url: string): string[] {
    return [url, ...this.relays.filter((relay) => relay !== url)];
  }

  /** Hold `view` again, as the same object, at the first of `urls` that takes it (rules 3, 4). */
  private async rehold(view: LiveView, urls: string[], why: "moved" | "failover"): Promise<void> {
    const options: SubscribeOptions = {
      rate: view.rate, priority: view.priority, transform: view.transform, mode: view.mode,
      relevance: view.state.asked.relevance ?? null, transduce: view.state.asked.transduce ?? null,
      // a transduced view starts again (a full push): its window was at the relay it left
      resume: view.mode === "every" && !view.state.asked.transduce ? view : null, into: view, stay: why === "moved",
    };
    let delay = this.options.delay ?? 0.25;
    for (let round = 0; !this.closing && !view.ended; round++) {
      for (const url of urls) {
        try {
          await (why === "moved" ? this.connection(url).then((s) => s.subscribe(view.dataset, view.view, options)) : this.follow(url, view.dataset, view.view, options));
          if (why === "moved") this.moves += 1;
          else this.failovers += 1;
          return;
        } catch (error) {
          if (!unreachable(error)) return this.end(view, error as SubscriptionError);
        }
      }
      if (round + 1 >= (this.options.retries ?? Infinity)) break;
      await sleep(delay);
      delay = Math.min(delay * 2, this.options.maxDelay ?? 5);
      if (why === "moved") urls = this.order(urls[0]!); // its new relay is gone: any will do
    }
    const reason = this.closing ? "the client was closed" : `no relay of ${urls.join(", ")} could hold the view again`;
    this.end(view, new SubscriptionError("closed", reason));
  }

  private end(view: LiveView, error: SubscriptionError): void {
    if (view.ended) return;
    view.state.end(error);
    view.wake();
  }

  /** Close every connection; views end with them and are not held again. */
  async close(): Promise<void> {
    this.closing = true;
    const open = [...this.connections.values()];
    this.connections.clear();
    await Promise.all(open.map((opening) => opening.then((s) => s.close(), () => undefined)));
  }
}
