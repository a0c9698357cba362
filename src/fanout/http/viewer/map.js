// The viewer's map of a region dataset: each row a dot at its index columns, panned by a drag
// and zoomed by the wheel (the view follows once the map settles), and, with admin=1, the
// relay's system drawn under the rows: its held primitives, what it would acquire for the view
// on screen and its subscribers' views (GET /v1/admin/explain and /v1/admin/subscribers).
const FLASH_MS = 1000;  // how long entered/left rows stay highlighted
const SETTLE_MS = 150;  // a pan or zoom settles this long before the view is changed
const SYSTEM_MS = 1000;  // how often the admin layer asks the relay what it holds
const SYSTEM_TOP = 100;  // subscribers' views drawn at most

/** The box of a view's text ("box:x0,y0,x1,y1"), or null for any other view. */
export function boxOf(text) {
  const m = /^\s*box:\s*([^,]+),([^,]+),([^,]+),([^,]+)\s*$/.exec(text || "");
  if (!m) return null;
  const [x0, y0, x1, y1] = m.slice(1).map(Number);
  return [x0, y0, x1, y1].every(Number.isFinite) && x0 < x1 && y0 < y1 ? { x0, y0, x1, y1 } : null;
}

export function boxText(v) {
  const r = (n) => Math.round(n * 100) / 100;
  return `box:${r(v.x0)},${r(v.y0)},${r(v.x1)},${r(v.y1)}`;
}

/** The viewport around `v`'s centre in the canvas's shape. */
export function fitted(canvas, v) {
  const w = canvas.clientWidth || 1, h = canvas.clientHeight || 1;
  const cx = (v.x0 + v.x1) / 2, cy = (v.y0 + v.y1) / 2;
  const side = Math.max(v.x1 - v.x0, (v.y1 - v.y0) * w / h);
  return { x0: cx - side / 2, x1: cx + side / 2, y0: cy - side * h / w / 2, y1: cy + side * h / w / 2 };
}

/** Pan and zoom `state.viewport` with the mouse; `settled()` once a move ends. */
export function setupMap(canvas, state, settled) {
  let drag = null, pending = null;
  const settle = () => { clearTimeout(pending); pending = setTimeout(settled, SETTLE_MS); };
  canvas.addEventListener("mousedown", (e) => { drag = [e.clientX, e.clientY, { ...state.viewport }]; canvas.classList.add("dragging"); });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const [sx, sy, v] = drag;
    const dx = (e.clientX - sx) / canvas.clientWidth * (v.x1 - v.x0);
    const dy = (e.clientY - sy) / canvas.clientHeight * (v.y1 - v.y0);
    state.viewport = { x0: v.x0 - dx, x1: v.x1 - dx, y0: v.y0 + dy, y1: v.y1 + dy };
  });
  window.addEventListener("mouseup", () => {
    if (!drag) return;
    drag = null;
    canvas.classList.remove("dragging");
    settle();
  });
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const rect = canvas.getBoundingClientRect(), v = state.viewport;
    const wx = v.x0 + (e.clientX - rect.left) / canvas.clientWidth * (v.x1 - v.x0);
    const wy = v.y1 - (e.clientY - rect.top) / canvas.clientHeight * (v.y1 - v.y0);
    const f = Math.exp(e.deltaY * 0.001);
    state.viewport = { x0: wx + (v.x0 - wx) * f, x1: wx + (v.x1 - wx) * f, y0: wy + (v.y0 - wy) * f, y1: wy + (v.y1 - wy) * f };
    settle();
  }, { passive: false });
  window.addEventListener("resize", () => { state.viewport = fitted(canvas, state.viewport); settle(); });
}

/** Draw the rows held (`state.rows`) at their index columns, and the system if asked. */
export function drawMap(canvas, state, now) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * ratio || canvas.height !== h * ratio) { canvas.width = w * ratio; canvas.height = h * ratio; }
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.fillStyle = "#10141a";
  g.fillRect(0, 0, w, h);
  const v = state.viewport;
  const sx = (x) => (x - v.x0) / (v.x1 - v.x0) * w, sy = (y) => h - (y - v.y0) / (v.y1 - v.y0) * h;
  if (state.system) drawSystem(g, state.system, sx, sy);
  const served = boxOf(state.servedView);
  if (served) {  // the subscribed view: rows are its content
    g.strokeStyle = "#3a4656";
    g.strokeRect(sx(served.x0), sy(served.y1), sx(served.x1) - sx(served.x0), sy(served.y0) - sy(served.y1));
  }
  const [cx, cy] = state.dataset.index_columns;
  const dot = (row) => g.fillRect(sx(Number(row[cx])) - 2, sy(Number(row[cy])) - 2, 4, 4);
  for (const [key, row] of state.rows) {
    const flash = state.changed.get(key);
    g.fillStyle = flash && flash[0] === "entered" && now - flash[1] < FLASH_MS ? "#6fe08a" : "#5fb3f0";
    dot(row);
  }
  g.fillStyle = "#f07070";
  for (const [kind, when, row] of state.changed.values()) if (kind === "left" && now - when < FLASH_MS) dot(row);
}

function drawSystem(g, system, sx, sy) {  // outlines under the rows: box views only
  const outline = (text, colour, width, dashed) => {
    const b = boxOf(text);
    if (!b) return;
    g.strokeStyle = colour;
    g.lineWidth = width;
    g.setLineDash(dashed ? [6, 4] : []);
    g.strokeRect(sx(b.x0), sy(b.y1), sx(b.x1) - sx(b.x0), sy(b.y0) - sy(b.y1));
  };
  // Wide primitives under narrow views: a view the relay holds exactly still shows both.
  for (const p of system.held) outline(p.view, "#40c0b0", 5, !p.ready);
  for (const view of system.residual) outline(view, "#f06060", 3, true);
  for (const view of system.subscribers) outline(view, "#e0a040", 1.5, false);
  g.setLineDash([]);
  g.lineWidth = 1;
}

/** Every second, ask the relay's admin API about the map's view (`authorized`: a URL with the
 * page's token): `state.system`, or why not in `state.systemError`. */
export async function askSystem(state, authorized) {
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
  setTimeout(() => askSystem(state, authorized), SYSTEM_MS);
}
