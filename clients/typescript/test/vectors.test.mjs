// The protocol's test vectors (spec/vectors/*.json, spec/README.md): the frames a subscriber
// receives decode to their meaning, malformed ones are refused as protocol errors and newer
// peers' ones accepted; the frames it sends encode to their meaning, and the malformed views a
// relay refuses are refused by the view builders. Vectors of the publisher's links
// (to_publisher, from_publisher) are not a subscriber's business: skipped, saying so.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { decode as unpack, encode as pack } from "@msgpack/msgpack";
import {
  CalendarDate, ClientCore, Decimal, HandshakeRefused, ProtocolError, SubscriptionError, Timestamp,
  InvalidView, box, checkWelcome, connect, decode, decodeColumns, encode, hello, sector, topic, union,
} from "../dist/index.js";

const FOLDER = new URL("../../../spec/vectors/", import.meta.url);
const hex = (text) => Uint8Array.from(text.match(/../g) ?? [], (h) => parseInt(h, 16));
const toHex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

/** The directions whose frames a subscriber never sees nor sends, and why. */
const SKIPPED = {
  to_publisher: "frames relays, readers and producers send the publisher: not a subscriber's",
  from_publisher: "frames the publisher sends relays and readers: not a subscriber's",
};

/** Fields a frame's typed form holds when the bytes leave them out (fanout.wire.messages). */
const DEFAULTS = {
  hello: { name: "", capabilities: [], resume: {}, token: "" },
  subscribe: {
    rate: 10, priority: 0, transform: null, mode: "latest", resume: null, stay: false, relevance: null, transduce: null,
    confirmed: false,
  },
  push: { provisional: false },
  welcome: { datasets: {} },
  error: { ref: null, location: null },
};
const TRANSFORM = { columns: null, precision: "float64", quantum: 0, relative_to: null };
const RELEVANCE = { tiers: [], focus: null, priority_from: "given" };
const TRANSDUCE = { params: {} };

/** A msgpack value (decoded with bigints) in the spec's JSON rendering. */
function rendered(value) {
  if (value instanceof Uint8Array) return { $bin: toHex(value) };
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : value;
  if (typeof value === "number" && !Number.isFinite(value)) return { $float: String(value) };
  if (Array.isArray(value)) return value.map(rendered);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, rendered(v)]));
  }
  return value;
}

/** The spec's JSON rendering read back as values the client sends (`$bin`: Uint8Array). */
function unrendered(value) {
  if (Array.isArray(value)) return value.map(unrendered);
  if (value === null || typeof value !== "object") return value;
  if ("$bin" in value) return hex(value.$bin);
  if ("$float" in value) return Number(value.$float);
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, unrendered(v)]));
}

/** A rendered frame with every default a typed decoder fills in (spec/README.md, `frame`). */
function typed(frame) {
  const out = { ...DEFAULTS[frame.type], ...frame };
  if (out.type === "subscribe") {
    if (out.transform !== null) out.transform = { ...TRANSFORM, ...out.transform };
    if (out.relevance !== null) out.relevance = { ...RELEVANCE, ...out.relevance };
    if (out.transduce !== null) out.transduce = { ...TRANSDUCE, ...out.transduce };
  }
  return out;
}

/** A decoded value in the spec's row rendering (`rows` of a vector). */
function cell(value) {
  if (value instanceof Timestamp) return value.toMicrosISOString();
  if (value instanceof CalendarDate) return value.toString();
  if (value instanceof Decimal) return value.text;
  return rendered(value);
}

/** Each Columns field of `frame` decoded: field -> column -> values, as `rows` renders them. */
function rowsOf(frame, fields) {
  return Object.fromEntries(fields.map((field) => {
    const columns = decodeColumns(frame[field]);
    return [field, Object.fromEntries([...columns].map(([name, values]) => [name, values.map(cell)]))];
  }));
}

/** A core whose hello was answered and which holds subscription 1, keyed by `key`. */
function holding(key) {
  const core = new ClientCore();
  const asked = { dataset: "agents", view: { kind: "box", lo: [0, 0], hi: [1, 1] }, rate: 10, priority: 0, transform: null, mode: "every" };
  core.subscribe(asked);
  core.receive({ type: "subscribed", sub: 1, key, columns: [key] }, 0);
  return [core, core.view(1)];
}

/** Each direction's vector files, by kind ("", "compatible_", "malformed_"). */
const files = readdirSync(FOLDER).filter((name) => name.endsWith(".json")).sort();
const ran = new Map(); // file -> vectors checked

/**
 * Register `check` as one test per vector of `file`, counting those it checked; a check that
 * returns a reason has nothing to check in that vector: skipped, saying why.
 */
