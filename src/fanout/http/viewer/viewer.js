// fanout's live viewer: one subscription through the relay's HTTP streaming API (Server-Sent
// Events, docs/http.md), drawn as a map for region datasets and as a table for the others.
// No dependencies. What the page holds is window.fanoutViewer (read by the browser test).
// With admin=1 (and an access_token with role admin, when the relay checks tokens) a map also
// shows the system: the relay's held primitives, what it would acquire for the view on screen,
// and its subscribers' views (GET /v1/admin/explain and /v1/admin/subscribers, docs/http.md).
"use strict";

const FLASH_MS = 1000;  // how long entered/updated/left rows stay highlighted
const RESUBSCRIBE_MS = 150;  // a pan or zoom settles this long before the view is changed
const SYSTEM_MS = 1000;  // how often the admin layer asks the relay what it holds
const SYSTEM_TOP = 100;  // subscribers' views drawn at most

const state = {
  datasets: [],
  dataset: null,      // the chosen dataset's description (GET /v1/datasets)
  view: "",           // the view subscribed to (text syntax)
  servedView: "",     // the view of the subscription whose pushes fill `rows`
  rows: new Map(),    // key -> row, the view's content as of `tick`
  changed: new Map(), // key -> [kind, when] for highlighting
  key: "id",
  tick: -1,
  tickTime: 0,
  latency: null,      // seconds from the last push's tick to its arrival here
  pushTimes: [],
  pushes: 0,
  error: null,
  viewport: {x0: 0, y0: 0, x1: 1000, y1: 1000},
  // The admin layer (admin=1): null until the relay answered, else {held, coveredBy,
  // residual, subscribers} as its admin API said; systemError: why it did not.
  system: null,
  systemError: null,
};
window.fanoutViewer = state;

const params = new URLSearchParams(location.search);
const token = params.get("access_token");
const $ = (id) => document.getElementById(id);
let source = null;
let pending = null;

function authorized(url) {
  const u = new URL(url, location.href);
  if (token) u.searchParams.set("access_token", token);
  return u;
}

async function start() {
  const response = await fetch(authorized("/v1/datasets"));
  const body = await response.json();
  if (!response.ok) return fail(body.message);
  state.datasets = body.datasets;
  const select = $("dataset");
  for (const d of state.datasets) select.add(new Option(`${d.name} (${d.view})`, d.name));
  const wanted = params.get("dataset") || (state.datasets.find((d) => d.view === "region") || state.datasets[0] || {}).name;
  if (!wanted) return fail("the relay serves no dataset yet");
  select.value = wanted;
  select.addEventListener("change", () => choose(select.value, null));
  $("viewform").addEventListener("submit", (event) => {
    event.preventDefault();
    if (state.dataset.view === "region") state.viewport = boxOf($("view").value) || state.viewport;
    subscribe($("view").value);
  });
  choose(wanted, params.get("view"));
  requestAnimationFrame(draw);
  if (params.get("admin") === "1") askSystem();
}

// -- the admin layer -----------------------------------------------------------------------

async function askSystem() {
  try {
    if (state.dataset && state.dataset.view === "region" && state.servedView) {
      const explain = authorized("/v1/admin/explain");
      explain.searchParams.set("dataset", state.dataset.name);
      explain.searchParams.set("view", state.servedView);
      const subscribers = authorized("/v1/admin/subscribers");
      subscribers.searchParams.set("top", String(SYSTEM_TOP));
      const [said, top] = await Promise.all([explain, subscribers].map(async (url) => {
        const response = await fetch(url);
        const body = await response.json();
        if (!response.ok) throw new Error(`${body.error}: ${body.message}`);
        return body;
      }));
      state.system = {
        held: said.held, coveredBy: said.covered_by, residual: said.residual.map((r) => r.view),
        subscribers: top.top.filter((s) => s.dataset === state.dataset.name).map((s) => s.view),
      };
      state.systemError = null;
    }
  } catch (e) {
    state.systemError = String(e.message || e);
  }
  setTimeout(askSystem, SYSTEM_MS);
}

function drawSystem(g, sx, sy) {  // outlines under the rows: box views only
  const outline = (text, colour, width, dashed) => {
    const b = boxOf(text);
    if (!b) return;
    g.strokeStyle = colour;
    g.lineWidth = width;
    g.setLineDash(dashed ? [6, 4] : []);
    g.strokeRect(sx(b.x0), sy(b.y1), sx(b.x1) - sx(b.x0), sy(b.y0) - sy(b.y1));
  };
  // Wide primitives under narrow views: a view the relay holds exactly still shows both.
  const s = state.system;
  for (const p of s.held) outline(p.view, "#40c0b0", 5, !p.ready);
  for (const view of s.residual) outline(view, "#f06060", 3, true);
  for (const view of s.subscribers) outline(view, "#e0a040", 1.5, false);
  g.setLineDash([]);
  g.lineWidth = 1;
}

