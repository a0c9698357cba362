/**
 * The frames a subscriber sends and receives (fanout.wire.messages, docs/protocol.md): msgpack
 * maps tagged by `type`. Received frames are checked field by field, as msgspec's typed
 * decoder checks them: a frame that is not msgpack, has an unknown `type`, or lacks a field
 * or has one of the wrong type is a ProtocolError. Fields this version does not know are
 * ignored (peers evolve frames by adding fields with defaults).
 */

import { Decoder, Encoder } from "@msgpack/msgpack";
import type { WireColumns } from "./columns.js";
import { ProtocolError } from "./errors.js";
import type { View } from "./views.js";

/** Bumped on any change an older peer could misread; a relay speaking another is refused. */
export const PROTOCOL_VERSION = 1;

export type Mode = "latest" | "every";
export type Precision = "float64" | "float32" | "fixed";

/** How a relay adapts a subscription's rows (fanout.wire.messages.Transform). */
export interface Transform {
  /** The columns to send (the key always comes first); omitted: every column. */
  columns?: string[] | null;
  precision?: Precision;
  /** Unit of `fixed` values (0: 1/1024); a rounding step for floats (0: none). */
  quantum?: number;
  /** Send the index coordinates relative to this entity's position. */
  relative_to?: number | string | null;
}

/** Where an `every` subscriber stopped: its resume token. */
export interface Resume {
  epoch: number;
  seq: number;
  keys: WireColumns;
}

export interface Hello {
  type: "hello";
  version: number;
  role: "subscriber" | "producer";
  name: string;
  capabilities: string[];
  token: string;
}
export interface Subscribe {
  type: "subscribe";
  sub: number;
  dataset: string;
  view: View;
  rate: number;
  priority: number;
  transform: Transform | null;
  mode: Mode;
  resume: Resume | null;
  stay: boolean;
  /** Rate tiers by distance from the view's focus and a priority from its rows (region views). */
  relevance?: Relevance | null;
  /** A transducer the relay runs over the pushes, which then carry its output. */
  transduce?: Transduce | null;
  /** `latest`: only rows the publisher confirmed (no writes shown before; docs/concepts.md). */
  confirmed?: boolean;
}
/**
 * A transducer the relay runs over a subscription's pushes (fanout.wire.messages.Transduce,
 * docs/transducers.md): `window` (SQL over the view's last ticks) or one the relay installed.
 */
export interface Transduce {
  name: string;
  /** `window`'s: `query`, `ticks`, `key`. */
  params?: Record<string, unknown>;
}
/** Beyond `beyond` from the focus, an entity is sent on one push in `every`. */
export interface Tier { beyond: number; every: number }
/** Priority from the data (docs/concepts.md, "Priority from the data"). */
export interface Relevance {
  tiers?: Tier[];
  /** The point distances are measured from (default: the view's centre, or its entity). */
  focus?: number[] | null;
  priority_from?: "given" | "changes" | "nearest";
}
export interface Unsubscribe { type: "unsubscribe"; sub: number }
export interface Publish { type: "publish"; req: number; dataset: string; upserts: WireColumns; deletes: WireColumns }
export type ToRelay = Hello | Subscribe | Unsubscribe | Publish;

export interface Welcome { type: "welcome"; version: number; server: string; session: string; datasets: Record<string, string> }
export interface Subscribed { type: "subscribed"; sub: number; key: string; columns: string[] }
export interface Unsubscribed { type: "unsubscribed"; sub: number }
export interface Push {
  type: "push";
  sub: number;
  epoch: number;
  seq: number;
  tick: number;
  tick_time: number;
  full: boolean;
  entered: WireColumns;
  updated: WireColumns;
  left: WireColumns;
  /** It carries writes the publisher has not confirmed yet (docs/concepts.md, "Two paths"). */
  provisional: boolean;
}
export interface NoUpdate { type: "no_update"; sub: number; epoch: number; seq: number; tick: number }
export interface Published { type: "published"; req: number; first: number; last: number }
export interface ErrorFrame { type: "error"; code: string; message: string; ref: number | null; location: string | null }
export type ToSubscriber = Welcome | Subscribed | Unsubscribed | Push | NoUpdate | Published | ErrorFrame;