function each(file, check) {
  const { vectors } = JSON.parse(readFileSync(new URL(file, FOLDER)));
  ran.set(file, 0);
  for (const vector of vectors) {
    test(`vectors: ${file.replace(".json", "")} ${vector.name}`, async (t) => {
      const skipped = await check(vector);
      if (typeof skipped === "string") return t.skip(skipped);
      ran.set(file, ran.get(file) + 1);
    });
  }
}

/** A frame a subscriber receives decodes to its meaning (and its rows, when it has any). */
function receives(vector) {
  const frame = decode(hex(vector.hex));
  assert.deepEqual(rendered(frame), typed(vector.decoded));
  if (vector.rows !== undefined) assert.deepEqual(rowsOf(frame, Object.keys(vector.rows)), vector.rows);
  if (frame.type === "welcome") assert.equal(checkWelcome(frame), frame);
}

/** A newer relay's frame is accepted: the typed frame holds every field, unknown ones gone. */
function acceptsNewer(vector) {
  const frame = decode(hex(vector.hex));
  assert.deepEqual(rendered(frame), vector.frame);
  if (frame.type === "welcome") assert.equal(checkWelcome(frame), frame);
  if (frame.type === "push") {
    const [core, view] = holding("id");
    core.receive(frame, 0);
    assert.deepEqual([...view.rows.keys()], rowsOf(frame, ["entered"]).entered.id ?? []);
  }
}

/**
 * A relay over an in-memory WebSocket (no sockets): answers the hello with `first` (default a
 * welcome), a subscribe with `subscribed` keyed by `key` and a full push of key 9.
 */
function scriptedRelay(key, first = null) {
  const frame = (fields) => pack(fields, { useBigInt64: true });
  return class {
    constructor() {
      this.closedWith = null;
      setImmediate(() => this.onopen?.({}));
      scriptedRelay.last = this;
    }
    send(data) {
      const message = unpack(data, { useBigInt64: true });
      if (message.type === "hello") {
        this.deliver(first ?? frame({ type: "welcome", version: 1, server: "r", session: "s", datasets: { agents: "space" } }));
      } else if (message.type === "subscribe") {
        const sub = Number(message.sub);
        this.deliver(frame({ type: "subscribed", sub, key, columns: [key] }));
        this.deliver(frame({ type: "push", sub, epoch: 1, seq: 0, tick: 0, tick_time: 0, full: true,
          entered: { length: 1, columns: [[key, "<i8", hex("0900000000000000")]] },
          updated: { length: 0, columns: [] }, left: { length: 0, columns: [] } }));
      }
    }
    deliver(bytes) {
      setImmediate(() => this.onmessage?.({ data: bytes.slice().buffer }));
    }
    close(code = 1000) {
      this.closedWith ??= code;
    }
  };
}

/**
 * A malformed frame is refused as a protocol error, and no row of it is applied: as the first
 * frame, `connect` fails with a ProtocolError (not a relay's refusal, HandshakeRefused); after
 * it, every view of the connection ends with SubscriptionError `protocol`, its rows as they
 * were, and the client closes the WebSocket with 1002 (protocol error).
 */
async function refuses(vector) {
  assert.deepEqual(vector.expect, { refuse: "protocol" });
  const bytes = hex(vector.hex);
  const isProtocolError = (e) => e instanceof ProtocolError && !(e instanceof HandshakeRefused);
  const key = vector.context?.key ?? "id";
  if (!vector.after_hello) {
    await assert.rejects(connect("ws://relay", { WebSocket: scriptedRelay(key, bytes) }), isProtocolError);
    assert.equal(scriptedRelay.last.closedWith, 1002);
    return;
  }
  const subscriber = await connect("ws://relay", { WebSocket: scriptedRelay(key) });
  const socket = scriptedRelay.last;
  const view = await subscriber.subscribe("agents", box([0, 0], [1, 1]), { mode: "every" });
  while (view.seq < 0) await new Promise((r) => setImmediate(r));
  const before = [...view.rows];
  assert.deepEqual(before.map(([k]) => k), [9]);
  socket.deliver(bytes);
  await subscriber.closed;
  assert.equal(socket.closedWith, 1002);
  assert.ok(view.error instanceof SubscriptionError && view.error.code === "protocol", String(view.error));
  assert.deepEqual([...view.rows], before);
  if (vector.context === undefined) {
    // Without a key to hold, the columnar rules alone refuse it (not its rows' lacking one).
    assert.throws(() => ["entered", "updated", "left"].forEach((field) => decodeColumns(decode(bytes)[field])), isProtocolError);
  }
}