function choose(name, view) {
  state.dataset = state.datasets.find((d) => d.name === name);
  const region = state.dataset.view === "region";
  $("map").hidden = !region;
  $("tablewrap").hidden = region;
  if (region) {
    state.viewport = boxOf(view || "") || {x0: 0, y0: 0, x1: 1000, y1: 1000};
    fitAspect();
    subscribe(boxText(state.viewport));
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

function subscribe(view) {
  if (source) source.close();
  state.view = view;
  $("view").value = view;
  state.error = null;
  $("status").textContent = "";
  const url = authorized("/v1/subscribe");
  url.searchParams.set("dataset", state.dataset.name);
  url.searchParams.set("view", view);
  url.searchParams.set("format", "sse");
  url.searchParams.set("rate", params.get("rate") || "10");
  const mine = new EventSource(url);
  source = mine;
  mine.addEventListener("subscribed", (e) => { if (source === mine) state.key = JSON.parse(e.data).key; });
  mine.addEventListener("push", (e) => { if (source === mine) apply(JSON.parse(e.data), view); });
  mine.addEventListener("no_update", (e) => { if (source === mine) state.tick = JSON.parse(e.data).tick; });
  mine.addEventListener("error", (e) => {
    if (source !== mine) return;
    if (e.data) { const err = JSON.parse(e.data); fail(`${err.error}: ${err.message}`); mine.close(); }
    else if (mine.readyState === EventSource.CLOSED) fail("the relay refused the view or went away");
  });
}

function apply(push, view) {
  const now = performance.now();
  if (push.full) { state.rows.clear(); state.changed.clear(); state.servedView = view; }
  for (const key of push.left) {
    if (state.rows.has(key)) state.changed.set(key, ["left", now, state.rows.get(key)]);
    state.rows.delete(key);
  }
  for (const [kind, rows] of [["entered", push.entered], ["updated", push.updated]]) {
    for (const row of rows) {
      state.rows.set(row[state.key], row);
      state.changed.set(row[state.key], [push.full ? "entered" : kind, now, row]);
    }
  }
  state.tick = push.tick;
  state.tickTime = push.tick_time;
  state.latency = Date.now() / 1000 - push.tick_time;
  state.pushes += 1;
  state.pushTimes.push(now);
  while (state.pushTimes.length && state.pushTimes[0] < now - 5000) state.pushTimes.shift();
}

function fail(message) {
  state.error = message;
  $("status").textContent = message;
}

// -- the map -------------------------------------------------------------------------------

function boxOf(text) {
  const m = /^\s*box:\s*([^,]+),([^,]+),([^,]+),([^,]+)\s*$/.exec(text);
  if (!m) return null;
  const [x0, y0, x1, y1] = m.slice(1).map(Number);
  return [x0, y0, x1, y1].every(Number.isFinite) && x0 < x1 && y0 < y1 ? {x0, y0, x1, y1} : null;
}

function boxText(v) {
  const r = (n) => Math.round(n * 100) / 100;
  return `box:${r(v.x0)},${r(v.y0)},${r(v.x1)},${r(v.y1)}`;
}

function fitAspect() {  // the viewport takes the canvas's shape, around its centre
  const canvas = $("map");
  const w = canvas.clientWidth || 1, h = canvas.clientHeight || 1;
  const v = state.viewport, cx = (v.x0 + v.x1) / 2, cy = (v.y0 + v.y1) / 2;
  const side = Math.max(v.x1 - v.x0, (v.y1 - v.y0) * w / h);
  state.viewport = {x0: cx - side / 2, x1: cx + side / 2, y0: cy - side * h / w / 2, y1: cy + side * h / w / 2};
}

function changeView() {  // after a pan or a zoom settles
  clearTimeout(pending);
  pending = setTimeout(() => subscribe(boxText(state.viewport)), RESUBSCRIBE_MS);
}

function toWorld(canvas, px, py) {
  const v = state.viewport;
  return [v.x0 + px / canvas.clientWidth * (v.x1 - v.x0), v.y1 - py / canvas.clientHeight * (v.y1 - v.y0)];
}

function setupMap() {
  const canvas = $("map");
  let drag = null;
  canvas.addEventListener("mousedown", (e) => { drag = [e.clientX, e.clientY, {...state.viewport}]; canvas.classList.add("dragging"); });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const [sx, sy, v] = drag;
    const dx = (e.clientX - sx) / canvas.clientWidth * (v.x1 - v.x0);
    const dy = (e.clientY - sy) / canvas.clientHeight * (v.y1 - v.y0);
    state.viewport = {x0: v.x0 - dx, x1: v.x1 - dx, y0: v.y0 + dy, y1: v.y1 + dy};
  });
  window.addEventListener("mouseup", () => {
    if (!drag) return;
    drag = null;
    canvas.classList.remove("dragging");
    changeView();
  });
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const rect = canvas.getBoundingClientRect();
    const [wx, wy] = toWorld(canvas, e.clientX - rect.left, e.clientY - rect.top);
    const f = Math.exp(e.deltaY * 0.001), v = state.viewport;
    state.viewport = {x0: wx + (v.x0 - wx) * f, x1: wx + (v.x1 - wx) * f, y0: wy + (v.y0 - wy) * f, y1: wy + (v.y1 - wy) * f};
    changeView();
  }, {passive: false});
  window.addEventListener("resize", () => { fitAspect(); changeView(); });
}