const encoder = new Encoder({ useBigInt64: true, ignoreUndefined: true });
const decoder = new Decoder({ useBigInt64: true });

/** One frame as a WebSocket binary message. */
export function encode(frame: ToRelay): Uint8Array {
  return encoder.encode(integers(frame));
}

/**
 * `value` with every integer past 32 bits as a bigint: @msgpack/msgpack encodes such a number
 * as a float64, which a relay refuses where it expects an int (an epoch is milliseconds since
 * 1970). A float field takes an int all the same.
 */
function integers(value: unknown): unknown {
  if (typeof value === "number") return Number.isSafeInteger(value) && Math.abs(value) > 0x7fffffff ? BigInt(value) : value;
  if (Array.isArray(value)) return value.map(integers);
  if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, integers(v)]));
}

type Check = (value: unknown) => unknown;

const integer: Check = (v) => {
  if (typeof v === "bigint" && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(v);
  return typeof v === "number" && Number.isSafeInteger(v) ? v : undefined;
};
const number: Check = (v) => (typeof v === "number" ? v : integer(v));
const string: Check = (v) => (typeof v === "string" ? v : undefined);
const boolean: Check = (v) => (typeof v === "boolean" ? v : undefined);
const strings: Check = (v) => (Array.isArray(v) && v.every((s) => typeof s === "string") ? v : undefined);
const stringMap: Check = (v) =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array) && Object.values(v).every((s) => typeof s === "string") ? v : undefined;
const columns: Check = (v) =>
  typeof v === "object" && v !== null && !Array.isArray(v) && Array.isArray((v as WireColumns).columns) ? { length: 0, ...(v as object) } : undefined;
const optional = (check: Check): Check => (v) => (v === null ? null : check(v));

/** Each frame type's fields: [name, check, default (undefined: required)]. */
const FIELDS: Record<ToSubscriber["type"], [string, Check, unknown?][]> = {
  welcome: [["version", integer], ["server", string], ["session", string], ["datasets", stringMap, {}]],
  subscribed: [["sub", integer], ["key", string], ["columns", strings]],
  unsubscribed: [["sub", integer]],
  push: [
    ["sub", integer], ["epoch", integer], ["seq", integer], ["tick", integer], ["tick_time", number],
    ["full", boolean], ["entered", columns], ["updated", columns], ["left", columns],
    ["provisional", boolean, false],
  ],
  no_update: [["sub", integer], ["epoch", integer], ["seq", integer], ["tick", integer]],
  published: [["req", integer], ["first", integer], ["last", integer]],
  error: [["code", string], ["message", string], ["ref", optional(integer), null], ["location", optional(string), null]],
};

/**
 * Decode one message from a relay.
 *
 * @throws ProtocolError a text message, malformed msgpack, an unknown frame type, or a missing
 *   or mistyped field (the message names which).
 */
export function decode(data: Uint8Array | ArrayBuffer | string): ToSubscriber {
  if (typeof data === "string") throw new ProtocolError("text messages are not part of the protocol; expected binary msgpack");
  let raw: unknown;
  try {
    raw = decoder.decode(data);
  } catch (error) {
    throw new ProtocolError(`malformed frame: ${(error as Error).message}`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw) || raw instanceof Uint8Array) {
    throw new ProtocolError("malformed frame: expected a map");
  }
  const fields = raw as Record<string, unknown>;
  const type = fields["type"];
  if (typeof type !== "string" || !Object.hasOwn(FIELDS, type)) {
    throw new ProtocolError(`malformed frame: unknown frame type ${JSON.stringify(type)}`);
  }
  const frame: Record<string, unknown> = { type };
  for (const [name, check, fallback] of FIELDS[type as ToSubscriber["type"]]) {
    if (!(name in fields)) {
      if (fallback === undefined) throw new ProtocolError(`malformed frame: ${type} lacks required field \`${name}\``);
      frame[name] = fallback;
      continue;
    }
    const value = check(fields[name]);
    if (value === undefined) throw new ProtocolError(`malformed frame: ${type}.${name} has the wrong type`);
    frame[name] = value;
  }
  return frame as unknown as ToSubscriber;
}
