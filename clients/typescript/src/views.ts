/**
 * Views: what a subscriber asks for, built as fanout.views builds them and sent as themselves
 * (a map tagged by `kind`, docs/protocol.md "Views"). Regions (box, sphere, sector, union,
 * meet, relative to an entity), SQL queries, MQTT topic filters, object paths, any-of unions
 * of topic filters or paths, and the entity primitive. The builders check what fanout.views'
 * constructors check cheaply (numbers finite, 2 or 3 axes, ...), so a mistake is an
 * InvalidView at the call; the relay checks the rest (SQL parses, topic syntax).
 */

import { InvalidView } from "./errors.js";
import type { Key } from "./values.js";

export type Point = readonly number[];

export interface Box { readonly kind: "box"; readonly lo: Point; readonly hi: Point }
export interface Sphere { readonly kind: "sphere"; readonly center: Point; readonly radius: number }
export interface Sector {
  readonly kind: "sector";
  readonly center: Point;
  readonly radius: number;
  readonly heading: number | readonly [number, number];
  readonly half_angle: number;
}
export type Primitive = Box | Sphere | Sector;
export interface Union { readonly kind: "union"; readonly members: readonly Primitive[] }
export interface Meet { readonly kind: "meet"; readonly parts: readonly (Primitive | Union)[] }
export interface Relative { readonly kind: "relative"; readonly entity: Key; readonly view: Primitive | Union }
export interface Sql { readonly kind: "sql"; readonly text: string }
export interface Topic { readonly kind: "topic"; readonly filter: string }
export interface Path { readonly kind: "path"; readonly path: string }
export interface AnyOf { readonly kind: "any"; readonly views: readonly (Topic | Path)[] }
export interface Entity { readonly kind: "entity"; readonly key: Key }

/** Every view of every kind. */
export type View = Primitive | Union | Meet | Relative | Sql | Topic | Path | AnyOf | Entity;

function finite(owner: string, name: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new InvalidView(`${owner}: ${name} = ${String(value)} is not a finite number`);
  }
  return value;
}

function point(owner: string, name: string, value: Point): number[] {
  if (!Array.isArray(value)) throw new InvalidView(`${owner}: ${name} is not a sequence of coordinates`);
  const coords = value.map((v, i) => finite(owner, `${name}[${i}]`, v));
  if (coords.length !== 2 && coords.length !== 3) {
    throw new InvalidView(`${owner}: ${name} has ${coords.length} coordinates; regions are 2-D or 3-D`);
  }
  return coords;
}

function radius(owner: string, value: number): number {
  if (finite(owner, "radius", value) < 0) throw new InvalidView(`${owner}: radius = ${value} is negative`);
  return value;
}

function entityKey(owner: string, key: Key): Key {
  const ok = (typeof key === "number" && Number.isSafeInteger(key)) || typeof key === "bigint" || (typeof key === "string" && key !== "");
  if (!ok) throw new InvalidView(`${owner}: ${String(key)} must be an integer or a non-empty string`);
  return key;
}

/** The number of axes of a region. */
export function dims(view: Primitive | Union): number {
  switch (view.kind) {
    case "box":
      return view.lo.length;
    case "union":
      return dims(view.members[0]!);
    default:
      return view.center.length;
  }
}

/** Every point with `lo[i] <= p[i] <= hi[i]`: `box([0, 0], [10, 10])`. */
export function box(lo: Point, hi: Point): Box {
  const low = point("box", "lo", lo);
  const high = point("box", "hi", hi);
  if (low.length !== high.length) {
    throw new InvalidView(`box: lo has ${low.length} coordinates but hi has ${high.length}`);
  }
  low.forEach((l, i) => {
    if (l > high[i]!) throw new InvalidView(`box: lo[${i}] = ${l} is greater than hi[${i}] = ${high[i]}`);
  });
  return { kind: "box", lo: low, hi: high };
}

/** Every point within `r` of `center`; a disc in 2-D. */
export function sphere(center: Point, r: number): Sphere {
  return { kind: "sphere", center: point("sphere", "center", center), radius: radius("sphere", r) };
}

/**
 * The points within `r` of `center` whose direction is at most `halfAngle` from `heading`
 * (radians: one angle from +x toward +y in 2-D, `[azimuth, elevation]` in 3-D).
 */
export function sector(center: Point, r: number, heading: number | readonly [number, number], halfAngle: number): Sector {
  const c = point("sector", "center", center);
  const h =
    c.length === 2
      ? finite("sector", "heading", heading)
      : Array.isArray(heading) && heading.length === 2
        ? ([finite("sector", "heading[0]", heading[0]), finite("sector", "heading[1]", heading[1])] as const)
        : null;
  if (h === null) throw new InvalidView("sector: a 3-D sector's heading is [azimuth, elevation]");
  const half = finite("sector", "half_angle", halfAngle);
  if (!(half > 0 && half <= Math.PI)) throw new InvalidView(`sector: half_angle = ${half} is outside (0, pi]`);
  return { kind: "sector", center: c, radius: radius("sector", r), heading: h, half_angle: half };
}

/** The union of one or more boxes, spheres or sectors of one dimension (nested unions flattened). */
export function union(...members: (Primitive | Union)[]): Union {
  const flat = members.flatMap((m) => (m.kind === "union" ? m.members : [m]));
  if (flat.length === 0) throw new InvalidView("union: needs at least one member");
  flat.forEach((m, i) => {
    if (!["box", "sphere", "sector"].includes(m.kind)) throw new InvalidView(`union: member ${i} is not a box, sphere or sector`);
  });
  if (new Set(flat.map(dims)).size > 1) throw new InvalidView("union: members of different dimensions");
  return { kind: "union", members: flat };
}

