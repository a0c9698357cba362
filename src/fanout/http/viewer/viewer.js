// fanout's live viewer, built on @fanout/client (clients/typescript, bundled as
// /fanout-client.js): the code a web developer's page uses, over the WebSocket protocol. A
// dataset picked from the relay's list (GET /v1/datasets) is a map if its views are regions
// (map.js), else a table (SQL, topic, path). A new view is a new subscription on the same
// connection; the rows on screen are the old view's until the new one's first (full) push,
// so they are always exactly the view named by `servedView` at `tick`. What the page holds is
// window.fanoutViewer (read by the browser tests); docs/http.md, "The live viewer".
import { Client, Decimal, Timestamp } from "./fanout-client.js";
import { askSystem, boxOf, boxText, drawMap, fitted, setupMap } from "./map.js";
import { parseView } from "./viewtext.js";

const FLASH_MS = 1000;  // how long entered/updated/left rows stay highlighted
const TABLE_MS = 200;  // a table is rebuilt five times a second at most
const TABLE_ROWS = 2000;  // rows a table shows at most (the count says how many are held)
const WORLD = { x0: 0, y0: 0, x1: 1000, y1: 1000 };  // a map's first viewport, unless view= says

const params = new URLSearchParams(location.search);
const token = params.get("access_token");
const rate = Number(params.get("rate") || "10");
const $ = (id) => document.getElementById(id);
const NOTHING = new Map();

const state = {
  datasets: [],
  dataset: null,      // the chosen dataset's description (GET /v1/datasets)
  view: "",           // the view asked for last (text)
  servedView: "",     // the view whose rows are on screen (text)
  live: null,         // its LiveView (@fanout/client)
  get rows() { return this.live ? this.live.rows : NOTHING; },  // key -> row, as of `tick`
  get tick() { return this.live ? this.live.tick : -1; },
  get key() { return this.live ? this.live.key : null; },
  get columns() { return this.live ? this.live.columns : []; },
  changed: new Map(), // key -> [kind, when, row] for highlighting
  latency: null,      // seconds from the last push's tick to its arrival here
  pushTimes: [],
  pushes: 0,
  error: null,
  viewport: WORLD,
  // The admin layer (admin=1): null until the relay answered, else {held, coveredBy,
  // residual, subscribers} as its admin API said; systemError: why it did not.
  system: null,
  systemError: null,
};
window.fanoutViewer = state;

