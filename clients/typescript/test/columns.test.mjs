// The columnar decoding against payloads encoded by fanout.wire.columns (fixtures/columns.json,
// written by make_fixtures.py), and encoding checked by decoding random columns back.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { decode as msgpack, encode as pack } from "@msgpack/msgpack";
import { CalendarDate, Decimal, ProtocolError, Timestamp, decodeColumns, encodeColumns } from "../dist/index.js";

const fixtures = JSON.parse(readFileSync(new URL("fixtures/columns.json", import.meta.url)));
const hex = (text) => Uint8Array.from(text.match(/../g) ?? [], (h) => parseInt(h, 16));
const toHex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

/** A decoded value as make_fixtures.py's tagged JSON. */
function tagged(value) {
  if (value === null || typeof value === "boolean" || typeof value === "string") return value;
  if (typeof value === "bigint") return { int: value.toString() };
  if (typeof value === "number") return value;
  if (value instanceof Timestamp) return { timestamp: value.micros.toString() };
  if (value instanceof CalendarDate) return { date: value.days };
  if (value instanceof Decimal) return { decimal: value.text };
  if (value instanceof Uint8Array) return { bytes: toHex(value) };
  throw new TypeError(`unexpected ${value}`);
}

/** The fixture's expectation, floats read as numbers (Python's repr is not JavaScript's). */
function expected(value) {
  if (value !== null && typeof value === "object" && "float" in value) return Number(value.float);
  return value;
}

for (const fixture of fixtures) {
  test(`columns: ${fixture.name}`, () => {
    const payload = msgpack(hex(fixture.msgpack), { useBigInt64: true });
    if (fixture.error) {
      assert.throws(() => decodeColumns(normalise(payload)), (e) => e instanceof ProtocolError && e.message.includes(fixture.error));
      return;
    }
    const decoded = decodeColumns(normalise(payload));
    assert.deepEqual([...decoded.keys()], Object.keys(fixture.columns));
    for (const [name, values] of decoded) {
      assert.deepEqual(values.map(tagged), fixture.columns[name].map(expected), name);
    }
  });
}

/** msgpack's small integers come as numbers, `length` too: as frames.decode leaves them. */
function normalise(payload) {
  return { ...payload, length: Number(payload.length) };
}

test("columns: decoded timestamps are Dates with exact microseconds", () => {
  const at = new Timestamp(-1n);
  assert.equal(at.getTime(), -1);
  assert.equal(at.toMicrosISOString(), "1969-12-31T23:59:59.999999Z");
  assert.equal(new Timestamp(1795927645123456n).toMicrosISOString(), "2026-11-29T04:47:25.123456Z");
  assert.equal(new CalendarDate(20786).toString(), "2026-11-29");
  assert.equal(CalendarDate.parse("1969-12-31").days, -1);
  assert.throws(() => new Decimal("1.2.3"), RangeError);
});

/** A small seeded generator: the same cases on every run. */
function random(seed) {
  let state = seed;
  return () => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state / 2147483648;
  };
}

const KINDS = {
  int: (r) => Math.floor(r() * 2e9) - 1e9,
  big: (r) => BigInt(Math.floor(r() * 1e8) - 5e7) * 100_000_000_000n,
  float: (r) => (r() < 0.1 ? NaN : r() * 1e6 - 5e5 + 0.5),
  bool: (r) => r() < 0.5,
  str: (r) => "s".repeat(Math.floor(r() * 4)) + String(Math.floor(r() * 100)),
  bytes: (r) => Uint8Array.from({ length: Math.floor(r() * 5) }, () => Math.floor(r() * 256)),
  timestamp: (r) => new Timestamp(BigInt(Math.floor(r() * 4e15)) - 2_000_000_000_000_000n),
  date: (r) => new CalendarDate(Math.floor(r() * 40000) - 20000),
  decimal: (r) => new Decimal((r() * 1000 - 500).toFixed(3)),
};

test("columns: random columns with nulls decode to what was encoded", () => {
  const r = random(42);
  for (let round = 0; round < 200; round++) {
    const length = Math.floor(r() * 20);
    const columns = {};
    for (const [kind, make] of Object.entries(KINDS)) {
      if (r() < 0.5) continue;
      const nulls = r() < 0.5 ? 0 : r();
      columns[kind] = Array.from({ length }, () => (r() < nulls ? null : make(r)));
    }
    const payload = msgpack(pack(encodeColumns(columns), { useBigInt64: true }), { useBigInt64: true });
    const decoded = decodeColumns(normalise(payload));
    for (const [name, values] of Object.entries(columns)) {
      const want = values.map((v) => (typeof v === "bigint" && v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v));
      assert.deepEqual(decoded.get(name).map(tagged), want.map(tagged), `${name} in round ${round}`);
    }
  }
});

test("columns: a column mixing kinds of values is refused when encoding", () => {
  assert.throws(() => encodeColumns({ x: [1, "a"] }), /mixes/);
  assert.throws(() => encodeColumns({ x: [1, 2], y: [1] }), /has 1 rows, expected 2/);
  assert.throws(() => encodeColumns({ x: [2n ** 63n] }), /does not fit in int64/);
});
