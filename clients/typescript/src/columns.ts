/**
 * Columnar row payloads, decoded and encoded exactly as fanout.wire.columns does
 * (docs/protocol.md, "Columns"): each column is `[name, dtype, data]`; numbers travel as raw
 * little-endian arrays, strings and decimals as a msgpack list (`null` for NULL), bytes in
 * Arrow's binary layout (`length + 1` uint32 offsets, then the values). Any other column
 * holding a NULL is followed by its validity bitmap (dtype `valid`, Arrow's bit order). Every
 * length is checked: a truncated or inconsistent payload is a ProtocolError, never a misread.
 *
 * 64-bit integers decode to numbers when they are safe integers, else to bigints.
 */

import { ProtocolError } from "./errors.js";
import { CalendarDate, Decimal, Timestamp, type Key, type Value } from "./values.js";

export const TIMESTAMP = "<M8[us]";
export const DATE = "<M8[D]";
export const STRING = "str";
export const DECIMAL = "decimal";
export const BYTES = "bytes";
export const VALID = "valid";

/** One column on the wire: `[name, dtype, data]` (a msgpack array). */
export type WireColumn = [string, string, Uint8Array | (string | null)[]];

/** A set of equally long columns, as the wire holds them. */
export interface WireColumns {
  length: number;
  columns: WireColumn[];
}

/** Decoded columns: column name to its values, in order (NULL: `null`). */
export type Columns = Map<string, Value[]>;

type Reader = (view: DataView, offset: number) => Value;

const int64 = (value: bigint): number | bigint =>
  value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(value)
    : value;

/** The numeric dtypes: item size and how one item is read. */
const NUMERIC: ReadonlyMap<string, [number, Reader]> = new Map<string, [number, Reader]>([
  ["<i8", [8, (v, o) => int64(v.getBigInt64(o, true))]],
  ["<u8", [8, (v, o) => int64(v.getBigUint64(o, true))]],
  ["<i4", [4, (v, o) => v.getInt32(o, true)]],
  ["<u4", [4, (v, o) => v.getUint32(o, true)]],
  ["<i2", [2, (v, o) => v.getInt16(o, true)]],
  ["<u2", [2, (v, o) => v.getUint16(o, true)]],
  ["|i1", [1, (v, o) => v.getInt8(o)]],
  ["|u1", [1, (v, o) => v.getUint8(o)]],
  ["|b1", [1, (v, o) => v.getUint8(o) !== 0]],
  ["<f8", [8, (v, o) => v.getFloat64(o, true)]],
  ["<f4", [4, (v, o) => v.getFloat32(o, true)]],
  [TIMESTAMP, [8, (v, o) => new Timestamp(v.getBigInt64(o, true))]],
  [DATE, [8, (v, o) => new CalendarDate(Number(v.getBigInt64(o, true)))]],
]);

/** Whether `payload` is shaped as columns (a map of `length` and `columns`). */
function checkShape(payload: unknown): asserts payload is WireColumns {
  const p = payload as WireColumns;
  if (typeof p !== "object" || p === null || !Array.isArray(p.columns)) {
    throw new ProtocolError("columns: expected {length, columns}");
  }
  if (typeof p.length !== "number" || !Number.isInteger(p.length)) {
    throw new ProtocolError(`columns: length ${String(p.length)} is not an integer`);
  }
  if (p.length < 0) throw new ProtocolError(`columns: negative length ${p.length}`);
  for (const column of p.columns) {
    if (!Array.isArray(column) || column.length !== 3 || typeof column[0] !== "string") {
      throw new ProtocolError("columns: a column is [name, dtype, data]");
    }
    if (typeof column[1] !== "string") throw new ProtocolError(`column ${column[0]}: no dtype`);
  }
}

/**
 * Unpack a payload into columns of values; a column followed by its validity bitmap holds
 * `null` where the bitmap's bit is 0.
 *
 * @throws ProtocolError a column's dtype is unknown, its size disagrees with `length`, a name
 *   repeats, or a validity bitmap does not follow a numeric or bytes column of its name.
 */