/** The points inside every one of two or more regions (nested meets flattened). */
export function meet(...parts: (Primitive | Union | Meet)[]): Meet {
  const flat = parts.flatMap((p) => (p.kind === "meet" ? p.parts : [p]));
  if (flat.length < 2) throw new InvalidView("meet: needs at least two parts");
  if (new Set(flat.map(dims)).size > 1) throw new InvalidView("meet: parts of different dimensions");
  return { kind: "meet", parts: flat };
}

/** `view` in coordinates relative to entity `entity`'s position, wherever it goes. */
export function relative(entity: Key, view: Primitive | Union): Relative {
  if (!["box", "sphere", "sector", "union"].includes(view.kind)) {
    throw new InvalidView("relative: view must be a box, sphere, sector or union");
  }
  return { kind: "relative", entity: entityKey("relative: entity", entity), view };
}

/** A SQL view: one SELECT over the relay's tables (DuckDB dialect), checked by the relay. */
export function sql(text: string): Sql {
  if (typeof text !== "string" || !text.trim()) throw new InvalidView("sql: the query is empty");
  return { kind: "sql", text };
}

/**
 * An MQTT topic filter (`plant/+/temp`, `plant/#`, `$share/group/plant/#`) of a topic dataset,
 * checked as fanout.views.topic.syntax checks it: no U+0000, at most 65,535 bytes, `#` a whole
 * last level, `+` a whole level, a share name without `+` or `#` and a filter after it.
 */
export function topic(filter: string): Topic {
  if (typeof filter !== "string" || filter === "") throw new InvalidView("topic: the filter is empty");
  if (filter.includes("\0")) throw new InvalidView(`topic: ${JSON.stringify(filter)} contains U+0000 (MQTT 4.7.3)`);
  if (new TextEncoder().encode(filter).length > 65535) throw new InvalidView("topic: the filter is over 65,535 bytes of UTF-8 (MQTT 1.5.3)");
  let levels = filter.split("/");
  if (filter.startsWith("$share/")) {
    const group = levels[1]!;
    if (group === "" || /[+#]/.test(group)) throw new InvalidView(`topic: ${JSON.stringify(filter)}: the share name must be non-empty, without '+' or '#' [MQTT-4.8.2-1, 2]`);
    levels = levels.slice(2);
    if (levels.length === 0 || levels.join("/") === "") throw new InvalidView(`topic: ${JSON.stringify(filter)} has no topic filter after the share name [MQTT-4.8.2-2]`);
  }
  levels.forEach((level, i) => {
    if (level.includes("#") && (level !== "#" || i !== levels.length - 1)) {
      throw new InvalidView(`topic: ${JSON.stringify(filter)}: '#' must be a whole level and the last [MQTT-4.7.1-2]`);
    }
    if (level.includes("+") && level !== "+") throw new InvalidView(`topic: ${JSON.stringify(filter)}: '+' must be a whole level [MQTT-4.7.1-3]`);
  });
  return { kind: "topic", filter };
}

/** An object path (`/cars/.all`) of a path or objects dataset. */
export function path(text: string): Path {
  if (typeof text !== "string" || text === "") throw new InvalidView("path: the path is empty");
  return { kind: "path", path: text };
}

/** Any of two or more topic filters, or of two or more object paths (repeats dropped). */
export function anyOf(...views: (Topic | Path | AnyOf)[]): AnyOf {
  const flat = views.flatMap((v) => (v.kind === "any" ? v.views : [v]));
  const seen = new Map(flat.map((v) => [JSON.stringify(v), v]));
  const distinct = [...seen.values()];
  if (distinct.length < 2) throw new InvalidView("any of: needs at least two distinct views");
  if (new Set(distinct.map((v) => v.kind)).size > 1) {
    throw new InvalidView("any of: the views must all be topic filters, or all object paths");
  }
  return { kind: "any", views: distinct };
}

/** The row of key `key` wherever it is (a relay's primitive; rarely a subscriber's view). */
export function entity(key: Key): Entity {
  return { kind: "entity", key: entityKey("entity: key", key) };
}

/** The view's text as `fanout explain --view` reads it (regions), or its own text. */
export function toText(view: View): string {
  const numbers = (values: readonly number[]) => values.map((v) => String(v)).join(",");
  switch (view.kind) {
    case "box":
      return `box:${numbers([...view.lo, ...view.hi])}`;
    case "sphere":
      return `sphere:${numbers([...view.center, view.radius])}`;
    case "sector": {
      const heading = typeof view.heading === "number" ? [view.heading] : view.heading;
      return `sector:${numbers([...view.center, view.radius, ...heading, view.half_angle])}`;
    }
    case "union":
      return view.members.map(toText).join("|");
    case "meet":
      return view.parts.map(toText).join("&");
    case "relative":
      return `rel:${typeof view.entity === "string" ? JSON.stringify(view.entity) : String(view.entity)}:${toText(view.view)}`;
    case "sql":
      return view.text;
    case "topic":
      return view.filter;
    case "path":
      return view.path;
    case "any":
      return view.views.map(toText).join(" | ");
    case "entity":
      return `entity:${String(view.key)}`;
  }
}
