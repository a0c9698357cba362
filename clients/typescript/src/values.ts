/**
 * The typed values of columns that JavaScript has no exact type for: timestamps to the
 * microsecond, calendar dates and exact decimals (fanout.wire.columns: `<M8[us]`, `<M8[D]`,
 * `decimal`). NULL is `null` in every column; NaN is a number, never a null.
 */

const MICROS_PER_MS = 1000n;
const MS_PER_DAY = 86_400_000;

/** An instant: a `Date` that keeps its microseconds since 1970-01-01 UTC exactly. */
export class Timestamp extends Date {
  /** Microseconds since 1970-01-01 00:00 UTC, exact (a `Date` holds milliseconds). */
  readonly micros: bigint;

  constructor(micros: bigint) {
    const ms = micros / MICROS_PER_MS - (micros % MICROS_PER_MS < 0n ? 1n : 0n);
    super(Number(ms));
    this.micros = micros;
  }

  /** The instant of a `Date` (whole milliseconds). */
  static fromDate(date: Date): Timestamp {
    return date instanceof Timestamp ? date : new Timestamp(BigInt(date.getTime()) * MICROS_PER_MS);
  }

  /** ISO 8601 in UTC with six decimals, `2026-11-29T04:47:25.123456Z`. */
  toMicrosISOString(): string {
    const fraction = ((this.micros % 1_000_000n) + 1_000_000n) % 1_000_000n;
    return `${this.toISOString().slice(0, 19)}.${fraction.toString().padStart(6, "0")}Z`;
  }
}

/** A calendar date without a time of day: days since 1970-01-01. */
export class CalendarDate {
  constructor(readonly days: number) {}

  /** The date of `text` (`YYYY-MM-DD`). */
  static parse(text: string): CalendarDate {
    const found = /^(-?\d{4,})-(\d{2})-(\d{2})$/.exec(text);
    if (found === null) throw new RangeError(`not a date: ${JSON.stringify(text)}`);
    const ms = Date.UTC(Number(found[1]), Number(found[2]) - 1, Number(found[3]));
    return new CalendarDate(Math.round(ms / MS_PER_DAY));
  }

  /** Midnight UTC of this date. */
  toDate(): Date {
    return new Date(this.days * MS_PER_DAY);
  }

  /** `YYYY-MM-DD`. */
  toString(): string {
    return this.toDate().toISOString().slice(0, 10);
  }

  toJSON(): string {
    return this.toString();
  }
}

const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$|^[+-]?(nan|snan|inf|infinity)$/i;

/** An exact decimal number, kept as its text (the wire's; JavaScript numbers would round it). */
export class Decimal {
  readonly text: string;

  /** @throws RangeError `text` is not a decimal number. */
  constructor(text: string) {
    if (!DECIMAL.test(text)) throw new RangeError(`not a decimal: ${JSON.stringify(text)}`);
    this.text = text;
  }

  /** The nearest JavaScript number (inexact). */
  toNumber(): number {
    return Number(this.text);
  }

  toString(): string {
    return this.text;
  }

  toJSON(): string {
    return this.text;
  }
}

/** One cell of a decoded column. */
export type Value =
  | null
  | number
  | bigint
  | string
  | boolean
  | Uint8Array
  | Timestamp
  | CalendarDate
  | Decimal;

/** A key of a row: the key column's value (an integer or a string). */
export type Key = number | bigint | string;

/** A row: column name to value. */
export type Row = Record<string, Value>;
