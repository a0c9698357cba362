/**
 * A view held through a relay: a window on its state (owned by the connection's ClientCore)
 * and an async iterator of its updates, woken by the connection holding it. Iteration is the
 * back-pressure: a program that falls behind loses the oldest `latest` notifications (counted
 * in `dropped`), never rows; an `every` view keeps them all. An ended view's iteration ends,
 * or throws its SubscriptionError.
 */

import type { SubscriptionError } from "./errors.js";
import type { Transform, Mode, Resume } from "./frames.js";
import type { Key, Row } from "./values.js";
import type { Update, ViewState } from "./viewstate.js";
import type { View } from "./views.js";

/** What a LiveView needs of the connection holding it. */
export interface Holder {
  change(live: LiveView, view: View, rate?: number): void;
  unsubscribe(live: LiveView): Promise<void>;
}

export class LiveView implements AsyncIterable<Update> {
  private wakers: (() => void)[] = [];

  constructor(
    /** The subscription's state; read it through the getters below. */
    public state: ViewState,
    /** The connection holding it (another once its part moved; null while it is re-held). */
    public holder: Holder | null,
  ) {}

  get dataset(): string { return this.state.asked.dataset; }
  get view(): View { return this.state.asked.view; }
  get mode(): Mode { return this.state.asked.mode; }
  get rate(): number { return this.state.asked.rate; }
  get priority(): number { return this.state.asked.priority; }
  get transform(): Transform | null { return this.state.asked.transform; }
  /** The materialised rows, by key: exact after every applied push, iterated or not. */
  get rows(): ReadonlyMap<Key, Row> { return this.state.rows; }
  get key(): string { return this.state.key; }
  get columns(): readonly string[] { return this.state.columns; }
  get epoch(): number { return this.state.epoch; }
  get seq(): number { return this.state.seq; }
  get tick(): number { return this.state.tick; }
  /** Pushes and no-updates applied so far. */
  get updates(): number { return this.state.updates; }
  /** `latest` notifications dropped because the program fell behind (rows are never dropped). */
  get dropped(): number { return this.state.dropped; }
  /** Resume tokens the relay could not honour (a full push followed). */
  get resyncs(): number { return this.state.resyncs; }
  /** Missing seqs seen in an `every` stream (a relay broke its promise; should stay 0). */
  get gaps(): number { return this.state.gaps; }
  /** Times the view was handed to another connection (a redirect, a failover). */
  get moves(): number { return this.state.moves; }
  get ended(): boolean { return this.state.ended; }
  get error(): SubscriptionError | null { return this.state.error; }

  /** Where an `every` view is, to resume it anywhere later (`subscribe(..., {resume})`). */
  token(): Resume { return this.state.token(); }

  /** Wake iterations and waiters: the state changed (the holder calls this). */
  wake(): void {
    const wakers = this.wakers;
    this.wakers = [];
    for (const wake of wakers) wake();
  }

  private sleep(): Promise<void> {
    return new Promise((resolve) => this.wakers.push(resolve));
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Update> {
    const state = () => this.state;
    for (;;) {
      while (state().pending.length) yield state().pending.shift()!;
      if (state().error !== null) throw state().error;
      if (state().ended) return;
      await this.sleep();
    }
  }

  /** Resolve once `count` more updates were applied; reject if the view ends with an error first. */
  async waitUpdates(count = 1): Promise<void> {
    const target = this.state.updates + count;
    while (this.state.updates < target) {
      if (this.state.error !== null) throw this.state.error;
      if (this.state.ended) return;
      await this.sleep();
    }
  }

  /** Move the view to `view` (and `rate`): the next push is a delta against the rows held. */
  change(view: View, rate?: number): void {
    if (this.holder === null) throw new Error("the view is being re-held; change it once it is");
    this.holder.change(this, view, rate);
  }

  /** Stop holding the view; resolves once the relay confirmed (or at once, off-line). */
  async close(): Promise<void> {
    if (this.state.ended) return;
    if (this.holder === null) {
      this.state.end(null);
      this.wake();
      return;
    }
    await this.holder.unsubscribe(this);
  }
}
