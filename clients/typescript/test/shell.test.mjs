// The WebSocket shell and Client over an in-memory WebSocket: whole conversations with scripted
// relays, no sockets (the real ones: tests/clients/test_typescript.py).
import assert from "node:assert/strict";
import { test } from "node:test";
import { decode as unpack, encode as pack } from "@msgpack/msgpack";
import { Client, ConnectionFailed, HandshakeRefused, SubscriptionError, box, connect, decodeColumns, encodeColumns } from "../dist/index.js";

const frame = (fields) => pack(fields, { useBigInt64: true });
const EMPTY = { length: 0, columns: [] };
const EPOCH = 1795928540957;

/** Scripted relays by URL: `up` ones answer as `serve` says; the others refuse connections. */
class Relays {
  constructor() {
    this.up = new Map(); // url -> serve(socket, frame)
    this.sockets = [];
    this.received = [];
    const relays = this;
    this.WebSocket = class {
      constructor(url) {
        this.url = url;
        this.open = true;
        relays.sockets.push(this);
        setImmediate(() => (relays.up.has(url) ? this.onopen?.({}) : this.drop(1006)));
      }
      send(data) {
        const message = unpack(data, { useBigInt64: true });
        relays.received.push([this.url, message]);
        setImmediate(() => relays.up.get(this.url)?.(this, message));
      }
      deliver(fields) {
        if (this.open) this.onmessage?.({ data: frame(fields).slice().buffer });
      }
      close(code = 1000) {
        this.drop(code);
      }
      drop(code) {
        if (!this.open) return;
        this.open = false;
        setImmediate(() => this.onclose?.({ code, reason: "" }));
      }
    };
  }

  /** A relay at `url` pushing the agents it is given, from `seq` on, one push per `tick()`. */
  serve(url, { seq = 0, refuse = null, redirect = null } = {}) {
    const relay = { seq, subs: new Map() };
    this.up.set(url, (socket, message) => {
      if (message.type === "hello") return socket.deliver({ type: "welcome", version: 1, server: url, session: "s", datasets: { agents: "space" } });
      if (message.type !== "subscribe") return;
      const sub = Number(message.sub);
      if (refuse) return socket.deliver({ type: "error", code: refuse, message: "no", ref: sub });
      if (redirect && !message.stay) return socket.deliver({ type: "error", code: "redirect", message: "there", ref: sub, location: redirect });
      relay.subs.set(sub, [socket, message]);
      socket.deliver({ type: "subscribed", sub, key: "id", columns: ["id", "x"] });
      if (message.resume) relay.seq = Number(message.resume.seq) + 1;
      else socket.deliver(push(sub, relay.seq++, true, [1, 2]));
    });
    relay.tick = (entered = []) => {
      for (const [sub, [socket]] of relay.subs) socket.deliver(push(sub, relay.seq, false, entered));
      relay.seq += 1;
    };
    return relay;
  }

  down(url) {
    this.up.delete(url);
    for (const socket of this.sockets) if (socket.url === url) socket.drop(1001);
  }
}

function push(sub, seq, full, keys) {
  const entered = keys.length ? encodeColumns({ id: keys, x: keys.map((k) => k / 2) }) : EMPTY;
  return { type: "push", sub, epoch: EPOCH, seq, tick: seq * 10, tick_time: 0, full, entered, updated: EMPTY, left: EMPTY };
}

/** Until `check()` holds: the scripted relays answer on later turns of the event loop. */
const until = async (check) => {
  while (!check()) await new Promise((r) => setTimeout(r, 1));
};

test("shell: connect, subscribe, and iterate a view's updates as rows arrive", async () => {
  const relays = new Relays();
  const relay = relays.serve("ws://a");
  const subscriber = await connect("ws://a", { WebSocket: relays.WebSocket, token: "t0k" });
  assert.equal(relays.received[0][1].token, "t0k");
  const view = await subscriber.subscribe("agents", box([0, 0], [9, 9]));
  relay.tick([3]);
  const seen = [];
  for await (const update of view) {
    seen.push(update.seq);
    if (seen.length === 2) break;
  }
  assert.deepEqual(seen, [0, 1]);
  assert.deepEqual([...view.rows.keys()], [1, 2, 3]);
  await subscriber.close();
  assert.equal(view.error.code, "closed");
});

