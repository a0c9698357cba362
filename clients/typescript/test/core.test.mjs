// The sans-I/O core: frames in (as the relay encodes them), events and state out.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { encode as pack } from "@msgpack/msgpack";
import { ClientCore, ProtocolError, SubscriptionError, box, checkWelcome, decode, decodeColumns, encodeColumns, sql } from "../dist/index.js";

const [fixture] = JSON.parse(readFileSync(new URL("fixtures/frames.json", import.meta.url)));
const hex = (text) => Uint8Array.from(text.match(/../g), (h) => parseInt(h, 16));
const VIEW = box([0, 0], [10, 10]);
const asked = (mode = "latest", view = VIEW) => ({ dataset: "agents", view, rate: 10, priority: 0, transform: null, mode });
const frame = (fields) => pack(fields, { useBigInt64: true });
const columns = (values) => encodeColumns(values);
const EMPTY = { length: 0, columns: [] };
const push = (sub, seq, { full = false, entered = EMPTY, updated = EMPTY, left = EMPTY } = {}) =>
  frame({ type: "push", sub, epoch: 7, seq, tick: seq * 10, tick_time: 1.5, full, entered, updated, left });
const noUpdate = (sub, seq) => frame({ type: "no_update", sub, epoch: 7, seq, tick: seq * 10 });

/** A core holding one view, subscribed and answered. */
function holding(mode = "latest", buffer = 256) {
  const core = new ClientCore(buffer);
  const request = core.subscribe(asked(mode));
  assert.deepEqual(core.receiveData(frame({ type: "subscribed", sub: request.sub, key: "id", columns: ["id", "x"] }), 0), [{ type: "held", sub: request.sub }]);
  return [core, core.view(request.sub)];
}

test("core: frames encoded by fanout.wire make the rows the Python client holds", () => {
  const [welcome, subscribed, full, none, delta] = fixture.frames.map(hex);
  assert.deepEqual(checkWelcome(decode(welcome)).datasets, { agents: "space" });
  const core = new ClientCore();
  assert.equal(core.subscribe(asked()).sub, 1);
  assert.deepEqual(core.receiveData(subscribed, 0), [{ type: "held", sub: 1 }]);
  const [{ update }] = core.receiveData(full, 100);
  assert.equal(update.full, true);
  assert.equal(update.epoch, 1764391645000);
  assert.deepEqual([...core.view(1).rows], [[1, { id: 1, x: 0.5 }], [2, { id: 2, x: null }]]);
  core.receiveData(none, 101);
  core.receiveData(delta, 102);
  assert.deepEqual([...core.view(1).rows.keys()], [2]);
  assert.deepEqual(core.view(1).pending.map((u) => [u.seq, u.left]), [[3, []], [4, []], [5, [1]]]);
});

test("core: a push applies entered, updated and left rows in order; a full push starts again", () => {
  const [core, state] = holding();
  core.receiveData(push(1, 1, { full: true, entered: columns({ id: [1, 2, 3], x: [0.5, null, 2] }) }), 0);
  core.receiveData(push(1, 2, { updated: columns({ id: [2], x: [9] }), left: columns({ id: [1] }) }), 0);
  assert.deepEqual(Object.fromEntries(state.rows), { 2: { id: 2, x: 9 }, 3: { id: 3, x: 2 } });
  core.receiveData(push(1, 3, { full: true, entered: columns({ id: [4], x: [1] }) }), 0);
  assert.deepEqual([...state.rows.keys()], [4]);
  assert.equal(state.updates, 3);
});

test("core: a latest view drops its oldest notifications past its buffer, never rows", () => {
  const [core, state] = holding("latest", 2);
  core.receiveData(push(1, 1, { full: true, entered: columns({ id: [1], x: [1] }) }), 0);
  core.receiveData(push(1, 2, { entered: columns({ id: [2], x: [2] }) }), 0);
  core.receiveData(noUpdate(1, 3), 0);
  assert.deepEqual(state.pending.map((u) => u.seq), [2, 3]);
  assert.equal(state.dropped, 1);
  assert.deepEqual([...state.rows.keys()], [1, 2]);
});

test("core: an every view keeps every notification and counts a missing seq", () => {
  const [core, state] = holding("every", 2);
  core.receiveData(push(1, 1, { full: true }), 0);
  for (const seq of [2, 3, 5]) core.receiveData(noUpdate(1, seq), 0);
  assert.deepEqual(state.pending.map((u) => u.seq), [1, 2, 3, 5]);
  assert.equal(state.dropped, 0);
  assert.equal(state.gaps, 1);
});

test("core: a push that does not decode changes nothing and breaks the connection", () => {
  const [core, state] = holding();
  core.receiveData(push(1, 1, { full: true, entered: columns({ id: [1], x: [1] }) }), 0);
  const keyless = push(1, 2, { entered: columns({ x: [5] }), left: columns({ id: [1] }) });
  assert.throws(() => core.receiveData(keyless, 0), (e) => e instanceof ProtocolError && /without the key column 'id'/.test(e.message));
  assert.deepEqual([...state.rows.keys()], [1]);
  assert.throws(() => core.receiveData(push(9, 1), 0), /unexpected frame/);
  assert.throws(() => core.receiveData(frame({ type: "subscribed", sub: 5, key: "id", columns: [] }), 0), /unexpected frame/);
});