export function decodeColumns(payload: unknown): Columns {
  checkShape(payload);
  const length = payload.length;
  const out: Columns = new Map();
  let last: WireColumn | null = null;
  for (const column of payload.columns) {
    const [name, dtype] = column;
    if (dtype === VALID) {
      if (last === null || last[0] !== name || [STRING, DECIMAL, VALID].includes(last[1])) {
        throw new ProtocolError(
          `column '${name}': a validity bitmap must follow the numeric or bytes column of its name`,
        );
      }
      const values = out.get(name)!;
      const valid = decodeValidity(column, length);
      for (let i = 0; i < length; i++) if (!valid[i]) values[i] = null;
    } else if (out.has(name)) {
      throw new ProtocolError(`columns: duplicate column '${name}'`);
    } else {
      out.set(name, decodeColumn(column, length));
    }
    last = column;
  }
  return out;
}

function decodeValidity([name, , data]: WireColumn, length: number): boolean[] {
  const size = (length + 7) >> 3;
  if (!(data instanceof Uint8Array) || data.length !== size) {
    throw new ProtocolError(`column '${name}': a validity bitmap of ${length} rows is ${size} bytes`);
  }
  const valid = new Array<boolean>(length);
  for (let i = 0; i < length; i++) valid[i] = ((data[i >> 3]! >> (i & 7)) & 1) === 1;
  return valid;
}