// The relay serving this page, over the WebSocket protocol on the same port (wss: under https).
const client = new Client(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}`, token ? { token } : {});
let asked = 0;  // subscriptions asked for so far: a later one supersedes the earlier ones
const retired = new WeakSet();  // views closed, or being closed, by this page

function retire(live) {
  if (retired.has(live)) return;
  retired.add(live);
  live.close().catch(() => undefined);  // its connection may be gone already: nothing to close
}

function authorized(url) {
  const u = new URL(url, location.href);
  if (token) u.searchParams.set("access_token", token);
  return u;
}

async function start() {
  const response = await fetch(authorized("/v1/datasets"));
  const body = await response.json();
  if (!response.ok) return fail(`${body.error}: ${body.message}`);
  state.datasets = body.datasets;
  const select = $("dataset");
  for (const d of state.datasets) select.add(new Option(`${d.name} (${d.view})`, d.name));
  const wanted = params.get("dataset") || (state.datasets.find((d) => d.view === "region") || state.datasets[0] || {}).name;
  if (!wanted) return fail("the relay serves no dataset yet");
  select.value = wanted;
  select.addEventListener("change", () => choose(select.value, null));
  $("viewform").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("view").value;
    if (state.dataset.view === "region") state.viewport = fitted($("map"), boxOf(text) || state.viewport);
    subscribe(text);
  });
  choose(wanted, params.get("view"));
  requestAnimationFrame(draw);
  if (params.get("admin") === "1") askSystem(state, authorized);
}

function choose(name, view) {
  if (state.live) {  // another dataset's rows are not shown meanwhile
    retire(state.live);
    Object.assign(state, { live: null, servedView: "", latency: null });
    state.changed.clear();
  }
  state.dataset = state.datasets.find((d) => d.name === name);
  const region = state.dataset.view === "region";
  $("map").hidden = !region;
  $("tablewrap").hidden = region;
  if (region) {
    state.viewport = fitted($("map"), boxOf(view) || WORLD);
    subscribe(view && !boxOf(view) ? view : boxText(state.viewport));
  } else {
    subscribe(view || defaultView(state.dataset));
  }
}

function defaultView(d) {
  if (d.view === "sql") return `SELECT * FROM ${d.name}`;
  if (d.view === "topic") return "#";
  if (d.view === "path") return `/${d.name}/.all`;
  return "";
}

/** Hold `text` of the chosen dataset; its first push replaces the rows on screen. */
async function subscribe(text) {
  const dataset = state.dataset;
  const mine = ++asked;
  state.view = text;
  $("view").value = text;
  let live;
  try {
    live = await client.subscribe(dataset.name, parseView(text, dataset.view), { rate });
  } catch (e) {
    if (mine === asked) fail(String(e.message || e));  // the rows of the view before stay
    return;
  }
  if (mine !== asked) return retire(live);  // superseded while it was being held
  follow(live, text, mine).catch((e) => {
    if (state.live === live || mine === asked) fail(String(e.message || e));
  });
}

async function follow(live, text, mine) {
  let shown = new Map();  // the rows as of the update before: a left row's last values
  let dropped = 0;
  for await (const update of live) {
    if (state.live !== live) {
      if (mine !== asked) return retire(live);  // a newer view was asked for meanwhile
      const old = state.live;
      Object.assign(state, { live, servedView: text, error: null, latency: null, pushes: 0, pushTimes: [] });
      state.changed.clear();
      $("status").textContent = "";
      if (old) retire(old);
    }
    if (live.dropped !== dropped) {  // the page fell behind: updates were skipped, not rows
      dropped = live.dropped;
      shown = new Map(live.rows);
      continue;
    }
    shown = record(update, shown, live);
  }
  if (state.live === live && live.error === null) fail("the view ended");
}

/** Note what `update` changed (for highlighting) and the push's rate and latency. */
function record(update, shown, live) {
  const now = performance.now();
  for (const key of update.left) {
    if (shown.has(key)) state.changed.set(key, ["left", now, shown.get(key)]);
    shown.delete(key);
  }
  if (update.full) { state.changed.clear(); shown = new Map(); }
  for (const [kind, rows] of [["entered", update.entered], ["updated", update.updated]]) {
    for (const row of rows) {
      const key = row[live.key];
      state.changed.set(key, [update.full ? "entered" : kind, now, row]);
      shown.set(key, row);
    }
  }
  if (update.tickTime > 0) {  // a push; a no-update has no tick time
    // A full push is the view as held, perhaps of a tick long past (a table no batch changed
    // since): the age of its rows, not a delivery's latency.
    if (!update.full) state.latency = Date.now() / 1000 - update.tickTime;
    state.pushes += 1;
    state.pushTimes.push(now);
  }
  while (state.pushTimes.length && state.pushTimes[0] < now - 5000) state.pushTimes.shift();
  return shown;
}

function fail(message) {
  state.error = message;
  $("status").textContent = message;
}

// -- the table -----------------------------------------------------------------------------

let tableDrawn = 0;

function drawTable(now) {
  if (now - tableDrawn < TABLE_MS) return;
  tableDrawn = now;
  const table = $("table");
  const columns = state.columns;
  const head = `<tr>${columns.map((c) => `<th>${escape(c)}</th>`).join("")}</tr>`;
  if (table.tHead.innerHTML !== head) table.tHead.innerHTML = head;
  const row = (values, kind) => `<tr class="${kind}">${columns.map((c) => `<td>${escape(cell(values[c]))}</td>`).join("")}</tr>`;
  const keys = [...state.rows.keys()].sort(byKey);
  const lines = keys.slice(0, TABLE_ROWS).map((key) => {
    const flash = state.changed.get(key);
    return row(state.rows.get(key), flash && now - flash[1] < FLASH_MS ? flash[0] : "");
  });
  for (const [key, [kind, when, values]] of state.changed) {
    if (kind === "left" && !state.rows.has(key) && now - when < FLASH_MS) lines.push(row(values, "left"));
  }
  if (keys.length > TABLE_ROWS) lines.push(`<tr class="more"><td colspan="${columns.length}">and ${keys.length - TABLE_ROWS} more rows</td></tr>`);
  table.tBodies[0].innerHTML = lines.join("");
}

const byKey = (a, b) => (typeof a === "string" || typeof b === "string" ? String(a).localeCompare(String(b)) : a < b ? -1 : a > b ? 1 : 0);

/** A cell's text: NULL as null, timestamps to the microsecond, bytes in hex. */
function cell(value) {
  if (value === null || value === undefined) return "null";
  if (value instanceof Timestamp) return value.toMicrosISOString();
  if (value instanceof Uint8Array) return `0x${[...value].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  if (value instanceof Decimal) return value.text;
  return String(value);
}

function escape(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

// -- every frame ---------------------------------------------------------------------------

function draw() {
  const now = performance.now();
  if (state.dataset) {
    if (state.dataset.view === "region") drawMap($("map"), state, now); else drawTable(now);
    for (const [key, [, when]] of state.changed) if (now - when > FLASH_MS) state.changed.delete(key);
    const pushRate = state.pushTimes.length / 5;
    const latency = state.latency === null ? "-" : `${Math.round(state.latency * 1000)} ms`;
    let system = "";
    if (state.systemError) system = `  admin: ${state.systemError}`;
    else if (state.system) system = `  held ${state.system.held.length} (teal)  would acquire ${state.system.residual.length} (red)  subscribers ${state.system.subscribers.length} (orange)`;
    $("stats").textContent = `tick ${state.tick}  rows ${state.rows.size}  pushes/s ${pushRate.toFixed(1)}  latency ${latency}${system}`;
  }
  requestAnimationFrame(draw);
}

setupMap($("map"), state, () => subscribe(boxText(state.viewport)));
start().catch((e) => fail(String(e.message || e)));