function drawMap(now) {
  const canvas = $("map");
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * ratio || canvas.height !== h * ratio) { canvas.width = w * ratio; canvas.height = h * ratio; }
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.fillStyle = "#10141a";
  g.fillRect(0, 0, w, h);
  const v = state.viewport;
  const sx = (x) => (x - v.x0) / (v.x1 - v.x0) * w, sy = (y) => h - (y - v.y0) / (v.y1 - v.y0) * h;
  if (state.system) drawSystem(g, sx, sy);
  const served = boxOf(state.servedView);
  if (served) {  // the subscribed view: rows are its content
    g.strokeStyle = "#3a4656";
    g.strokeRect(sx(served.x0), sy(served.y1), sx(served.x1) - sx(served.x0), sy(served.y0) - sy(served.y1));
  }
  const [cx, cy] = state.dataset.index_columns;
  for (const [key, row] of state.rows) {
    const flash = state.changed.get(key);
    g.fillStyle = flash && flash[0] === "entered" && now - flash[1] < FLASH_MS ? "#6fe08a" : "#5fb3f0";
    g.fillRect(sx(row[cx]) - 2, sy(row[cy]) - 2, 4, 4);
  }
  for (const [key, [kind, when, row]] of state.changed) {
    if (kind === "left" && now - when < FLASH_MS) { g.fillStyle = "#f07070"; g.fillRect(sx(row[cx]) - 2, sy(row[cy]) - 2, 4, 4); }
  }
}

// -- the table -----------------------------------------------------------------------------

let tableDrawn = 0;

function drawTable(now) {
  if (now - tableDrawn < 200) return;  // a table is rebuilt five times a second at most
  tableDrawn = now;
  const table = $("table");
  const columns = Object.keys(state.dataset.columns);
  const head = `<tr>${columns.map((c) => `<th>${escape(c)}</th>`).join("")}</tr>`;
  if (table.tHead.innerHTML !== head) table.tHead.innerHTML = head;
  const lines = [];
  const seen = new Set();
  const row = (key, values, kind) => `<tr class="${kind}">${columns.map((c) => `<td>${escape(values[c])}</td>`).join("")}</tr>`;
  for (const [key, values] of state.rows) {
    const flash = state.changed.get(key);
    lines.push(row(key, values, flash && now - flash[1] < FLASH_MS ? flash[0] : ""));
    seen.add(key);
  }
  for (const [key, [kind, when, values]] of state.changed) {
    if (kind === "left" && !seen.has(key) && now - when < FLASH_MS) lines.push(row(key, values, "left"));
  }
  table.tBodies[0].innerHTML = lines.join("");
}

function escape(value) {
  return String(value ?? "null").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]);
}

// -- every frame ---------------------------------------------------------------------------

function draw() {
  const now = performance.now();
  if (state.dataset) {
    if (state.dataset.view === "region") drawMap(now); else drawTable(now);
    for (const [key, [, when]] of state.changed) if (now - when > FLASH_MS) state.changed.delete(key);
    const rate = state.pushTimes.length / 5;
    const latency = state.latency === null ? "-" : `${Math.round(state.latency * 1000)} ms`;
    let system = "";
    if (state.systemError) system = `  admin: ${state.systemError}`;
    else if (state.system) system = `  held ${state.system.held.length} (teal)  would acquire ${state.system.residual.length} (red)  subscribers ${state.system.subscribers.length} (orange)`;
    $("stats").textContent = `tick ${state.tick}  rows ${state.rows.size}  pushes/s ${rate.toFixed(1)}  latency ${latency}${system}`;
  }
  requestAnimationFrame(draw);
}

setupMap();
start().catch((e) => fail(String(e)));