function decodeColumn(column: WireColumn, length: number): Value[] {
  const [name, dtype, data] = column;
  if (dtype === STRING || dtype === DECIMAL) {
    if (!Array.isArray(data) || data.length !== length) {
      throw new ProtocolError(`column '${name}': expected a list of ${length} strings`);
    }
    return data.map((value) => text(name, dtype, value));
  }
  if (dtype === BYTES) return unpackBytes(name, data, length);
  const numeric = NUMERIC.get(dtype);
  if (numeric === undefined) throw new ProtocolError(`column '${name}': unknown dtype '${dtype}'`);
  if (!(data instanceof Uint8Array)) {
    throw new ProtocolError(`column '${name}': numeric data must be bytes`);
  }
  const [size, read] = numeric;
  if (data.length !== length * size) {
    throw new ProtocolError(
      `column '${name}': ${data.length} bytes, expected ${length} rows x ${size} bytes`,
    );
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const values = new Array<Value>(length);
  for (let i = 0; i < length; i++) values[i] = read(view, i * size);
  return values;
}

function text(name: string, dtype: string, value: unknown): Value {
  if (value === null) return null;
  if (typeof value !== "string") {
    throw new ProtocolError(`column '${name}': expected a list of strings, got ${typeof value}`);
  }
  if (dtype === STRING) return value;
  try {
    return new Decimal(value);
  } catch {
    throw new ProtocolError(`column '${name}': not a decimal: ${JSON.stringify(value)}`);
  }
}

function unpackBytes(name: string, data: unknown, length: number): Value[] {
  const head = 4 * (length + 1);
  if (!(data instanceof Uint8Array) || data.length < head) {
    throw new ProtocolError(`column '${name}': bytes of ${length} rows need ${head} bytes`);
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const offsets = Array.from({ length: length + 1 }, (_, i) => view.getUint32(4 * i, true));
  const ordered = offsets.every((offset, i) => i === 0 || offset >= offsets[i - 1]!);
  if (offsets[0] !== 0 || offsets[length] !== data.length - head || !ordered) {
    throw new ProtocolError(`column '${name}': bytes offsets do not fit the data`);
  }
  return offsets.slice(0, length).map((start, i) => data.subarray(head + start, head + offsets[i + 1]!));
}

/**
 * The keys of a payload that names rows by key (a push's `left`, a resume token).
 *
 * @throws ProtocolError it does not decode, holds rows but no `key` column, or a null key.
 */
export function keyColumn(payload: unknown, key: string, what: string): Key[] {
  const columns = decodeColumns(payload);
  const keys = columns.get(key);
  if (keys === undefined) {
    if ((payload as WireColumns).length) {
      throw new ProtocolError(`${what}: ${(payload as WireColumns).length} rows without the key column '${key}'`);
    }
    return [];
  }
  if (keys.some((k) => k === null)) throw new ProtocolError(`${what}: the key column '${key}' holds a null`);
  return keys as Key[];
}

// -- encoding (resume tokens, publish) ---------------------------------------------------------

/**
 * Pack equally long columns of values (`null`: NULL) into a payload, each column's dtype taken
 * from its values as fanout.wire.columns.from_values does: integers (numbers or bigints)
 * `<i8`, other numbers `<f8`, booleans `|b1`, strings `str`, `Uint8Array` `bytes`,
 * `Timestamp`/`Date` `<M8[us]`, `CalendarDate` `<M8[D]`, `Decimal` `decimal`.
 *
 * @throws RangeError the columns differ in length, or a column mixes kinds of values.
 */
export function encodeColumns(columns: Map<string, readonly Value[]> | Record<string, readonly Value[]>): WireColumns {
  const entries = columns instanceof Map ? [...columns] : Object.entries(columns);
  const out: WireColumn[] = [];
  let length: number | null = null;
  for (const [name, values] of entries) {
    if (length === null) length = values.length;
    else if (values.length !== length) {
      throw new RangeError(`column '${name}' has ${values.length} rows, expected ${length}`);
    }
    out.push(...encodeColumn(name, values));
  }
  return { length: length ?? 0, columns: out };
}

type Kind = "int" | "float" | "bool" | "str" | "bytes" | "timestamp" | "date" | "decimal";

function kindOf(value: Exclude<Value, null> | Date): Kind {
  if (typeof value === "bigint") return "int";
  if (typeof value === "number") return Number.isInteger(value) ? "int" : "float";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "string") return "str";
  if (value instanceof Uint8Array) return "bytes";
  if (value instanceof Date) return "timestamp";
  if (value instanceof CalendarDate) return "date";
  if (value instanceof Decimal) return "decimal";
  throw new RangeError(`a value of type ${typeof value} cannot travel`);
}

function encodeColumn(name: string, values: readonly Value[]): WireColumn[] {
  const present = values.filter((v): v is Exclude<Value, null> => v !== null);
  const kinds = new Set(present.map(kindOf));
  if (kinds.has("int") && kinds.has("float")) kinds.delete("int");
  if (kinds.size > 1) throw new RangeError(`column '${name}' mixes ${[...kinds].join(", ")} values`);
  const kind: Kind = kinds.values().next().value ?? "int";
  const nulls = values.length - present.length;
  if (kind === "str" || kind === "decimal") {
    return [[name, kind === "str" ? STRING : DECIMAL, values.map((v) => (v === null ? null : String(v)))]];
  }
  const column: WireColumn =
    kind === "bytes" ? [name, BYTES, packBytes(values as (Uint8Array | null)[])] : [name, ...numeric(kind, values)];
  if (nulls === 0) return [column];
  return [column, [name, VALID, validity(values.map((v) => v !== null))]];
}

function numeric(kind: Kind, values: readonly Value[]): [string, Uint8Array] {
  const size = kind === "bool" ? 1 : 8;
  const data = new Uint8Array(values.length * size);
  const view = new DataView(data.buffer);
  values.forEach((value, i) => {
    if (value === null) return; // zeros under a 0 validity bit
    switch (kind) {
      case "int": {
        const integer = BigInt(value as number | bigint);
        if (integer < -(2n ** 63n) || integer >= 2n ** 63n) throw new RangeError(`${integer} does not fit in int64`);
        view.setBigInt64(i * 8, integer, true);
        break;
      }
      case "float":
        view.setFloat64(i * 8, value as number, true);
        break;
      case "bool":
        view.setUint8(i, value ? 1 : 0);
        break;
      case "timestamp":
        view.setBigInt64(i * 8, Timestamp.fromDate(value as Date).micros, true);
        break;
      case "date":
        view.setBigInt64(i * 8, BigInt((value as CalendarDate).days), true);
        break;
      default:
        throw new RangeError(`a ${kind} value is not a number`);
    }
  });
  const dtype = { int: "<i8", float: "<f8", bool: "|b1", timestamp: TIMESTAMP, date: DATE }[kind as string]!;
  return [dtype, data];
}

/** The wire's validity bitmap of `valid` (true: the row holds a value). */
export function validity(valid: readonly boolean[]): Uint8Array {
  const bits = new Uint8Array((valid.length + 7) >> 3);
  valid.forEach((v, i) => {
    if (v) bits[i >> 3]! |= 1 << (i & 7);
  });
  return bits;
}

/** Bytes values (null: packed as empty) in the wire's layout: offsets, then data. */
export function packBytes(values: readonly (Uint8Array | null)[]): Uint8Array {
  const total = values.reduce((sum, v) => sum + (v?.length ?? 0), 0);
  const head = 4 * (values.length + 1);
  const out = new Uint8Array(head + total);
  const view = new DataView(out.buffer);
  let offset = 0;
  values.forEach((value, i) => {
    if (value !== null) out.set(value, head + offset);
    offset += value?.length ?? 0;
    view.setUint32(4 * (i + 1), offset, true);
  });
  return out;
}