test("core: malformed frames are ProtocolErrors naming the problem", () => {
  assert.throws(() => decode("{}"), /text messages/);
  assert.throws(() => decode(new Uint8Array([0xc1])), /malformed frame/);
  assert.throws(() => decode(frame({ type: "gossip" })), /unknown frame type "gossip"/);
  assert.throws(() => decode(frame({ type: "push", sub: 1 })), /push lacks required field `epoch`/);
  assert.throws(() => decode(frame({ type: "unsubscribed", sub: "1" })), /unsubscribed.sub has the wrong type/);
  // fields a newer relay adds are ignored; missing ones with defaults take them
  assert.deepEqual(decode(frame({ type: "error", code: "x", message: "y", hint: 1 })), { type: "error", code: "x", message: "y", ref: null, location: null });
});

test("core: a resume token holds the view's keys and position; the new view takes over", () => {
  const [core, state] = holding("every");
  core.receiveData(push(1, 4, { full: true, entered: columns({ id: [3, 1], x: [0, 0] }) }), 0);
  const token = state.token();
  assert.deepEqual([token.epoch, token.seq], [7, 4]);
  assert.deepEqual([...decodeColumns(token.keys).get("id")], [1, 3]);
  const again = new ClientCore();
  const request = again.subscribe(asked("every"), { resume: state });
  assert.deepEqual(request.resume, token);
  again.receiveData(frame({ type: "subscribed", sub: request.sub, key: "id", columns: ["id", "x"] }), 0);
  const resumed = again.view(request.sub);
  assert.deepEqual([...resumed.rows.keys()], [3, 1]);
  assert.deepEqual(resumed.pending.map((u) => u.seq), [4]);
  assert.deepEqual(state.pending, []);
  assert.throws(() => again.subscribe(asked("latest"), { resume: state }), RangeError);
  assert.throws(() => again.subscribe(asked("every", sql("SELECT 1")), { resume: state }), RangeError);
});

test("core: errors refuse requests, end views, count resyncs, or hand views over", () => {
  const [core, state] = holding("every");
  core.receiveData(frame({ type: "error", code: "resync", message: "gone", ref: 1 }), 0);
  assert.equal(state.resyncs, 1);
  const refused = core.subscribe(asked());
  const [event] = core.receiveData(frame({ type: "error", code: "invalid_view", message: "bad", ref: refused.sub }), 0);
  assert.equal(event.type, "refused");
  assert.equal(event.error.code, "invalid_view");
  core.followsMoves = true;
  const [moved] = core.receiveData(frame({ type: "error", code: "redirect", message: "there", ref: 1, location: "ws://b" }), 0);
  assert.deepEqual([moved.type, moved.location, moved.state], ["moved", "ws://b", state]);
  assert.equal(core.view(1), undefined);
  core.receiveData(frame({ type: "error", code: "busy", message: "about nothing" }), 0);
  assert.equal(core.errors.length, 1);
});

test("core: a failed connection ends its views, or hands them over when it rehomes", () => {
  const [core, state] = holding();
  const waiting = core.subscribe(asked());
  const failure = new SubscriptionError("closed", "gone");
  const events = core.fail(failure);
  assert.deepEqual(events.map((e) => e.type), ["ended", "refused"]);
  assert.equal(state.error, failure);
  assert.equal(events[1].sub, waiting.sub);
  assert.throws(() => core.subscribe(asked()), SubscriptionError);
  const [other, kept] = holding();
  other.rehomes = true;
  assert.deepEqual(other.fail(failure).map((e) => [e.type, e.state]), [["stranded", kept]]);
  assert.equal(kept.ended, false);
});

test("core: integers past 32 bits travel as msgpack integers, not floats", async () => {
  const { decode: unpack } = await import("@msgpack/msgpack");
  const { encode } = await import("../dist/index.js");
  const frame = { type: "subscribe", sub: 1, dataset: "a", view: box([0, 0], [1, 1]), rate: 2.5, priority: 0, transform: null, mode: "every", resume: { epoch: 1795928540957, seq: 3, keys: EMPTY }, stay: false };
  const bytes = encode(frame);
  const epoch = bytes.indexOf(0xcf); // uint64, where a float64 would be 0xcb
  assert.ok(epoch > 0);
  assert.equal(unpack(bytes, { useBigInt64: true }).resume.epoch, 1795928540957n);
  assert.equal(unpack(bytes).rate, 2.5);
});

test("core: a view's relevance (rate tiers, priority from its rows) goes with its subscribe and its changes", () => {
  const core = new ClientCore();
  const relevance = { tiers: [{ beyond: 20, every: 3 }], priority_from: "nearest" };
  const request = core.subscribe({ ...asked(), relevance });
  assert.deepEqual(request.relevance, relevance);
  core.receiveData(frame({ type: "subscribed", sub: request.sub, key: "id", columns: ["id", "x"] }), 0);
  assert.deepEqual(core.change(core.view(request.sub), box([5, 5], [15, 15])).relevance, relevance);
  assert.equal(core.subscribe(asked()).relevance, null);
});

test("core: a view's transducer goes with its subscribe and its changes (a relay refuses changing it)", () => {
  const core = new ClientCore();
  const transduce = { name: "window", params: { query: "SELECT floor(x) AS cell, count(*) AS n FROM history GROUP BY cell", ticks: 10 } };
  const request = core.subscribe({ ...asked("every"), transduce });
  assert.deepEqual(request.transduce, transduce);
  core.receiveData(frame({ type: "subscribed", sub: request.sub, key: "cell", columns: ["cell", "n"] }), 0);
  assert.deepEqual(core.change(core.view(request.sub), box([5, 5], [15, 15])).transduce, transduce);
  assert.equal(core.subscribe(asked()).transduce, null);
});
