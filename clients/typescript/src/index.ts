/**
 * fanout's client for browsers and Node.js: live views of a relay's datasets over the full
 * protocol (docs/typescript.md). A sans-I/O core (`ClientCore`: frames in, events out) under
 * a thin WebSocket shell (`connect`, `Subscriber`) and `Client`, which follows redirects and
 * fails over between relays, resuming `every` views with their token.
 */

export { Client, MAX_HOPS, type ClientOptions } from "./client.js";
export { decodeColumns, encodeColumns, keyColumn, validity, packBytes, type Columns, type WireColumns, type WireColumn } from "./columns.js";
export { ClientCore, checkWelcome, hello, type Event, type HelloOptions } from "./core.js";
export { ConnectionFailed, FanoutError, HandshakeRefused, InvalidView, ProtocolError, SubscriptionError } from "./errors.js";
export { decode, encode, PROTOCOL_VERSION, type Mode, type Precision, type Relevance, type Resume, type Tier, type ToRelay, type ToSubscriber, type Transduce, type Transform } from "./frames.js";
export { LiveView } from "./liveview.js";
export { connect, Subscriber, type ConnectOptions, type SubscribeOptions, type WebSocketClass, type WebSocketLike } from "./subscriber.js";
export { CalendarDate, Decimal, Timestamp, type Key, type Row, type Value } from "./values.js";
export { isNoUpdate, rowsOf, ViewState, type Asked, type Update } from "./viewstate.js";
export * from "./views.js";
