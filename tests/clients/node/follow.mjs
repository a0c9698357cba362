// Hold one view with the TypeScript client (the built package at $FANOUT_CLIENT) and print each
// update as one JSON line, shaped as the HTTP stream's push and no_update events (docs/http.md),
// values tagged as clients/typescript/test/make_fixtures.py tags them. Run by
// tests/clients/test_typescript.py: node follow.mjs '{"relays": [...], "dataset": ..., "view": ...}'
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = process.env.FANOUT_CLIENT;
const fanout = await import(pathToFileURL(join(root, "dist", "index.js")).href);
const { WebSocket } = createRequire(join(root, "package.json"))("ws");
const { CalendarDate, Client, Decimal, Timestamp, connect, isNoUpdate } = fanout;

const spec = JSON.parse(process.argv[2]);
const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

function tagged(value) {
  if (typeof value === "bigint") return { int: value.toString() };
  if (typeof value === "number" && !Number.isFinite(value)) return { float: String(value) };
  if (value instanceof Timestamp) return { timestamp: value.micros.toString() };
  if (value instanceof CalendarDate) return { date: value.days };
  if (value instanceof Decimal) return { decimal: value.text };
  if (value instanceof Uint8Array) return { bytes: hex(value) };
  return value;
}
const row = (r) => Object.fromEntries(Object.entries(r).map(([name, value]) => [name, tagged(value)]));
const print = (event) => process.stdout.write(JSON.stringify(event) + "\n");

// Rows to write first, through the relay: {"publish": {"dataset": ..., "rows": [...]}}
if (spec.publish) {
  const writer = await connect(spec.relays[0], { WebSocket });
  const [first, last] = await writer.publish(spec.publish.dataset, spec.publish.rows);
  print({ type: "published", first, last });
  await writer.close();
}
// A view given as [builder, ...arguments]: ["box", [0, 0], [100, 100]], ["sql", "SELECT ..."]
const view = fanout[spec.view[0]](...spec.view.slice(1));
const client = new Client(spec.relays, { WebSocket, token: spec.token ?? "", delay: 0.2, maxDelay: 1 });
const options = { mode: spec.mode ?? "latest", rate: spec.rate ?? 10, transform: spec.transform ?? null };
try {
  const live = await client.subscribe(spec.dataset, view, options);
  print({ type: "subscribed", key: live.key, columns: live.columns });
  for await (const update of live) {
    print({
      type: isNoUpdate(update) && !update.full ? "no_update" : "push",
      epoch: update.epoch, seq: update.seq, tick: update.tick, full: update.full,
      entered: update.entered.map(row), updated: update.updated.map(row), left: update.left.map(tagged),
      ...(spec.rows ? { rows: [...live.rows.values()].map(row) } : {}),
      failovers: client.failovers, resyncs: live.resyncs, gaps: live.gaps, dropped: live.dropped,
    });
  }
} catch (error) {
  print({ type: "error", name: error.name, code: error.code ?? null, message: error.message });
  process.exitCode = 1;
} finally {
  await client.close();
}