test("shell: refusals and failures are exceptions", async () => {
  const relays = new Relays();
  relays.serve("ws://a", { refuse: "invalid_view" });
  const subscriber = await connect("ws://a", { WebSocket: relays.WebSocket });
  await assert.rejects(subscriber.subscribe("agents", box([0, 0], [1, 1])), (e) => e instanceof SubscriptionError && e.code === "invalid_view");
  await assert.rejects(connect("ws://nowhere", { WebSocket: relays.WebSocket }), ConnectionFailed);
  relays.up.set("ws://full", (socket) => socket.deliver({ type: "error", code: "unavailable", message: "full" }));
  await assert.rejects(connect("ws://full", { WebSocket: relays.WebSocket }), (e) => e instanceof HandshakeRefused && e.code === "unavailable");
  await assert.rejects(connect("ws://a", {}), /no WebSocket/); // Node.js 20 has none of its own
  relays.up.set("ws://newer", (socket) => socket.deliver({ type: "welcome", version: 2, server: "n", session: "s" }));
  await assert.rejects(connect("ws://newer", { WebSocket: relays.WebSocket }), /relay speaks protocol 2, we speak 1/);
});

test("client: an every view fails over to another relay, resuming after its seq", async () => {
  const relays = new Relays();
  const a = relays.serve("ws://a");
  const client = new Client(["ws://a", "ws://b"], { WebSocket: relays.WebSocket, delay: 0.001 });
  const view = await client.subscribe("agents", box([0, 0], [9, 9]), { mode: "every" });
  a.tick([3]);
  await until(() => view.seq === 1);
  const b = relays.serve("ws://b", { seq: 50 });
  relays.down("ws://a");
  await until(() => client.failovers === 1);
  const [, asked] = relays.received.filter(([url, m]) => url === "ws://b" && m.type === "subscribe")[0];
  assert.equal(asked.resume.epoch, BigInt(EPOCH));
  assert.equal(Number(asked.resume.seq), 1);
  assert.deepEqual(decodeColumns({ ...asked.resume.keys, length: Number(asked.resume.keys.length) }).get("id"), [1, 2, 3]);
  b.tick([4]);
  const seqs = [];
  for await (const update of view) {
    seqs.push(update.seq);
    if (seqs.length === 3) break;
  }
  assert.deepEqual(seqs, [0, 1, 2]); // b continues after seq 1: nothing lost, nothing twice
  assert.deepEqual([...view.rows.keys()], [1, 2, 3, 4]);
  assert.equal(view.gaps, 0);
  await client.close();
  await until(() => view.ended);
  assert.match(view.error.message, /the client was closed/);
});

test("client: a redirect is followed; a relay that cannot be reached makes the first stay", async () => {
  const relays = new Relays();
  relays.serve("ws://a", { redirect: "ws://b" });
  relays.serve("ws://b");
  const client = new Client("ws://a", { WebSocket: relays.WebSocket });
  const view = await client.subscribe("agents", box([0, 0], [1, 1]));
  assert.equal(client.redirects, 1);
  assert.equal(relays.received.at(-1)[0], "ws://b");
  relays.serve("ws://c", { redirect: "ws://gone" });
  const other = new Client("ws://c", { WebSocket: relays.WebSocket });
  const stayed = await other.subscribe("agents", box([0, 0], [1, 1]));
  assert.equal(relays.received.at(-1)[1].stay, true);
  assert.deepEqual([...view.rows.keys(), ...stayed.rows.keys()], [1, 2, 1, 2]);
  await Promise.all([client.close(), other.close()]);
});
