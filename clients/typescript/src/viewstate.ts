/**
 * One subscription's state on the subscriber's side, with no I/O: what was asked, the
 * materialised rows, where the stream is, and the updates not yet yielded
 * (fanout.client.viewstate). Rules:
 *
 * 1. What was asked (`Asked`) is immutable, replaced when the view changes; everything else is
 *    progress, changed only by the `ClientCore` that owns the state.
 * 2. Every push and no-update is applied to the rows in order; a push that does not decode or
 *    holds rows without the key changes nothing (ProtocolError).
 * 3. The updates not yet yielded are bounded by `buffer` in mode `latest`: the oldest is
 *    dropped (counted in `dropped`), never the rows. Mode `every` drops none.
 * 4. A resumed view continues from the earlier one's rows and seq and takes the updates it had
 *    not yielded (the earlier one yields nothing more).
 */

import { decodeColumns, encodeColumns, keyColumn, type Columns } from "./columns.js";
import { ProtocolError, SubscriptionError } from "./errors.js";
import type { Mode, NoUpdate, Push, Relevance, Resume, Transduce, Transform } from "./frames.js";
import type { Key, Row } from "./values.js";
import type { View } from "./views.js";

/** What a subscription asked for (rule 1). */
export interface Asked {
  readonly dataset: string;
  readonly view: View;
  readonly rate: number;
  readonly priority: number;
  readonly transform: Transform | null;
  readonly mode: Mode;
  readonly relevance?: Relevance | null;
  readonly transduce?: Transduce | null;
  readonly confirmed?: boolean;
}

/** One push (or no-update) of a view, as received. */
export interface Update {
  readonly sub: number;
  /** The publisher stream (epoch) and micro-batch (seq) it was cut from; the tick it is at. */
  readonly epoch: number;
  readonly seq: number;
  readonly tick: number;
  /** The first push of the subscription (or after a resync): `entered` is the whole view. */
  readonly full: boolean;
  readonly entered: Row[];
  readonly updated: Row[];
  /** Keys that left the view. */
  readonly left: Key[];
  /** Wall-clock seconds of the tick (0 for a no-update) and of the arrival. */
  readonly tickTime: number;
  readonly receivedAt: number;
  /** It carries writes the publisher has not confirmed yet (docs/concepts.md, "Two paths"). */
  readonly provisional?: boolean;
}

/** Whether nothing in the view changed (the relay's no-update). */
export function isNoUpdate(update: Update): boolean {
  return !(update.full || update.entered.length || update.updated.length || update.left.length);
}

/** Rows of decoded columns, one object per row. */
export function rowsOf(columns: Columns): Row[] {
  const names = [...columns.keys()];
  const lists = names.map((name) => columns.get(name)!);
  const count = lists[0]?.length ?? 0;
  const rows: Row[] = new Array(count);
  for (let i = 0; i < count; i++) {
    const row: Row = {};
    names.forEach((name, c) => (row[name] = lists[c]![i]!));
    rows[i] = row;
  }
  return rows;
}

/** A subscription's rows, position and updates not yet yielded (rules 2-4). */
export class ViewState {
  /** The materialised view: rows by key. */
  rows = new Map<Key, Row>();
  epoch = -1;
  seq = -1;
  tick = -1;
  updates = 0;
  dropped = 0;
  resyncs = 0;
  gaps = 0;
  moves = 0;
  /** Received and applied to `rows`, not yet yielded by an iteration. */
  pending: Update[] = [];
  ended = false;
  error: SubscriptionError | null = null;

  constructor(
    public sub: number,
    public asked: Asked,
    public key: string,
    public columns: string[],
    readonly buffer = 256,
  ) {}

  /**
   * Apply a push or no-update received at wall-clock seconds `now` (rules 2, 3).
   * @throws ProtocolError the push does not decode or holds rows without the key.
   */
  apply(frame: Push | NoUpdate, now: number): Update {
    const update: Update =
      frame.type === "no_update"
        ? { sub: frame.sub, epoch: frame.epoch, seq: frame.seq, tick: frame.tick, full: false, entered: [], updated: [], left: [], tickTime: 0, receivedAt: now }
        : this.applyPush(frame, now);
    if (this.asked.mode === "every" && !update.full && update.seq !== this.seq + 1) this.gaps += 1;
    this.epoch = update.epoch;
    this.seq = update.seq;
    this.tick = update.tick;
    this.updates += 1;
    if (this.asked.mode === "latest" && this.pending.length >= this.buffer) {
      this.pending.shift();
      this.dropped += 1;
    }
    this.pending.push(update);
    return update;
  }

  /** The subscription ended (`error` null: the relay confirmed an unsubscribe). */
  end(error: SubscriptionError | null): void {
    this.error = error;
    this.ended = true;
  }

  /** Where this view is: (epoch, seq, keys held), to resume an `every` subscription. */
  token(): Resume {
    const keys = [...this.rows.keys()];
    const integers = keys.every((k) => typeof k !== "string");
    const sorted = integers
      ? [...keys].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
      : [...keys].map(String).sort();
    return { epoch: this.epoch, seq: this.seq, keys: encodeColumns({ [this.key]: sorted }) };
  }

  /** Continue where `earlier` (a view of an ended connection) stopped (rule 4). */
  takeOver(earlier: ViewState): void {
    this.rows = new Map(earlier.rows);
    this.epoch = earlier.epoch;
    this.seq = earlier.seq;
    this.tick = earlier.tick;
    this.resyncs = earlier.resyncs;
    this.gaps = earlier.gaps;
    this.pending.unshift(...earlier.pending);
    earlier.pending = [];
  }

  private applyPush(push: Push, now: number): Update {
    // Everything is decoded before anything is applied (rule 2).
    const entered = this.rowsOf(push.entered, "entered");
    const updated = this.rowsOf(push.updated, "updated");
    const left = keyColumn(push.left, this.key, `push for subscription ${this.sub}: left`);
    if (push.full) this.rows.clear();
    for (const key of left) this.rows.delete(key);
    for (const row of [...entered, ...updated]) this.rows.set(row[this.key] as Key, row);
    return {
      sub: push.sub, epoch: push.epoch, seq: push.seq, tick: push.tick, full: push.full,
      entered, updated, left, tickTime: push.tick_time, receivedAt: now, provisional: push.provisional,
    };
  }

  private rowsOf(payload: Push["entered"], section: string): Row[] {
    const columns = decodeColumns(payload);
    if (payload.length && !columns.has(this.key)) {
      throw new ProtocolError(
        `push for subscription ${this.sub}: ${payload.length} ${section} rows without the key column '${this.key}'`,
      );
    }
    const rows = rowsOf(columns);
    if (rows.some((row) => row[this.key] === null)) {
      throw new ProtocolError(`push for subscription ${this.sub}: a ${section} row with a null key`);
    }
    return rows;
  }
}