/**
 * A frame a subscriber sends: the client's encoder writes its meaning (values compared, not
 * bytes: fanout's encoder leaves defaults out and JavaScript has no float 1.0); the frames the
 * client builds itself (hello, subscribe, unsubscribe) are built from the meaning's arguments.
 */
function sends(vector) {
  const meaning = vector.decoded ?? vector.frame;
  if (vector.decoded !== undefined) assert.deepEqual(rendered(unpack(hex(vector.hex), { useBigInt64: true })), vector.decoded);
  const written = rendered(unpack(encode(unrendered(meaning)), { useBigInt64: true }));
  assert.deepEqual(typed(written), typed(meaning));
  const built = builtBy(typed(meaning));
  if (built !== null) assert.deepEqual(typed(rendered(unpack(encode(built), { useBigInt64: true }))), typed(meaning));
}

/** The frame as the client's own API makes it, or null where the API takes other inputs. */
function builtBy(frame) {
  switch (frame.type) {
    case "hello":
      return hello({ name: frame.name, capabilities: frame.capabilities, token: frame.token });
    case "subscribe": {
      if (frame.resume !== null) return null; // a resume token is a held view's (core.test.mjs)
      const { dataset, view, rate, priority, transform, mode, relevance, transduce, stay } = frame;
      const core = new ClientCore();
      for (let sub = 1; sub < frame.sub; sub++) core.withdraw(core.subscribe({ dataset, view, rate, priority, transform, mode }).sub);
      return core.subscribe({ dataset, view, rate, priority, transform, mode, relevance, transduce }, { stay });
    }
    case "unsubscribe": {
      const [core, view] = holding("id");
      for (let sub = 2; sub <= frame.sub; sub++) core.receive({ type: "subscribed", sub: core.subscribe(view.asked).sub, key: "id", columns: [] }, 0);
      return core.unsubscribe(core.view(frame.sub));
    }
    default:
      return null; // publish: its columns are checked by encode above and by columns.test.mjs
  }
}

/**
 * The client's view builders, by the kind of view they make (`sql`: not here, only the relay
 * parses SQL; `sphere`, `meet`, ...: no vector needs them).
 */
const BUILDERS = {
  box: (v) => () => box(v.lo, v.hi),
  sector: (v) => () => sector(v.center, v.radius, v.heading, v.half_angle),
  union: (v) => () => union(...v.members.map((m) => BUILDERS[m.kind](m)())),
  topic: (v) => () => topic(v.filter),
};

/**
 * A malformed frame sent to a relay: what the relay answers is the relay's business (Python's
 * tests send each to a real relay); the client's part is never to write one. Its encoder writes
 * only well-formed frames of its own types, so the vectors where it has a say are the views
 * its builders must refuse (InvalidView) before anything is sent.
 */
function neverWrites(vector) {
  let frame;
  try {
    frame = unpack(hex(vector.hex));
  } catch {
    return `${vector.name}: not msgpack, which the encoder cannot write`;
  }
  const kind = frame?.view?.kind;
  if (frame?.type !== "subscribe" || typeof frame.sub !== "number" || kind === undefined) {
    return `${vector.name}: not a frame of the client's types (${JSON.stringify(frame).slice(0, 60)}): it cannot build one`;
  }
  if (!vector.after_hello) return `${vector.name}: a subscribe before the hello, which connect never sends`;
  if (kind === "sql") return `${vector.name}: SQL is parsed by the relay; the client sends its text`;
  if (!(kind in BUILDERS)) return `${vector.name}: a ${kind} view, which the client has no builder for`;
  assert.throws(BUILDERS[kind](frame.view), InvalidView);
  return null;
}

const CHECKS = {
  to_subscriber: receives,
  compatible_to_subscriber: acceptsNewer,
  malformed_to_subscriber: refuses,
  to_relay: sends,
  compatible_to_relay: sends,
  malformed_to_relay: neverWrites,
};

for (const file of files) {
  const name = file.replace(".json", "");
  const direction = name.replace(/^(compatible|malformed)_/, "");
  if (direction in SKIPPED) {
    test(`vectors: ${name} skipped: ${SKIPPED[direction]}`, { skip: SKIPPED[direction] }, () => {});
  } else if (name in CHECKS) {
    each(file, CHECKS[name]);
  } else {
    test(`vectors: ${file} is a direction this test knows`, () => assert.fail(`unknown vector file ${file}`));
  }
}

test("vectors: every file the client is concerned with ran, not vacuously", () => {
  assert.deepEqual([...ran.keys()].sort(), Object.keys(CHECKS).map((n) => `${n}.json`).sort());
  const total = [...ran.values()].reduce((a, b) => a + b, 0);
  assert.ok(total >= 40, `only ${total} vectors ran`);
  for (const [file, count] of ran) assert.ok(count > 0, `${file} holds no vector`);
});
