// @fanout/client 0.1.0 for browsers, made by clients/typescript/bundle.mjs (npm run build)
// from clients/typescript/src and @msgpack/msgpack: do not edit, rebuild.

// src/errors.ts
var FanoutError = class extends Error {
  name = "FanoutError";
};
var ProtocolError = class extends FanoutError {
  name = "ProtocolError";
};
var SubscriptionError = class extends FanoutError {
  constructor(code, detail, location = null) {
    super(`${code}: ${detail}`);
    this.code = code;
    this.detail = detail;
    this.location = location;
  }
  code;
  detail;
  location;
  name = "SubscriptionError";
};
var HandshakeRefused = class extends ProtocolError {
  constructor(code, detail) {
    super(`${code}: ${detail}`);
    this.code = code;
    this.detail = detail;
  }
  code;
  detail;
  name = "HandshakeRefused";
};
var InvalidView = class extends FanoutError {
  name = "InvalidView";
};
var ConnectionFailed = class extends FanoutError {
  name = "ConnectionFailed";
};

// src/values.ts
var MICROS_PER_MS = 1000n;
var MS_PER_DAY = 864e5;
var Timestamp = class _Timestamp extends Date {
  /** Microseconds since 1970-01-01 00:00 UTC, exact (a `Date` holds milliseconds). */
  micros;
  constructor(micros) {
    const ms = micros / MICROS_PER_MS - (micros % MICROS_PER_MS < 0n ? 1n : 0n);
    super(Number(ms));
    this.micros = micros;
  }
  /** The instant of a `Date` (whole milliseconds). */
  static fromDate(date) {
    return date instanceof _Timestamp ? date : new _Timestamp(BigInt(date.getTime()) * MICROS_PER_MS);
  }
  /** ISO 8601 in UTC with six decimals, `2026-11-29T04:47:25.123456Z`. */
  toMicrosISOString() {
    const fraction = (this.micros % 1000000n + 1000000n) % 1000000n;
    return `${this.toISOString().slice(0, 19)}.${fraction.toString().padStart(6, "0")}Z`;
  }
};
var CalendarDate = class _CalendarDate {
  constructor(days) {
    this.days = days;
  }
  days;
  /** The date of `text` (`YYYY-MM-DD`). */
  static parse(text2) {
    const found = /^(-?\d{4,})-(\d{2})-(\d{2})$/.exec(text2);
    if (found === null) throw new RangeError(`not a date: ${JSON.stringify(text2)}`);
    const ms = Date.UTC(Number(found[1]), Number(found[2]) - 1, Number(found[3]));
    return new _CalendarDate(Math.round(ms / MS_PER_DAY));
  }
  /** Midnight UTC of this date. */
  toDate() {
    return new Date(this.days * MS_PER_DAY);
  }
  /** `YYYY-MM-DD`. */
  toString() {
    return this.toDate().toISOString().slice(0, 10);
  }
  toJSON() {
    return this.toString();
  }
};
var DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$|^[+-]?(nan|snan|inf|infinity)$/i;
var Decimal = class {
  text;
  /** @throws RangeError `text` is not a decimal number. */
  constructor(text2) {
    if (!DECIMAL.test(text2)) throw new RangeError(`not a decimal: ${JSON.stringify(text2)}`);
    this.text = text2;
  }
  /** The nearest JavaScript number (inexact). */
  toNumber() {
    return Number(this.text);
  }
  toString() {
    return this.text;
  }
  toJSON() {
    return this.text;
  }
};

// src/columns.ts
var TIMESTAMP = "<M8[us]";
var DATE = "<M8[D]";
var STRING = "str";
var DECIMAL2 = "decimal";
var BYTES = "bytes";
var VALID = "valid";
var int64 = (value) => value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
var NUMERIC = /* @__PURE__ */ new Map([
  ["<i8", [8, (v, o) => int64(v.getBigInt64(o, true))]],
  ["<u8", [8, (v, o) => int64(v.getBigUint64(o, true))]],
  ["<i4", [4, (v, o) => v.getInt32(o, true)]],
  ["<u4", [4, (v, o) => v.getUint32(o, true)]],
  ["<i2", [2, (v, o) => v.getInt16(o, true)]],
  ["<u2", [2, (v, o) => v.getUint16(o, true)]],
  ["|i1", [1, (v, o) => v.getInt8(o)]],
  ["|u1", [1, (v, o) => v.getUint8(o)]],
  ["|b1", [1, (v, o) => v.getUint8(o) !== 0]],
  ["<f8", [8, (v, o) => v.getFloat64(o, true)]],
  ["<f4", [4, (v, o) => v.getFloat32(o, true)]],
  [TIMESTAMP, [8, (v, o) => new Timestamp(v.getBigInt64(o, true))]],
  [DATE, [8, (v, o) => new CalendarDate(Number(v.getBigInt64(o, true)))]]
]);
function checkShape(payload) {
  const p = payload;
  if (typeof p !== "object" || p === null || !Array.isArray(p.columns)) {
    throw new ProtocolError("columns: expected {length, columns}");
  }
  if (typeof p.length !== "number" || !Number.isInteger(p.length)) {
    throw new ProtocolError(`columns: length ${String(p.length)} is not an integer`);
  }
  if (p.length < 0) throw new ProtocolError(`columns: negative length ${p.length}`);
  for (const column of p.columns) {
    if (!Array.isArray(column) || column.length !== 3 || typeof column[0] !== "string") {
      throw new ProtocolError("columns: a column is [name, dtype, data]");
    }
    if (typeof column[1] !== "string") throw new ProtocolError(`column ${column[0]}: no dtype`);
  }
}
function decodeColumns(payload) {
  checkShape(payload);
  const length = payload.length;
  const out = /* @__PURE__ */ new Map();
  let last = null;
  for (const column of payload.columns) {
    const [name, dtype] = column;
    if (dtype === VALID) {
      if (last === null || last[0] !== name || [STRING, DECIMAL2, VALID].includes(last[1])) {
        throw new ProtocolError(
          `column '${name}': a validity bitmap must follow the numeric or bytes column of its name`
        );
      }
      const values = out.get(name);
      const valid = decodeValidity(column, length);
      for (let i = 0; i < length; i++) if (!valid[i]) values[i] = null;
    } else if (out.has(name)) {
      throw new ProtocolError(`columns: duplicate column '${name}'`);
    } else {
      out.set(name, decodeColumn(column, length));
    }
    last = column;
  }
  return out;
}
function decodeValidity([name, , data], length) {
  const size = length + 7 >> 3;
  if (!(data instanceof Uint8Array) || data.length !== size) {
    throw new ProtocolError(`column '${name}': a validity bitmap of ${length} rows is ${size} bytes`);
  }
  const valid = new Array(length);
  for (let i = 0; i < length; i++) valid[i] = (data[i >> 3] >> (i & 7) & 1) === 1;
  return valid;
}
function decodeColumn(column, length) {
  const [name, dtype, data] = column;
  if (dtype === STRING || dtype === DECIMAL2) {
    if (!Array.isArray(data) || data.length !== length) {
      throw new ProtocolError(`column '${name}': expected a list of ${length} strings`);
    }
    return data.map((value) => text(name, dtype, value));
  }
  if (dtype === BYTES) return unpackBytes(name, data, length);
  const numeric2 = NUMERIC.get(dtype);
  if (numeric2 === void 0) throw new ProtocolError(`column '${name}': unknown dtype '${dtype}'`);
  if (!(data instanceof Uint8Array)) {
    throw new ProtocolError(`column '${name}': numeric data must be bytes`);
  }
  const [size, read] = numeric2;
  if (data.length !== length * size) {
    throw new ProtocolError(
      `column '${name}': ${data.length} bytes, expected ${length} rows x ${size} bytes`
    );
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const values = new Array(length);
  for (let i = 0; i < length; i++) values[i] = read(view, i * size);
  return values;
}
function text(name, dtype, value) {
  if (value === null) return null;
  if (typeof value !== "string") {
    throw new ProtocolError(`column '${name}': expected a list of strings, got ${typeof value}`);
  }
  if (dtype === STRING) return value;
  try {
    return new Decimal(value);
  } catch {
    throw new ProtocolError(`column '${name}': not a decimal: ${JSON.stringify(value)}`);
  }
}
function unpackBytes(name, data, length) {
  const head = 4 * (length + 1);
  if (!(data instanceof Uint8Array) || data.length < head) {
    throw new ProtocolError(`column '${name}': bytes of ${length} rows need ${head} bytes`);
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const offsets = Array.from({ length: length + 1 }, (_, i) => view.getUint32(4 * i, true));
  const ordered = offsets.every((offset, i) => i === 0 || offset >= offsets[i - 1]);
  if (offsets[0] !== 0 || offsets[length] !== data.length - head || !ordered) {
    throw new ProtocolError(`column '${name}': bytes offsets do not fit the data`);
  }
  return offsets.slice(0, length).map((start, i) => data.subarray(head + start, head + offsets[i + 1]));
}
function keyColumn(payload, key, what) {
  const columns2 = decodeColumns(payload);
  const keys = columns2.get(key);
  if (keys === void 0) {
    if (payload.length) {
      throw new ProtocolError(`${what}: ${payload.length} rows without the key column '${key}'`);
    }
    return [];
  }
  if (keys.some((k) => k === null)) throw new ProtocolError(`${what}: the key column '${key}' holds a null`);
  return keys;
}
function encodeColumns(columns2) {
  const entries = columns2 instanceof Map ? [...columns2] : Object.entries(columns2);
  const out = [];
  let length = null;
  for (const [name, values] of entries) {
    if (length === null) length = values.length;
    else if (values.length !== length) {
      throw new RangeError(`column '${name}' has ${values.length} rows, expected ${length}`);
    }
    out.push(...encodeColumn(name, values));
  }
  return { length: length ?? 0, columns: out };
}
function kindOf(value) {
  if (typeof value === "bigint") return "int";
  if (typeof value === "number") return Number.isInteger(value) ? "int" : "float";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "string") return "str";
  if (value instanceof Uint8Array) return "bytes";
  if (value instanceof Date) return "timestamp";
  if (value instanceof CalendarDate) return "date";
  if (value instanceof Decimal) return "decimal";
  throw new RangeError(`a value of type ${typeof value} cannot travel`);
}
function encodeColumn(name, values) {
  const present = values.filter((v) => v !== null);
  const kinds = new Set(present.map(kindOf));
  if (kinds.has("int") && kinds.has("float")) kinds.delete("int");
  if (kinds.size > 1) throw new RangeError(`column '${name}' mixes ${[...kinds].join(", ")} values`);
  const kind = kinds.values().next().value ?? "int";
  const nulls = values.length - present.length;
  if (kind === "str" || kind === "decimal") {
    return [[name, kind === "str" ? STRING : DECIMAL2, values.map((v) => v === null ? null : String(v))]];
  }
  const column = kind === "bytes" ? [name, BYTES, packBytes(values)] : [name, ...numeric(kind, values)];
  if (nulls === 0) return [column];
  return [column, [name, VALID, validity(values.map((v) => v !== null))]];
}
function numeric(kind, values) {
  const size = kind === "bool" ? 1 : 8;
  const data = new Uint8Array(values.length * size);
  const view = new DataView(data.buffer);
  values.forEach((value, i) => {
    if (value === null) return;
    switch (kind) {
      case "int": {
        const integer2 = BigInt(value);
        if (integer2 < -(2n ** 63n) || integer2 >= 2n ** 63n) throw new RangeError(`${integer2} does not fit in int64`);
        view.setBigInt64(i * 8, integer2, true);
        break;
      }
      case "float":
        view.setFloat64(i * 8, value, true);
        break;
      case "bool":
        view.setUint8(i, value ? 1 : 0);
        break;
      case "timestamp":
        view.setBigInt64(i * 8, Timestamp.fromDate(value).micros, true);
        break;
      case "date":
        view.setBigInt64(i * 8, BigInt(value.days), true);
        break;
      default:
        throw new RangeError(`a ${kind} value is not a number`);
    }
  });
  const dtype = { int: "<i8", float: "<f8", bool: "|b1", timestamp: TIMESTAMP, date: DATE }[kind];
  return [dtype, data];
}
function validity(valid) {
  const bits = new Uint8Array(valid.length + 7 >> 3);
  valid.forEach((v, i) => {
    if (v) bits[i >> 3] |= 1 << (i & 7);
  });
  return bits;
}
function packBytes(values) {
  const total = values.reduce((sum, v) => sum + (v?.length ?? 0), 0);
  const head = 4 * (values.length + 1);
  const out = new Uint8Array(head + total);
  const view = new DataView(out.buffer);
  let offset = 0;
  values.forEach((value, i) => {
    if (value !== null) out.set(value, head + offset);
    offset += value?.length ?? 0;
    view.setUint32(4 * (i + 1), offset, true);
  });
  return out;
}

// node_modules/@msgpack/msgpack/dist.esm/utils/utf8.mjs
function utf8Count(str) {
  const strLength = str.length;
  let byteLength = 0;
  let pos = 0;
  while (pos < strLength) {
    let value = str.charCodeAt(pos++);
    if ((value & 4294967168) === 0) {
      byteLength++;
      continue;
    } else if ((value & 4294965248) === 0) {
      byteLength += 2;
    } else {
      if (value >= 55296 && value <= 56319) {
        if (pos < strLength) {
          const extra = str.charCodeAt(pos);
          if ((extra & 64512) === 56320) {
            ++pos;
            value = ((value & 1023) << 10) + (extra & 1023) + 65536;
          }
        }
      }
      if ((value & 4294901760) === 0) {
        byteLength += 3;
      } else {
        byteLength += 4;
      }
    }
  }
  return byteLength;
}
function utf8EncodeJs(str, output, outputOffset) {
  const strLength = str.length;
  let offset = outputOffset;
  let pos = 0;
  while (pos < strLength) {
    let value = str.charCodeAt(pos++);
    if ((value & 4294967168) === 0) {
      output[offset++] = value;
      continue;
    } else if ((value & 4294965248) === 0) {
      output[offset++] = value >> 6 & 31 | 192;
    } else {
      if (value >= 55296 && value <= 56319) {
        if (pos < strLength) {
          const extra = str.charCodeAt(pos);
          if ((extra & 64512) === 56320) {
            ++pos;
            value = ((value & 1023) << 10) + (extra & 1023) + 65536;
          }
        }
      }
      if ((value & 4294901760) === 0) {
        output[offset++] = value >> 12 & 15 | 224;
        output[offset++] = value >> 6 & 63 | 128;
      } else {
        output[offset++] = value >> 18 & 7 | 240;
        output[offset++] = value >> 12 & 63 | 128;
        output[offset++] = value >> 6 & 63 | 128;
      }
    }
    output[offset++] = value & 63 | 128;
  }
}
var sharedTextEncoder = new TextEncoder();
var TEXT_ENCODER_THRESHOLD = 50;
function utf8EncodeTE(str, output, outputOffset) {
  sharedTextEncoder.encodeInto(str, output.subarray(outputOffset));
}
function utf8Encode(str, output, outputOffset) {
  if (str.length > TEXT_ENCODER_THRESHOLD) {
    utf8EncodeTE(str, output, outputOffset);
  } else {
    utf8EncodeJs(str, output, outputOffset);
  }
}
var CHUNK_SIZE = 4096;
function utf8DecodeJs(bytes, inputOffset, byteLength) {
  let offset = inputOffset;
  const end = offset + byteLength;
  const units = [];
  let result = "";
  while (offset < end) {
    const byte1 = bytes[offset++];
    if ((byte1 & 128) === 0) {
      units.push(byte1);
    } else if ((byte1 & 224) === 192) {
      const byte2 = bytes[offset++] & 63;
      units.push((byte1 & 31) << 6 | byte2);
    } else if ((byte1 & 240) === 224) {
      const byte2 = bytes[offset++] & 63;
      const byte3 = bytes[offset++] & 63;
      units.push((byte1 & 31) << 12 | byte2 << 6 | byte3);
    } else if ((byte1 & 248) === 240) {
      const byte2 = bytes[offset++] & 63;
      const byte3 = bytes[offset++] & 63;
      const byte4 = bytes[offset++] & 63;
      let unit = (byte1 & 7) << 18 | byte2 << 12 | byte3 << 6 | byte4;
      if (unit > 65535) {
        unit -= 65536;
        units.push(unit >>> 10 & 1023 | 55296);
        unit = 56320 | unit & 1023;
      }
      units.push(unit);
    } else {
      units.push(byte1);
    }
    if (units.length >= CHUNK_SIZE) {
      result += String.fromCharCode(...units);
      units.length = 0;
    }
  }
  if (units.length > 0) {
    result += String.fromCharCode(...units);
  }
  return result;
}
var sharedTextDecoder = new TextDecoder();
var TEXT_DECODER_THRESHOLD = 200;
function utf8DecodeTD(bytes, inputOffset, byteLength) {
  const stringBytes = bytes.subarray(inputOffset, inputOffset + byteLength);
  return sharedTextDecoder.decode(stringBytes);
}
function utf8Decode(bytes, inputOffset, byteLength) {
  if (byteLength > TEXT_DECODER_THRESHOLD) {
    return utf8DecodeTD(bytes, inputOffset, byteLength);
  } else {
    return utf8DecodeJs(bytes, inputOffset, byteLength);
  }
}

// node_modules/@msgpack/msgpack/dist.esm/ExtData.mjs
var ExtData = class {
  type;
  data;
  constructor(type, data) {
    this.type = type;
    this.data = data;
  }
};

// node_modules/@msgpack/msgpack/dist.esm/DecodeError.mjs
var DecodeError = class _DecodeError extends Error {
  constructor(message) {
    super(message);
    const proto = Object.create(_DecodeError.prototype);
    Object.setPrototypeOf(this, proto);
    Object.defineProperty(this, "name", {
      configurable: true,
      enumerable: false,
      value: _DecodeError.name
    });
  }
};

// node_modules/@msgpack/msgpack/dist.esm/utils/int.mjs
var UINT32_MAX = 4294967295;
function setUint64(view, offset, value) {
  const high = value / 4294967296;
  const low = value;
  view.setUint32(offset, high);
  view.setUint32(offset + 4, low);
}
function setInt64(view, offset, value) {
  const high = Math.floor(value / 4294967296);
  const low = value;
  view.setUint32(offset, high);
  view.setUint32(offset + 4, low);
}
function getInt64(view, offset) {
  const high = view.getInt32(offset);
  const low = view.getUint32(offset + 4);
  return high * 4294967296 + low;
}
function getUint64(view, offset) {
  const high = view.getUint32(offset);
  const low = view.getUint32(offset + 4);
  return high * 4294967296 + low;
}

// node_modules/@msgpack/msgpack/dist.esm/timestamp.mjs
var EXT_TIMESTAMP = -1;
var TIMESTAMP32_MAX_SEC = 4294967296 - 1;
var TIMESTAMP64_MAX_SEC = 17179869184 - 1;
function encodeTimeSpecToTimestamp({ sec, nsec }) {
  if (sec >= 0 && nsec >= 0 && sec <= TIMESTAMP64_MAX_SEC) {
    if (nsec === 0 && sec <= TIMESTAMP32_MAX_SEC) {
      const rv = new Uint8Array(4);
      const view = new DataView(rv.buffer);
      view.setUint32(0, sec);
      return rv;
    } else {
      const secHigh = sec / 4294967296;
      const secLow = sec & 4294967295;
      const rv = new Uint8Array(8);
      const view = new DataView(rv.buffer);
      view.setUint32(0, nsec << 2 | secHigh & 3);
      view.setUint32(4, secLow);
      return rv;
    }
  } else {
    const rv = new Uint8Array(12);
    const view = new DataView(rv.buffer);
    view.setUint32(0, nsec);
    setInt64(view, 4, sec);
    return rv;
  }
}
function encodeDateToTimeSpec(date) {
  const msec = date.getTime();
  const sec = Math.floor(msec / 1e3);
  const nsec = (msec - sec * 1e3) * 1e6;
  const nsecInSec = Math.floor(nsec / 1e9);
  return {
    sec: sec + nsecInSec,
    nsec: nsec - nsecInSec * 1e9
  };
}
function encodeTimestampExtension(object) {
  if (object instanceof Date) {
    const timeSpec = encodeDateToTimeSpec(object);
    return encodeTimeSpecToTimestamp(timeSpec);
  } else {
    return null;
  }
}
function decodeTimestampToTimeSpec(data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  switch (data.byteLength) {
    case 4: {
      const sec = view.getUint32(0);
      const nsec = 0;
      return { sec, nsec };
    }
    case 8: {
      const nsec30AndSecHigh2 = view.getUint32(0);
      const secLow32 = view.getUint32(4);
      const sec = (nsec30AndSecHigh2 & 3) * 4294967296 + secLow32;
      const nsec = nsec30AndSecHigh2 >>> 2;
      return { sec, nsec };
    }
    case 12: {
      const sec = getInt64(view, 4);
      const nsec = view.getUint32(0);
      return { sec, nsec };
    }
    default:
      throw new DecodeError(`Unrecognized data size for timestamp (expected 4, 8, or 12): ${data.length}`);
  }
}
function decodeTimestampExtension(data) {
  const timeSpec = decodeTimestampToTimeSpec(data);
  return new Date(timeSpec.sec * 1e3 + timeSpec.nsec / 1e6);
}
var timestampExtension = {
  type: EXT_TIMESTAMP,
  encode: encodeTimestampExtension,
  decode: decodeTimestampExtension
};

// node_modules/@msgpack/msgpack/dist.esm/ExtensionCodec.mjs
var ExtensionCodec = class _ExtensionCodec {
  static defaultCodec = new _ExtensionCodec();
  // ensures ExtensionCodecType<X> matches ExtensionCodec<X>
  // this will make type errors a lot more clear
  // eslint-disable-next-line @typescript-eslint/naming-convention
  __brand;
  // built-in extensions
  builtInEncoders = [];
  builtInDecoders = [];
  // custom extensions
  encoders = [];
  decoders = [];
  constructor() {
    this.register(timestampExtension);
  }
  register({ type, encode: encode2, decode: decode2 }) {
    if (type >= 0) {
      this.encoders[type] = encode2;
      this.decoders[type] = decode2;
    } else {
      const index = -1 - type;
      this.builtInEncoders[index] = encode2;
      this.builtInDecoders[index] = decode2;
    }
  }
  tryToEncode(object, context) {
    for (let i = 0; i < this.builtInEncoders.length; i++) {
      const encodeExt = this.builtInEncoders[i];
      if (encodeExt != null) {
        const data = encodeExt(object, context);
        if (data != null) {
          const type = -1 - i;
          return new ExtData(type, data);
        }
      }
    }
    for (let i = 0; i < this.encoders.length; i++) {
      const encodeExt = this.encoders[i];
      if (encodeExt != null) {
        const data = encodeExt(object, context);
        if (data != null) {
          const type = i;
          return new ExtData(type, data);
        }
      }
    }
    if (object instanceof ExtData) {
      return object;
    }
    return null;
  }
  decode(data, type, context) {
    const decodeExt = type < 0 ? this.builtInDecoders[-1 - type] : this.decoders[type];
    if (decodeExt) {
      return decodeExt(data, type, context);
    } else {
      return new ExtData(type, data);
    }
  }
};

// node_modules/@msgpack/msgpack/dist.esm/utils/typedArrays.mjs
function isArrayBufferLike(buffer) {
  return buffer instanceof ArrayBuffer || typeof SharedArrayBuffer !== "undefined" && buffer instanceof SharedArrayBuffer;
}
function ensureUint8Array(buffer) {
  if (buffer instanceof Uint8Array) {
    return buffer;
  } else if (ArrayBuffer.isView(buffer)) {
    return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  } else if (isArrayBufferLike(buffer)) {
    return new Uint8Array(buffer);
  } else {
    return Uint8Array.from(buffer);
  }
}

// node_modules/@msgpack/msgpack/dist.esm/Encoder.mjs
var DEFAULT_MAX_DEPTH = 100;
var DEFAULT_INITIAL_BUFFER_SIZE = 2048;
var Encoder = class _Encoder {
  extensionCodec;
  context;
  useBigInt64;
  maxDepth;
  initialBufferSize;
  sortKeys;
  forceFloat32;
  ignoreUndefined;
  forceIntegerToFloat;
  pos;
  view;
  bytes;
  entered = false;
  constructor(options) {
    this.extensionCodec = options?.extensionCodec ?? ExtensionCodec.defaultCodec;
    this.context = options?.context;
    this.useBigInt64 = options?.useBigInt64 ?? false;
    this.maxDepth = options?.maxDepth ?? DEFAULT_MAX_DEPTH;
    this.initialBufferSize = options?.initialBufferSize ?? DEFAULT_INITIAL_BUFFER_SIZE;
    this.sortKeys = options?.sortKeys ?? false;
    this.forceFloat32 = options?.forceFloat32 ?? false;
    this.ignoreUndefined = options?.ignoreUndefined ?? false;
    this.forceIntegerToFloat = options?.forceIntegerToFloat ?? false;
    this.pos = 0;
    this.view = new DataView(new ArrayBuffer(this.initialBufferSize));
    this.bytes = new Uint8Array(this.view.buffer);
  }
  clone() {
    return new _Encoder({
      extensionCodec: this.extensionCodec,
      context: this.context,
      useBigInt64: this.useBigInt64,
      maxDepth: this.maxDepth,
      initialBufferSize: this.initialBufferSize,
      sortKeys: this.sortKeys,
      forceFloat32: this.forceFloat32,
      ignoreUndefined: this.ignoreUndefined,
      forceIntegerToFloat: this.forceIntegerToFloat
    });
  }
  reinitializeState() {
    this.pos = 0;
  }
  /**
   * This is almost equivalent to {@link Encoder#encode}, but it returns an reference of the encoder's internal buffer and thus much faster than {@link Encoder#encode}.
   *
   * @returns Encodes the object and returns a shared reference the encoder's internal buffer.
   */
  encodeSharedRef(object) {
    if (this.entered) {
      const instance = this.clone();
      return instance.encodeSharedRef(object);
    }
    try {
      this.entered = true;
      this.reinitializeState();
      this.doEncode(object, 1);
      return this.bytes.subarray(0, this.pos);
    } finally {
      this.entered = false;
    }
  }
  /**
   * @returns Encodes the object and returns a copy of the encoder's internal buffer.
   */
  encode(object) {
    if (this.entered) {
      const instance = this.clone();
      return instance.encode(object);
    }
    try {
      this.entered = true;
      this.reinitializeState();
      this.doEncode(object, 1);
      return this.bytes.slice(0, this.pos);
    } finally {
      this.entered = false;
    }
  }
  doEncode(object, depth) {
    if (depth > this.maxDepth) {
      throw new Error(`Too deep objects in depth ${depth}`);
    }
    if (object == null) {
      this.encodeNil();
    } else if (typeof object === "boolean") {
      this.encodeBoolean(object);
    } else if (typeof object === "number") {
      if (!this.forceIntegerToFloat) {
        this.encodeNumber(object);
      } else {
        this.encodeNumberAsFloat(object);
      }
    } else if (typeof object === "string") {
      this.encodeString(object);
    } else if (this.useBigInt64 && typeof object === "bigint") {
      this.encodeBigInt64(object);
    } else {
      this.encodeObject(object, depth);
    }
  }
  ensureBufferSizeToWrite(sizeToWrite) {
    const requiredSize = this.pos + sizeToWrite;
    if (this.view.byteLength < requiredSize) {
      this.resizeBuffer(requiredSize * 2);
    }
  }
  resizeBuffer(newSize) {
    const newBuffer = new ArrayBuffer(newSize);
    const newBytes = new Uint8Array(newBuffer);
    const newView = new DataView(newBuffer);
    newBytes.set(this.bytes);
    this.view = newView;
    this.bytes = newBytes;
  }
  encodeNil() {
    this.writeU8(192);
  }
  encodeBoolean(object) {
    if (object === false) {
      this.writeU8(194);
    } else {
      this.writeU8(195);
    }
  }
  encodeNumber(object) {
    if (!this.forceIntegerToFloat && Number.isSafeInteger(object)) {
      if (object >= 0) {
        if (object < 128) {
          this.writeU8(object);
        } else if (object < 256) {
          this.writeU8(204);
          this.writeU8(object);
        } else if (object < 65536) {
          this.writeU8(205);
          this.writeU16(object);
        } else if (object < 4294967296) {
          this.writeU8(206);
          this.writeU32(object);
        } else if (!this.useBigInt64) {
          this.writeU8(207);
          this.writeU64(object);
        } else {
          this.encodeNumberAsFloat(object);
        }
      } else {
        if (object >= -32) {
          this.writeU8(224 | object + 32);
        } else if (object >= -128) {
          this.writeU8(208);
          this.writeI8(object);
        } else if (object >= -32768) {
          this.writeU8(209);
          this.writeI16(object);
        } else if (object >= -2147483648) {
          this.writeU8(210);
          this.writeI32(object);
        } else if (!this.useBigInt64) {
          this.writeU8(211);
          this.writeI64(object);
        } else {
          this.encodeNumberAsFloat(object);
        }
      }
    } else {
      this.encodeNumberAsFloat(object);
    }
  }
  encodeNumberAsFloat(object) {
    if (this.forceFloat32) {
      this.writeU8(202);
      this.writeF32(object);
    } else {
      this.writeU8(203);
      this.writeF64(object);
    }
  }
  encodeBigInt64(object) {
    if (object >= BigInt(0)) {
      this.writeU8(207);
      this.writeBigUint64(object);
    } else {
      this.writeU8(211);
      this.writeBigInt64(object);
    }
  }
  writeStringHeader(byteLength) {
    if (byteLength < 32) {
      this.writeU8(160 + byteLength);
    } else if (byteLength < 256) {
      this.writeU8(217);
      this.writeU8(byteLength);
    } else if (byteLength < 65536) {
      this.writeU8(218);
      this.writeU16(byteLength);
    } else if (byteLength < 4294967296) {
      this.writeU8(219);
      this.writeU32(byteLength);
    } else {
      throw new Error(`Too long string: ${byteLength} bytes in UTF-8`);
    }
  }
  encodeString(object) {
    const maxHeaderSize = 1 + 4;
    const byteLength = utf8Count(object);
    this.ensureBufferSizeToWrite(maxHeaderSize + byteLength);
    this.writeStringHeader(byteLength);
    utf8Encode(object, this.bytes, this.pos);
    this.pos += byteLength;
  }
  encodeObject(object, depth) {
    const ext = this.extensionCodec.tryToEncode(object, this.context);
    if (ext != null) {
      this.encodeExtension(ext);
    } else if (Array.isArray(object)) {
      this.encodeArray(object, depth);
    } else if (ArrayBuffer.isView(object)) {
      this.encodeBinary(object);
    } else if (typeof object === "object") {
      this.encodeMap(object, depth);
    } else {
      throw new Error(`Unrecognized object: ${Object.prototype.toString.apply(object)}`);
    }
  }
  encodeBinary(object) {
    const size = object.byteLength;
    if (size < 256) {
      this.writeU8(196);
      this.writeU8(size);
    } else if (size < 65536) {
      this.writeU8(197);
      this.writeU16(size);
    } else if (size < 4294967296) {
      this.writeU8(198);
      this.writeU32(size);
    } else {
      throw new Error(`Too large binary: ${size}`);
    }
    const bytes = ensureUint8Array(object);
    this.writeU8a(bytes);
  }
  encodeArray(object, depth) {
    const size = object.length;
    if (size < 16) {
      this.writeU8(144 + size);
    } else if (size < 65536) {
      this.writeU8(220);
      this.writeU16(size);
    } else if (size < 4294967296) {
      this.writeU8(221);
      this.writeU32(size);
    } else {
      throw new Error(`Too large array: ${size}`);
    }
    for (const item of object) {
      this.doEncode(item, depth + 1);
    }
  }
  countWithoutUndefined(object, keys) {
    let count = 0;
    for (const key of keys) {
      if (object[key] !== void 0) {
        count++;
      }
    }
    return count;
  }
  encodeMap(object, depth) {
    const keys = Object.keys(object);
    if (this.sortKeys) {
      keys.sort();
    }
    const size = this.ignoreUndefined ? this.countWithoutUndefined(object, keys) : keys.length;
    if (size < 16) {
      this.writeU8(128 + size);
    } else if (size < 65536) {
      this.writeU8(222);
      this.writeU16(size);
    } else if (size < 4294967296) {
      this.writeU8(223);
      this.writeU32(size);
    } else {
      throw new Error(`Too large map object: ${size}`);
    }
    for (const key of keys) {
      const value = object[key];
      if (!(this.ignoreUndefined && value === void 0)) {
        this.encodeString(key);
        this.doEncode(value, depth + 1);
      }
    }
  }
  encodeExtension(ext) {
    if (typeof ext.data === "function") {
      const data = ext.data(this.pos + 6);
      const size2 = data.length;
      if (size2 >= 4294967296) {
        throw new Error(`Too large extension object: ${size2}`);
      }
      this.writeU8(201);
      this.writeU32(size2);
      this.writeI8(ext.type);
      this.writeU8a(data);
      return;
    }
    const size = ext.data.length;
    if (size === 1) {
      this.writeU8(212);
    } else if (size === 2) {
      this.writeU8(213);
    } else if (size === 4) {
      this.writeU8(214);
    } else if (size === 8) {
      this.writeU8(215);
    } else if (size === 16) {
      this.writeU8(216);
    } else if (size < 256) {
      this.writeU8(199);
      this.writeU8(size);
    } else if (size < 65536) {
      this.writeU8(200);
      this.writeU16(size);
    } else if (size < 4294967296) {
      this.writeU8(201);
      this.writeU32(size);
    } else {
      throw new Error(`Too large extension object: ${size}`);
    }
    this.writeI8(ext.type);
    this.writeU8a(ext.data);
  }
  writeU8(value) {
    this.ensureBufferSizeToWrite(1);
    this.view.setUint8(this.pos, value);
    this.pos++;
  }
  writeU8a(values) {
    const size = values.length;
    this.ensureBufferSizeToWrite(size);
    this.bytes.set(values, this.pos);
    this.pos += size;
  }
  writeI8(value) {
    this.ensureBufferSizeToWrite(1);
    this.view.setInt8(this.pos, value);
    this.pos++;
  }
  writeU16(value) {
    this.ensureBufferSizeToWrite(2);
    this.view.setUint16(this.pos, value);
    this.pos += 2;
  }
  writeI16(value) {
    this.ensureBufferSizeToWrite(2);
    this.view.setInt16(this.pos, value);
    this.pos += 2;
  }
  writeU32(value) {
    this.ensureBufferSizeToWrite(4);
    this.view.setUint32(this.pos, value);
    this.pos += 4;
  }
  writeI32(value) {
    this.ensureBufferSizeToWrite(4);
    this.view.setInt32(this.pos, value);
    this.pos += 4;
  }
  writeF32(value) {
    this.ensureBufferSizeToWrite(4);
    this.view.setFloat32(this.pos, value);
    this.pos += 4;
  }
  writeF64(value) {
    this.ensureBufferSizeToWrite(8);
    this.view.setFloat64(this.pos, value);
    this.pos += 8;
  }
  writeU64(value) {
    this.ensureBufferSizeToWrite(8);
    setUint64(this.view, this.pos, value);
    this.pos += 8;
  }
  writeI64(value) {
    this.ensureBufferSizeToWrite(8);
    setInt64(this.view, this.pos, value);
    this.pos += 8;
  }
  writeBigUint64(value) {
    this.ensureBufferSizeToWrite(8);
    this.view.setBigUint64(this.pos, value);
    this.pos += 8;
  }
  writeBigInt64(value) {
    this.ensureBufferSizeToWrite(8);
    this.view.setBigInt64(this.pos, value);
    this.pos += 8;
  }
};

// node_modules/@msgpack/msgpack/dist.esm/utils/prettyByte.mjs
function prettyByte(byte) {
  return `${byte < 0 ? "-" : ""}0x${Math.abs(byte).toString(16).padStart(2, "0")}`;
}

// node_modules/@msgpack/msgpack/dist.esm/CachedKeyDecoder.mjs
var DEFAULT_MAX_KEY_LENGTH = 16;
var DEFAULT_MAX_LENGTH_PER_KEY = 16;
var CachedKeyDecoder = class {
  hit = 0;
  miss = 0;
  caches;
  maxKeyLength;
  maxLengthPerKey;
  constructor(maxKeyLength = DEFAULT_MAX_KEY_LENGTH, maxLengthPerKey = DEFAULT_MAX_LENGTH_PER_KEY) {
    this.maxKeyLength = maxKeyLength;
    this.maxLengthPerKey = maxLengthPerKey;
    this.caches = [];
    for (let i = 0; i < this.maxKeyLength; i++) {
      this.caches.push([]);
    }
  }
  canBeCached(byteLength) {
    return byteLength > 0 && byteLength <= this.maxKeyLength;
  }
  find(bytes, inputOffset, byteLength) {
    const records = this.caches[byteLength - 1];
    FIND_CHUNK: for (const record of records) {
      const recordBytes = record.bytes;
      for (let j = 0; j < byteLength; j++) {
        if (recordBytes[j] !== bytes[inputOffset + j]) {
          continue FIND_CHUNK;
        }
      }
      return record.str;
    }
    return null;
  }
  store(bytes, value) {
    const records = this.caches[bytes.length - 1];
    const record = { bytes, str: value };
    if (records.length >= this.maxLengthPerKey) {
      records[Math.random() * records.length | 0] = record;
    } else {
      records.push(record);
    }
  }
  decode(bytes, inputOffset, byteLength) {
    const cachedValue = this.find(bytes, inputOffset, byteLength);
    if (cachedValue != null) {
      this.hit++;
      return cachedValue;
    }
    this.miss++;
    const str = utf8DecodeJs(bytes, inputOffset, byteLength);
    const slicedCopyOfBytes = Uint8Array.prototype.slice.call(bytes, inputOffset, inputOffset + byteLength);
    this.store(slicedCopyOfBytes, str);
    return str;
  }
};

// node_modules/@msgpack/msgpack/dist.esm/Decoder.mjs
var STATE_ARRAY = "array";
var STATE_MAP_KEY = "map_key";
var STATE_MAP_VALUE = "map_value";
var mapKeyConverter = (key) => {
  if (typeof key === "string" || typeof key === "number") {
    return key;
  }
  throw new DecodeError("The type of key must be string or number but " + typeof key);
};
var StackPool = class {
  stack = [];
  stackHeadPosition = -1;
  get length() {
    return this.stackHeadPosition + 1;
  }
  top() {
    return this.stack[this.stackHeadPosition];
  }
  pushArrayState(size) {
    const state = this.getUninitializedStateFromPool();
    state.type = STATE_ARRAY;
    state.position = 0;
    state.size = size;
    state.array = new Array(size);
  }
  pushMapState(size) {
    const state = this.getUninitializedStateFromPool();
    state.type = STATE_MAP_KEY;
    state.readCount = 0;
    state.size = size;
    state.map = {};
  }
  getUninitializedStateFromPool() {
    this.stackHeadPosition++;
    if (this.stackHeadPosition === this.stack.length) {
      const partialState = {
        type: void 0,
        size: 0,
        array: void 0,
        position: 0,
        readCount: 0,
        map: void 0,
        key: null
      };
      this.stack.push(partialState);
    }
    return this.stack[this.stackHeadPosition];
  }
  release(state) {
    const topStackState = this.stack[this.stackHeadPosition];
    if (topStackState !== state) {
      throw new Error("Invalid stack state. Released state is not on top of the stack.");
    }
    if (state.type === STATE_ARRAY) {
      const partialState = state;
      partialState.size = 0;
      partialState.array = void 0;
      partialState.position = 0;
      partialState.type = void 0;
    }
    if (state.type === STATE_MAP_KEY || state.type === STATE_MAP_VALUE) {
      const partialState = state;
      partialState.size = 0;
      partialState.map = void 0;
      partialState.readCount = 0;
      partialState.type = void 0;
    }
    this.stackHeadPosition--;
  }
  reset() {
    this.stack.length = 0;
    this.stackHeadPosition = -1;
  }
};
var HEAD_BYTE_REQUIRED = -1;
var EMPTY_VIEW = new DataView(new ArrayBuffer(0));
var EMPTY_BYTES = new Uint8Array(EMPTY_VIEW.buffer);
try {
  EMPTY_VIEW.getInt8(0);
} catch (e) {
  if (!(e instanceof RangeError)) {
    throw new Error("This module is not supported in the current JavaScript engine because DataView does not throw RangeError on out-of-bounds access");
  }
}
var MORE_DATA = new RangeError("Insufficient data");
var sharedCachedKeyDecoder = new CachedKeyDecoder();
var Decoder = class _Decoder {
  extensionCodec;
  context;
  useBigInt64;
  rawStrings;
  maxStrLength;
  maxBinLength;
  maxArrayLength;
  maxMapLength;
  maxExtLength;
  keyDecoder;
  mapKeyConverter;
  totalPos = 0;
  pos = 0;
  view = EMPTY_VIEW;
  bytes = EMPTY_BYTES;
  headByte = HEAD_BYTE_REQUIRED;
  stack = new StackPool();
  entered = false;
  constructor(options) {
    this.extensionCodec = options?.extensionCodec ?? ExtensionCodec.defaultCodec;
    this.context = options?.context;
    this.useBigInt64 = options?.useBigInt64 ?? false;
    this.rawStrings = options?.rawStrings ?? false;
    this.maxStrLength = options?.maxStrLength ?? UINT32_MAX;
    this.maxBinLength = options?.maxBinLength ?? UINT32_MAX;
    this.maxArrayLength = options?.maxArrayLength ?? UINT32_MAX;
    this.maxMapLength = options?.maxMapLength ?? UINT32_MAX;
    this.maxExtLength = options?.maxExtLength ?? UINT32_MAX;
    this.keyDecoder = options?.keyDecoder !== void 0 ? options.keyDecoder : sharedCachedKeyDecoder;
    this.mapKeyConverter = options?.mapKeyConverter ?? mapKeyConverter;
  }
  clone() {
    return new _Decoder({
      extensionCodec: this.extensionCodec,
      context: this.context,
      useBigInt64: this.useBigInt64,
      rawStrings: this.rawStrings,
      maxStrLength: this.maxStrLength,
      maxBinLength: this.maxBinLength,
      maxArrayLength: this.maxArrayLength,
      maxMapLength: this.maxMapLength,
      maxExtLength: this.maxExtLength,
      keyDecoder: this.keyDecoder
    });
  }
  reinitializeState() {
    this.totalPos = 0;
    this.headByte = HEAD_BYTE_REQUIRED;
    this.stack.reset();
  }
  setBuffer(buffer) {
    const bytes = ensureUint8Array(buffer);
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.pos = 0;
  }
  appendBuffer(buffer) {
    if (this.headByte === HEAD_BYTE_REQUIRED && !this.hasRemaining(1)) {
      this.setBuffer(buffer);
    } else {
      const remainingData = this.bytes.subarray(this.pos);
      const newData = ensureUint8Array(buffer);
      const newBuffer = new Uint8Array(remainingData.length + newData.length);
      newBuffer.set(remainingData);
      newBuffer.set(newData, remainingData.length);
      this.setBuffer(newBuffer);
    }
  }
  hasRemaining(size) {
    return this.view.byteLength - this.pos >= size;
  }
  createExtraByteError(posToShow) {
    const { view, pos } = this;
    return new RangeError(`Extra ${view.byteLength - pos} of ${view.byteLength} byte(s) found at buffer[${posToShow}]`);
  }
  /**
   * @throws {@link DecodeError}
   * @throws {@link RangeError}
   */
  decode(buffer) {
    if (this.entered) {
      const instance = this.clone();
      return instance.decode(buffer);
    }
    try {
      this.entered = true;
      this.reinitializeState();
      this.setBuffer(buffer);
      const object = this.doDecodeSync();
      if (this.hasRemaining(1)) {
        throw this.createExtraByteError(this.pos);
      }
      return object;
    } finally {
      this.entered = false;
    }
  }
  *decodeMulti(buffer) {
    if (this.entered) {
      const instance = this.clone();
      yield* instance.decodeMulti(buffer);
      return;
    }
    try {
      this.entered = true;
      this.reinitializeState();
      this.setBuffer(buffer);
      while (this.hasRemaining(1)) {
        yield this.doDecodeSync();
      }
    } finally {
      this.entered = false;
    }
  }
  async decodeAsync(stream) {
    if (this.entered) {
      const instance = this.clone();
      return instance.decodeAsync(stream);
    }
    try {
      this.entered = true;
      let decoded = false;
      let object;
      for await (const buffer of stream) {
        if (decoded) {
          this.entered = false;
          throw this.createExtraByteError(this.totalPos);
        }
        this.appendBuffer(buffer);
        try {
          object = this.doDecodeSync();
          decoded = true;
        } catch (e) {
          if (!(e instanceof RangeError)) {
            throw e;
          }
        }
        this.totalPos += this.pos;
      }
      if (decoded) {
        if (this.hasRemaining(1)) {
          throw this.createExtraByteError(this.totalPos);
        }
        return object;
      }
      const { headByte, pos, totalPos } = this;
      throw new RangeError(`Insufficient data in parsing ${prettyByte(headByte)} at ${totalPos} (${pos} in the current buffer)`);
    } finally {
      this.entered = false;
    }
  }
  decodeArrayStream(stream) {
    return this.decodeMultiAsync(stream, true);
  }
  decodeStream(stream) {
    return this.decodeMultiAsync(stream, false);
  }
  async *decodeMultiAsync(stream, isArray) {
    if (this.entered) {
      const instance = this.clone();
      yield* instance.decodeMultiAsync(stream, isArray);
      return;
    }
    try {
      this.entered = true;
      let isArrayHeaderRequired = isArray;
      let arrayItemsLeft = -1;
      for await (const buffer of stream) {
        if (isArray && arrayItemsLeft === 0) {
          throw this.createExtraByteError(this.totalPos);
        }
        this.appendBuffer(buffer);
        if (isArrayHeaderRequired) {
          arrayItemsLeft = this.readArraySize();
          isArrayHeaderRequired = false;
          this.complete();
        }
        try {
          while (true) {
            yield this.doDecodeSync();
            if (--arrayItemsLeft === 0) {
              break;
            }
          }
        } catch (e) {
          if (!(e instanceof RangeError)) {
            throw e;
          }
        }
        this.totalPos += this.pos;
      }
    } finally {
      this.entered = false;
    }
  }
  doDecodeSync() {
    DECODE: while (true) {
      const headByte = this.readHeadByte();
      let object;
      if (headByte >= 224) {
        object = headByte - 256;
      } else if (headByte < 192) {
        if (headByte < 128) {
          object = headByte;
        } else if (headByte < 144) {
          const size = headByte - 128;
          if (size !== 0) {
            this.pushMapState(size);
            this.complete();
            continue DECODE;
          } else {
            object = {};
          }
        } else if (headByte < 160) {
          const size = headByte - 144;
          if (size !== 0) {
            this.pushArrayState(size);
            this.complete();
            continue DECODE;
          } else {
            object = [];
          }
        } else {
          const byteLength = headByte - 160;
          object = this.decodeString(byteLength, 0);
        }
      } else if (headByte === 192) {
        object = null;
      } else if (headByte === 194) {
        object = false;
      } else if (headByte === 195) {
        object = true;
      } else if (headByte === 202) {
        object = this.readF32();
      } else if (headByte === 203) {
        object = this.readF64();
      } else if (headByte === 204) {
        object = this.readU8();
      } else if (headByte === 205) {
        object = this.readU16();
      } else if (headByte === 206) {
        object = this.readU32();
      } else if (headByte === 207) {
        if (this.useBigInt64) {
          object = this.readU64AsBigInt();
        } else {
          object = this.readU64();
        }
      } else if (headByte === 208) {
        object = this.readI8();
      } else if (headByte === 209) {
        object = this.readI16();
      } else if (headByte === 210) {
        object = this.readI32();
      } else if (headByte === 211) {
        if (this.useBigInt64) {
          object = this.readI64AsBigInt();
        } else {
          object = this.readI64();
        }
      } else if (headByte === 217) {
        const byteLength = this.lookU8();
        object = this.decodeString(byteLength, 1);
      } else if (headByte === 218) {
        const byteLength = this.lookU16();
        object = this.decodeString(byteLength, 2);
      } else if (headByte === 219) {
        const byteLength = this.lookU32();
        object = this.decodeString(byteLength, 4);
      } else if (headByte === 220) {
        const size = this.readU16();
        if (size !== 0) {
          this.pushArrayState(size);
          this.complete();
          continue DECODE;
        } else {
          object = [];
        }
      } else if (headByte === 221) {
        const size = this.readU32();
        if (size !== 0) {
          this.pushArrayState(size);
          this.complete();
          continue DECODE;
        } else {
          object = [];
        }
      } else if (headByte === 222) {
        const size = this.readU16();
        if (size !== 0) {
          this.pushMapState(size);
          this.complete();
          continue DECODE;
        } else {
          object = {};
        }
      } else if (headByte === 223) {
        const size = this.readU32();
        if (size !== 0) {
          this.pushMapState(size);
          this.complete();
          continue DECODE;
        } else {
          object = {};
        }
      } else if (headByte === 196) {
        const size = this.lookU8();
        object = this.decodeBinary(size, 1);
      } else if (headByte === 197) {
        const size = this.lookU16();
        object = this.decodeBinary(size, 2);
      } else if (headByte === 198) {
        const size = this.lookU32();
        object = this.decodeBinary(size, 4);
      } else if (headByte === 212) {
        object = this.decodeExtension(1, 0);
      } else if (headByte === 213) {
        object = this.decodeExtension(2, 0);
      } else if (headByte === 214) {
        object = this.decodeExtension(4, 0);
      } else if (headByte === 215) {
        object = this.decodeExtension(8, 0);
      } else if (headByte === 216) {
        object = this.decodeExtension(16, 0);
      } else if (headByte === 199) {
        const size = this.lookU8();
        object = this.decodeExtension(size, 1);
      } else if (headByte === 200) {
        const size = this.lookU16();
        object = this.decodeExtension(size, 2);
      } else if (headByte === 201) {
        const size = this.lookU32();
        object = this.decodeExtension(size, 4);
      } else {
        throw new DecodeError(`Unrecognized type byte: ${prettyByte(headByte)}`);
      }
      this.complete();
      const stack = this.stack;
      while (stack.length > 0) {
        const state = stack.top();
        if (state.type === STATE_ARRAY) {
          state.array[state.position] = object;
          state.position++;
          if (state.position === state.size) {
            object = state.array;
            stack.release(state);
          } else {
            continue DECODE;
          }
        } else if (state.type === STATE_MAP_KEY) {
          if (object === "__proto__") {
            throw new DecodeError("The key __proto__ is not allowed");
          }
          state.key = this.mapKeyConverter(object);
          state.type = STATE_MAP_VALUE;
          continue DECODE;
        } else {
          state.map[state.key] = object;
          state.readCount++;
          if (state.readCount === state.size) {
            object = state.map;
            stack.release(state);
          } else {
            state.key = null;
            state.type = STATE_MAP_KEY;
            continue DECODE;
          }
        }
      }
      return object;
    }
  }
  readHeadByte() {
    if (this.headByte === HEAD_BYTE_REQUIRED) {
      this.headByte = this.readU8();
    }
    return this.headByte;
  }
  complete() {
    this.headByte = HEAD_BYTE_REQUIRED;
  }
  readArraySize() {
    const headByte = this.readHeadByte();
    switch (headByte) {
      case 220:
        return this.readU16();
      case 221:
        return this.readU32();
      default: {
        if (headByte < 160) {
          return headByte - 144;
        } else {
          throw new DecodeError(`Unrecognized array type byte: ${prettyByte(headByte)}`);
        }
      }
    }
  }
  pushMapState(size) {
    if (size > this.maxMapLength) {
      throw new DecodeError(`Max length exceeded: map length (${size}) > maxMapLengthLength (${this.maxMapLength})`);
    }
    this.stack.pushMapState(size);
  }
  pushArrayState(size) {
    if (size > this.maxArrayLength) {
      throw new DecodeError(`Max length exceeded: array length (${size}) > maxArrayLength (${this.maxArrayLength})`);
    }
    this.stack.pushArrayState(size);
  }
  decodeString(byteLength, headerOffset) {
    if (!this.rawStrings || this.stateIsMapKey()) {
      return this.decodeUtf8String(byteLength, headerOffset);
    }
    return this.decodeBinary(byteLength, headerOffset);
  }
  /**
   * @throws {@link RangeError}
   */
  decodeUtf8String(byteLength, headerOffset) {
    if (byteLength > this.maxStrLength) {
      throw new DecodeError(`Max length exceeded: UTF-8 byte length (${byteLength}) > maxStrLength (${this.maxStrLength})`);
    }
    if (this.bytes.byteLength < this.pos + headerOffset + byteLength) {
      throw MORE_DATA;
    }
    const offset = this.pos + headerOffset;
    let object;
    if (this.stateIsMapKey() && this.keyDecoder?.canBeCached(byteLength)) {
      object = this.keyDecoder.decode(this.bytes, offset, byteLength);
    } else {
      object = utf8Decode(this.bytes, offset, byteLength);
    }
    this.pos += headerOffset + byteLength;
    return object;
  }
  stateIsMapKey() {
    if (this.stack.length > 0) {
      const state = this.stack.top();
      return state.type === STATE_MAP_KEY;
    }
    return false;
  }
  /**
   * @throws {@link RangeError}
   */
  decodeBinary(byteLength, headOffset) {
    if (byteLength > this.maxBinLength) {
      throw new DecodeError(`Max length exceeded: bin length (${byteLength}) > maxBinLength (${this.maxBinLength})`);
    }
    if (!this.hasRemaining(byteLength + headOffset)) {
      throw MORE_DATA;
    }
    const offset = this.pos + headOffset;
    const object = this.bytes.subarray(offset, offset + byteLength);
    this.pos += headOffset + byteLength;
    return object;
  }
  decodeExtension(size, headOffset) {
    if (size > this.maxExtLength) {
      throw new DecodeError(`Max length exceeded: ext length (${size}) > maxExtLength (${this.maxExtLength})`);
    }
    const extType = this.view.getInt8(this.pos + headOffset);
    const data = this.decodeBinary(
      size,
      headOffset + 1
      /* extType */
    );
    return this.extensionCodec.decode(data, extType, this.context);
  }
  lookU8() {
    return this.view.getUint8(this.pos);
  }
  lookU16() {
    return this.view.getUint16(this.pos);
  }
  lookU32() {
    return this.view.getUint32(this.pos);
  }
  readU8() {
    const value = this.view.getUint8(this.pos);
    this.pos++;
    return value;
  }
  readI8() {
    const value = this.view.getInt8(this.pos);
    this.pos++;
    return value;
  }
  readU16() {
    const value = this.view.getUint16(this.pos);
    this.pos += 2;
    return value;
  }
  readI16() {
    const value = this.view.getInt16(this.pos);
    this.pos += 2;
    return value;
  }
  readU32() {
    const value = this.view.getUint32(this.pos);
    this.pos += 4;
    return value;
  }
  readI32() {
    const value = this.view.getInt32(this.pos);
    this.pos += 4;
    return value;
  }
  readU64() {
    const value = getUint64(this.view, this.pos);
    this.pos += 8;
    return value;
  }
  readI64() {
    const value = getInt64(this.view, this.pos);
    this.pos += 8;
    return value;
  }
  readU64AsBigInt() {
    const value = this.view.getBigUint64(this.pos);
    this.pos += 8;
    return value;
  }
  readI64AsBigInt() {
    const value = this.view.getBigInt64(this.pos);
    this.pos += 8;
    return value;
  }
  readF32() {
    const value = this.view.getFloat32(this.pos);
    this.pos += 4;
    return value;
  }
  readF64() {
    const value = this.view.getFloat64(this.pos);
    this.pos += 8;
    return value;
  }
};

// src/frames.ts
var PROTOCOL_VERSION = 1;
var encoder = new Encoder({ useBigInt64: true, ignoreUndefined: true });
var decoder = new Decoder({ useBigInt64: true });
function encode(frame) {
  return encoder.encode(integers(frame));
}
function integers(value) {
  if (typeof value === "number") return Number.isSafeInteger(value) && Math.abs(value) > 2147483647 ? BigInt(value) : value;
  if (Array.isArray(value)) return value.map(integers);
  if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, integers(v)]));
}
var integer = (v) => {
  if (typeof v === "bigint" && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(v);
  return typeof v === "number" && Number.isSafeInteger(v) ? v : void 0;
};
var number = (v) => typeof v === "number" ? v : integer(v);
var string = (v) => typeof v === "string" ? v : void 0;
var boolean = (v) => typeof v === "boolean" ? v : void 0;
var strings = (v) => Array.isArray(v) && v.every((s) => typeof s === "string") ? v : void 0;
var stringMap = (v) => typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array) && Object.values(v).every((s) => typeof s === "string") ? v : void 0;
var columns = (v) => typeof v === "object" && v !== null && !Array.isArray(v) && Array.isArray(v.columns) ? { length: 0, ...v } : void 0;
var optional = (check) => (v) => v === null ? null : check(v);
var FIELDS = {
  welcome: [["version", integer], ["server", string], ["session", string], ["datasets", stringMap, {}]],
  subscribed: [["sub", integer], ["key", string], ["columns", strings]],
  unsubscribed: [["sub", integer]],
  push: [
    ["sub", integer],
    ["epoch", integer],
    ["seq", integer],
    ["tick", integer],
    ["tick_time", number],
    ["full", boolean],
    ["entered", columns],
    ["updated", columns],
    ["left", columns],
    ["provisional", boolean, false]
  ],
  no_update: [["sub", integer], ["epoch", integer], ["seq", integer], ["tick", integer]],
  published: [["req", integer], ["first", integer], ["last", integer]],
  error: [["code", string], ["message", string], ["ref", optional(integer), null], ["location", optional(string), null]]
};
function decode(data) {
  if (typeof data === "string") throw new ProtocolError("text messages are not part of the protocol; expected binary msgpack");
  let raw;
  try {
    raw = decoder.decode(data);
  } catch (error) {
    throw new ProtocolError(`malformed frame: ${error.message}`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw) || raw instanceof Uint8Array) {
    throw new ProtocolError("malformed frame: expected a map");
  }
  const fields = raw;
  const type = fields["type"];
  if (typeof type !== "string" || !Object.hasOwn(FIELDS, type)) {
    throw new ProtocolError(`malformed frame: unknown frame type ${JSON.stringify(type)}`);
  }
  const frame = { type };
  for (const [name, check, fallback] of FIELDS[type]) {
    if (!(name in fields)) {
      if (fallback === void 0) throw new ProtocolError(`malformed frame: ${type} lacks required field \`${name}\``);
      frame[name] = fallback;
      continue;
    }
    const value = check(fields[name]);
    if (value === void 0) throw new ProtocolError(`malformed frame: ${type}.${name} has the wrong type`);
    frame[name] = value;
  }
  return frame;
}

// src/viewstate.ts
function isNoUpdate(update) {
  return !(update.full || update.entered.length || update.updated.length || update.left.length);
}
function rowsOf(columns2) {
  const names = [...columns2.keys()];
  const lists = names.map((name) => columns2.get(name));
  const count = lists[0]?.length ?? 0;
  const rows = new Array(count);
  for (let i = 0; i < count; i++) {
    const row = {};
    names.forEach((name, c) => row[name] = lists[c][i]);
    rows[i] = row;
  }
  return rows;
}
var ViewState = class {
  constructor(sub, asked, key, columns2, buffer = 256) {
    this.sub = sub;
    this.asked = asked;
    this.key = key;
    this.columns = columns2;
    this.buffer = buffer;
  }
  sub;
  asked;
  key;
  columns;
  buffer;
  /** The materialised view: rows by key. */
  rows = /* @__PURE__ */ new Map();
  epoch = -1;
  seq = -1;
  tick = -1;
  updates = 0;
  dropped = 0;
  resyncs = 0;
  gaps = 0;
  moves = 0;
  /** Received and applied to `rows`, not yet yielded by an iteration. */
  pending = [];
  ended = false;
  error = null;
  /**
   * Apply a push or no-update received at wall-clock seconds `now` (rules 2, 3).
   * @throws ProtocolError the push does not decode or holds rows without the key.
   */
  apply(frame, now2) {
    const update = frame.type === "no_update" ? { sub: frame.sub, epoch: frame.epoch, seq: frame.seq, tick: frame.tick, full: false, entered: [], updated: [], left: [], tickTime: 0, receivedAt: now2 } : this.applyPush(frame, now2);
    if (this.asked.mode === "every" && !update.full && update.seq !== this.seq + 1) this.gaps += 1;
    this.epoch = update.epoch;
    this.seq = update.seq;
    this.tick = update.tick;
    this.updates += 1;
    if (this.asked.mode === "latest" && this.pending.length >= this.buffer) {
      this.pending.shift();
      this.dropped += 1;
    }
    this.pending.push(update);
    return update;
  }
  /** The subscription ended (`error` null: the relay confirmed an unsubscribe). */
  end(error) {
    this.error = error;
    this.ended = true;
  }
  /** Where this view is: (epoch, seq, keys held), to resume an `every` subscription. */
  token() {
    const keys = [...this.rows.keys()];
    const integers2 = keys.every((k) => typeof k !== "string");
    const sorted = integers2 ? [...keys].sort((a, b) => a < b ? -1 : a > b ? 1 : 0) : [...keys].map(String).sort();
    return { epoch: this.epoch, seq: this.seq, keys: encodeColumns({ [this.key]: sorted }) };
  }
  /** Continue where `earlier` (a view of an ended connection) stopped (rule 4). */
  takeOver(earlier) {
    this.rows = new Map(earlier.rows);
    this.epoch = earlier.epoch;
    this.seq = earlier.seq;
    this.tick = earlier.tick;
    this.resyncs = earlier.resyncs;
    this.gaps = earlier.gaps;
    this.pending.unshift(...earlier.pending);
    earlier.pending = [];
  }
  applyPush(push, now2) {
    const entered = this.rowsOf(push.entered, "entered");
    const updated = this.rowsOf(push.updated, "updated");
    const left = keyColumn(push.left, this.key, `push for subscription ${this.sub}: left`);
    if (push.full) this.rows.clear();
    for (const key of left) this.rows.delete(key);
    for (const row of [...entered, ...updated]) this.rows.set(row[this.key], row);
    return {
      sub: push.sub,
      epoch: push.epoch,
      seq: push.seq,
      tick: push.tick,
      full: push.full,
      entered,
      updated,
      left,
      tickTime: push.tick_time,
      receivedAt: now2,
      provisional: push.provisional
    };
  }
  rowsOf(payload, section) {
    const columns2 = decodeColumns(payload);
    if (payload.length && !columns2.has(this.key)) {
      throw new ProtocolError(
        `push for subscription ${this.sub}: ${payload.length} ${section} rows without the key column '${this.key}'`
      );
    }
    const rows = rowsOf(columns2);
    if (rows.some((row) => row[this.key] === null)) {
      throw new ProtocolError(`push for subscription ${this.sub}: a ${section} row with a null key`);
    }
    return rows;
  }
};

// src/core.ts
function hello(options = {}) {
  return {
    type: "hello",
    version: PROTOCOL_VERSION,
    role: "subscriber",
    name: options.name ?? "",
    capabilities: options.capabilities ?? [],
    token: options.token ?? ""
  };
}
function checkWelcome(frame) {
  if (frame.type === "error") throw new HandshakeRefused(frame.code, frame.message);
  if (frame.type !== "welcome") throw new ProtocolError(`expected welcome, got ${frame.type}`);
  if (frame.version !== PROTOCOL_VERSION) {
    throw new ProtocolError(`relay speaks protocol ${frame.version}, we speak ${PROTOCOL_VERSION}`);
  }
  return frame;
}
var ClientCore = class {
  /** `buffer`: updates not yet yielded a `latest` view keeps (`ViewState.buffer`). */
  constructor(buffer = 256) {
    this.buffer = buffer;
  }
  buffer;
  /** Why the connection can serve no more, if so. */
  failure = null;
  /** Errors the relay sent about nothing this core holds or asked. */
  errors = [];
  /** Whether a held view ended by a redirect is handed over (rule 3). */
  followsMoves = false;
  /** Whether the held views of a failed connection are handed over rather than ended (rule 4). */
  rehomes = false;
  nextId = 1;
  held = /* @__PURE__ */ new Map();
  asking = /* @__PURE__ */ new Map();
  writing = /* @__PURE__ */ new Set();
  /** The views held (and, once the connection failed, those it ended). */
  get views() {
    return [...this.held.values()];
  }
  /** The state of held view `sub`, if held. */
  view(sub) {
    return this.held.get(sub);
  }
  /**
   * The request to hold `asked`; answered by `held` or `refused` with its `sub`.
   * @param options.resume an `every` view of an earlier connection to continue from.
   * @param options.stay be served by this relay even if another is responsible.
   * @param options.into a view moved from another connection: held here as the same state.
   * @throws RangeError `resume` is not an `every` view of the same dataset and view.
   * @throws SubscriptionError the connection failed.
   */
  subscribe(asked, options = {}) {
    const { resume = null, stay = false, into = null } = options;
    let token = null;
    if (resume !== null) {
      const same = resume.asked.dataset === asked.dataset && JSON.stringify(resume.asked.view) === JSON.stringify(asked.view);
      if (!same || asked.mode !== "every") throw new RangeError("resume takes an 'every' view of the same dataset and view");
      token = resume.seq >= 0 ? resume.token() : null;
    }
    this.check();
    const sub = this.nextId++;
    this.asking.set(sub, { asked, resume: into === null && token !== null ? resume : null, into });
    return {
      type: "subscribe",
      sub,
      dataset: asked.dataset,
      view: asked.view,
      rate: asked.rate,
      priority: asked.priority,
      transform: asked.transform,
      mode: asked.mode,
      resume: token,
      stay,
      relevance: asked.relevance ?? null,
      transduce: asked.transduce ?? null,
      ...asked.confirmed ? { confirmed: true } : {}
    };
  }
  /** The request moving held `state` to `view` (and `rate`, if given). */
  change(state, view, rate) {
    this.check();
    const asked = state.asked;
    state.asked = { ...asked, view, rate: rate ?? asked.rate };
    return {
      type: "subscribe",
      sub: state.sub,
      dataset: asked.dataset,
      view,
      rate: state.asked.rate,
      priority: asked.priority,
      transform: asked.transform,
      mode: asked.mode,
      resume: null,
      stay: false,
      relevance: asked.relevance ?? null,
      transduce: asked.transduce ?? null,
      // left out, the relay would refuse the change
      ...asked.confirmed ? { confirmed: true } : {}
      // left out, live writes would start
    };
  }
  /** The request ending held `state`; `ended` follows once the relay confirms. */
  unsubscribe(state) {
    this.check();
    return { type: "unsubscribe", sub: state.sub };
  }
  /**
   * The request writing `rows` and deleting keys `deletes` of ingest dataset `dataset`;
   * answered by `written` or `write_refused` with its `req`.
   * @throws RangeError deletes without `key`, or rows whose columns differ.
   */
  publish(dataset, rows, deletes = [], key) {
    if (deletes.length && key === void 0) throw new RangeError("deletes need the dataset's key column (key)");
    const names = rows.length ? Object.keys(rows[0]) : [];
    if (rows.some((row) => Object.keys(row).join("\0") !== names.join("\0"))) {
      throw new RangeError("every row must have the same columns, in the same order");
    }
    const upserts = encodeColumns(Object.fromEntries(names.map((n) => [n, rows.map((row) => row[n])])));
    const request = {
      type: "publish",
      req: this.nextId++,
      dataset,
      upserts,
      deletes: deletes.length ? encodeColumns({ [key]: deletes }) : { length: 0, columns: [] }
    };
    this.check();
    this.writing.add(request.req);
    return request;
  }
  /** Forget request `ref`: its asker stopped waiting. */
  withdraw(ref) {
    this.asking.delete(ref);
    this.writing.delete(ref);
  }
  check() {
    if (this.failure !== null) throw this.failure;
  }
  /** Decode and handle one message from the relay (rule 2). @throws ProtocolError */
  receiveData(data, now2) {
    return this.receive(decode(data), now2);
  }
  /** Handle one decoded frame from the relay, received at wall-clock seconds `now`. */
  receive(frame, now2) {
    switch (frame.type) {
      case "push":
      case "no_update": {
        const state = this.held.get(frame.sub);
        if (state === void 0) break;
        return [{ type: "updated", sub: frame.sub, update: state.apply(frame, now2) }];
      }
      case "subscribed":
        if (!this.asking.has(frame.sub)) break;
        this.held.set(frame.sub, this.hold(frame.sub, frame.key, frame.columns));
        return [{ type: "held", sub: frame.sub }];
      case "unsubscribed":
        if (!this.held.has(frame.sub)) break;
        return [this.end(frame.sub, null)];
      case "published":
        if (!this.writing.delete(frame.req)) break;
        return [{ type: "written", req: frame.req, first: frame.first, last: frame.last }];
      case "error":
        return this.error(frame);
    }
    throw new ProtocolError(`unexpected frame from the relay: ${JSON.stringify(frame).slice(0, 200)}`);
  }
  error(frame) {
    const ref = frame.ref;
    const error = new SubscriptionError(frame.code, frame.message, frame.location);
    if (ref !== null && frame.code === "resync" && this.held.has(ref)) {
      this.held.get(ref).resyncs += 1;
      return [];
    }
    if (ref !== null && this.writing.delete(ref)) return [{ type: "write_refused", req: ref, error }];
    if (ref !== null && this.asking.delete(ref)) return [{ type: "refused", sub: ref, error }];
    if (ref !== null && this.held.has(ref)) {
      if (frame.code === "redirect" && frame.location !== null && this.followsMoves) {
        const state = this.held.get(ref);
        this.held.delete(ref);
        return [{ type: "moved", sub: ref, state, location: frame.location }];
      }
      return [this.end(ref, error)];
    }
    this.errors.push(frame);
    return [];
  }
  /** The connection can serve no more (rule 4). */
  fail(failure) {
    this.failure = failure;
    const events = [];
    for (const [sub, state] of this.held) {
      if (this.rehomes) {
        events.push({ type: "stranded", sub, state, failure });
      } else if (!state.ended) {
        state.end(failure);
        events.push({ type: "ended", sub, state });
      }
    }
    if (this.rehomes) this.held.clear();
    for (const sub of this.asking.keys()) events.push({ type: "refused", sub, error: failure });
    for (const req of this.writing) events.push({ type: "write_refused", req, error: failure });
    this.asking.clear();
    this.writing.clear();
    return events;
  }
  end(sub, error) {
    const state = this.held.get(sub);
    this.held.delete(sub);
    state.end(error);
    return { type: "ended", sub, state };
  }
  /** The state a `subscribed` answer starts holding: new, resumed, or moved here (`into`). */
  hold(sub, key, columns2) {
    const asking = this.asking.get(sub);
    this.asking.delete(sub);
    const moved = asking.into;
    if (moved !== null) {
      Object.assign(moved, { sub, key, columns: columns2, asked: asking.asked });
      moved.moves += 1;
      moved.ended = false;
      moved.error = null;
      return moved;
    }
    const state = new ViewState(sub, asking.asked, key, columns2, this.buffer);
    if (asking.resume !== null) state.takeOver(asking.resume);
    return state;
  }
};

// src/liveview.ts
var LiveView = class {
  constructor(state, holder) {
    this.state = state;
    this.holder = holder;
  }
  state;
  holder;
  wakers = [];
  get dataset() {
    return this.state.asked.dataset;
  }
  get view() {
    return this.state.asked.view;
  }
  get mode() {
    return this.state.asked.mode;
  }
  get rate() {
    return this.state.asked.rate;
  }
  get priority() {
    return this.state.asked.priority;
  }
  get transform() {
    return this.state.asked.transform;
  }
  /** The materialised rows, by key: exact after every applied push, iterated or not. */
  get rows() {
    return this.state.rows;
  }
  get key() {
    return this.state.key;
  }
  get columns() {
    return this.state.columns;
  }
  get epoch() {
    return this.state.epoch;
  }
  get seq() {
    return this.state.seq;
  }
  get tick() {
    return this.state.tick;
  }
  /** Pushes and no-updates applied so far. */
  get updates() {
    return this.state.updates;
  }
  /** `latest` notifications dropped because the program fell behind (rows are never dropped). */
  get dropped() {
    return this.state.dropped;
  }
  /** Resume tokens the relay could not honour (a full push followed). */
  get resyncs() {
    return this.state.resyncs;
  }
  /** Missing seqs seen in an `every` stream (a relay broke its promise; should stay 0). */
  get gaps() {
    return this.state.gaps;
  }
  /** Times the view was handed to another connection (a redirect, a failover). */
  get moves() {
    return this.state.moves;
  }
  get ended() {
    return this.state.ended;
  }
  get error() {
    return this.state.error;
  }
  /** Where an `every` view is, to resume it anywhere later (`subscribe(..., {resume})`). */
  token() {
    return this.state.token();
  }
  /** Wake iterations and waiters: the state changed (the holder calls this). */
  wake() {
    const wakers = this.wakers;
    this.wakers = [];
    for (const wake of wakers) wake();
  }
  sleep() {
    return new Promise((resolve) => this.wakers.push(resolve));
  }
  async *[Symbol.asyncIterator]() {
    const state = () => this.state;
    for (; ; ) {
      while (state().pending.length) yield state().pending.shift();
      if (state().error !== null) throw state().error;
      if (state().ended) return;
      await this.sleep();
    }
  }
  /** Resolve once `count` more updates were applied; reject if the view ends with an error first. */
  async waitUpdates(count = 1) {
    const target = this.state.updates + count;
    while (this.state.updates < target) {
      if (this.state.error !== null) throw this.state.error;
      if (this.state.ended) return;
      await this.sleep();
    }
  }
  /** Move the view to `view` (and `rate`): the next push is a delta against the rows held. */
  change(view, rate) {
    if (this.holder === null) throw new Error("the view is being re-held; change it once it is");
    this.holder.change(this, view, rate);
  }
  /** Stop holding the view; resolves once the relay confirmed (or at once, off-line). */
  async close() {
    if (this.state.ended) return;
    if (this.holder === null) {
      this.state.end(null);
      this.wake();
      return;
    }
    await this.holder.unsubscribe(this);
  }
};

// src/subscriber.ts
var now = () => Date.now() / 1e3;
var Subscriber = class {
  constructor(socket, datasets, url, buffer = 256) {
    this.socket = socket;
    this.datasets = datasets;
    this.url = url;
    this.core = new ClientCore(buffer);
    socket.onmessage = (event) => this.received(event.data);
    socket.onclose = (event) => this.failed(new SubscriptionError("closed", `connection to the relay closed (${event.code} ${event.reason})`.trim()));
    socket.onerror = () => {
    };
  }
  socket;
  datasets;
  url;
  core;
  live = /* @__PURE__ */ new Map();
  subscribing = /* @__PURE__ */ new Map();
  writing = /* @__PURE__ */ new Map();
  closedResolve;
  /** Resolves once the connection closed (its views ended, or were stranded). */
  closed = new Promise((resolve) => this.closedResolve = resolve);
  /** Told when the relay ends a held view with a redirect: the view is handed over, not ended. */
  onMoved = null;
  /** Told, once it failed, of the views the connection held (then not ended: re-hold them). */
  onStranded = null;
  /** The views held. */
  get views() {
    return this.core.views.map((state) => this.live.get(state.sub));
  }
  /** Why the connection can serve no more, if so. */
  get failure() {
    return this.core.failure;
  }
  /** Errors the relay sent about no view or request of this connection. */
  get errors() {
    return this.core.errors;
  }
  /** Hand views over on redirects and failures (set by `Client`) rather than ending them. */
  rehoming(moved, stranded) {
    this.onMoved = moved;
    this.onStranded = stranded;
    this.core.followsMoves = true;
    this.core.rehomes = true;
  }
  /**
   * Hold `view` of `dataset`.
   * @throws SubscriptionError the relay refused it (`invalid_view`, `invalid_transform`,
   *   `redirect` with its `location`...), or the connection can serve no more.
   */
  async subscribe(dataset, view, options = {}) {
    const asked = {
      dataset,
      view,
      rate: options.rate ?? 10,
      priority: options.priority ?? 0,
      transform: options.transform ?? null,
      mode: options.mode ?? "latest",
      relevance: options.relevance ?? null,
      transduce: options.transduce ?? null,
      confirmed: options.confirmed ?? false
    };
    const request = this.core.subscribe(asked, {
      resume: options.resume?.state ?? null,
      stay: options.stay ?? false,
      into: options.into?.state ?? null
    });
    try {
      await new Promise((resolve, reject) => {
        this.subscribing.set(request.sub, { resolve, reject, into: options.into ?? null });
        this.send(request);
      });
    } finally {
      this.core.withdraw(request.sub);
      this.subscribing.delete(request.sub);
    }
    return this.live.get(request.sub);
  }
  /**
   * Upsert whole `rows` and delete keys `deletes` of an ingest dataset, through the relay.
   * @returns the ingest-log offsets [first, last] once the events are durable.
   * @throws SubscriptionError the publisher refused them, or the relay could not forward them.
   */
  async publish(dataset, rows, deletes = [], key) {
    const request = this.core.publish(dataset, rows, deletes, key);
    try {
      return await new Promise((resolve, reject) => {
        this.writing.set(request.req, { resolve, reject });
        this.send(request);
      });
    } finally {
      this.core.withdraw(request.req);
      this.writing.delete(request.req);
    }
  }
  change(live, view, rate) {
    this.send(this.core.change(live.state, view, rate));
  }
  async unsubscribe(live) {
    this.send(this.core.unsubscribe(live.state));
    while (!live.state.ended) await live.waitUpdates().catch(() => void 0);
  }
  /** Close the connection; its views end with it. */
  async close() {
    this.socket.close(1e3, "");
    await this.closed;
  }
  send(frame) {
    this.socket.send(encode(frame));
  }
  received(data) {
    if (this.core.failure !== null) return;
    let events;
    try {
      events = this.core.receiveData(binary(data), now());
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.socket.close(1002, error.message.slice(0, 120));
      this.failed(new SubscriptionError("protocol", error.message));
      return;
    }
    this.handle(events);
  }
  failed(failure) {
    if (this.core.failure === null) this.handle(this.core.fail(failure), failure);
    this.closedResolve();
  }
  handle(events, failure = null) {
    const stranded = [];
    for (const event of events) {
      switch (event.type) {
        case "updated":
          this.live.get(event.sub).wake();
          break;
        case "held":
          this.hold(event.sub);
          break;
        case "refused":
          this.subscribing.get(event.sub)?.reject(event.error);
          break;
        case "ended": {
          const live = this.live.get(event.sub);
          if (failure === null) this.live.delete(event.sub);
          live.wake();
          break;
        }
        case "moved": {
          const live = this.live.get(event.sub);
          this.live.delete(event.sub);
          live.holder = null;
          this.onMoved(live, event.location);
          break;
        }
        case "stranded": {
          const live = this.live.get(event.sub);
          this.live.delete(event.sub);
          live.holder = null;
          stranded.push(live);
          break;
        }
        case "written":
          this.writing.get(event.req)?.resolve([event.first, event.last]);
          break;
        case "write_refused":
          this.writing.get(event.req)?.reject(event.error);
          break;
      }
    }
    if (stranded.length) this.onStranded(stranded, failure);
  }
  /** The LiveView of a subscription just held: the one moved here (`into`), or new. */
  hold(sub) {
    const state = this.core.view(sub);
    const asking = this.subscribing.get(sub);
    const live = asking?.into ?? new LiveView(state, this);
    live.state = state;
    live.holder = this;
    this.live.set(sub, live);
    asking?.resolve();
    live.wake();
  }
};
function binary(data) {
  if (typeof data === "string") return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (Array.isArray(data)) return concat(data);
  throw new ProtocolError(`unexpected WebSocket message of type ${typeof data}`);
}
function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}
async function connect(url, options = {}) {
  const Impl = options.WebSocket ?? globalThis.WebSocket;
  if (Impl === void 0) {
    throw new ConnectionFailed('this platform has no WebSocket: pass one, e.g. connect(url, { WebSocket }) with `import { WebSocket } from "ws"`');
  }
  const socket = options.webSocketOptions === void 0 ? new Impl(url) : new Impl(url, [], options.webSocketOptions);
  socket.binaryType = "arraybuffer";
  const welcome = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new ConnectionFailed(`no welcome from ${url} within ${options.openTimeout ?? 10} s`));
      socket.close();
    }, 1e3 * (options.openTimeout ?? 10));
    const settle = (outcome) => {
      clearTimeout(timer);
      socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
      outcome();
    };
    socket.onopen = () => socket.send(encode(hello(options)));
    socket.onerror = () => {
    };
    socket.onclose = (event) => settle(() => reject(new ConnectionFailed(`cannot reach the relay at ${url} (${event.code} ${event.reason})`.trim())));
    socket.onmessage = (event) => settle(() => {
      try {
        resolve(checkWelcome(decode(binary(event.data))));
      } catch (error) {
        socket.close(1002, "");
        reject(error);
      }
    });
  });
  return new Subscriber(socket, welcome.datasets, url, options.buffer);
}

// src/client.ts
var MAX_HOPS = 3;
var unreachable = (error) => error instanceof ConnectionFailed || error instanceof HandshakeRefused || error instanceof SubscriptionError && ["closed", "unavailable"].includes(error.code);
var sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1e3));
var Client = class {
  constructor(relays, options = {}) {
    this.options = options;
    this.relays = typeof relays === "string" ? [relays] : [...relays];
    if (!this.relays.length) throw new RangeError("no relay to connect to");
  }
  options;
  relays;
  connections = /* @__PURE__ */ new Map();
  closing = false;
  /** Redirects followed so far; views moved or failed over so far. */
  redirects = 0;
  moves = 0;
  failovers = 0;
  /** The open connection to `url`, opened now if there is none (rule 2). */
  connection(url) {
    let opening = this.connections.get(url);
    if (opening === void 0) {
      opening = connect(url, this.options).then((subscriber) => {
        subscriber.rehoming(
          (view, location) => void this.rehold(view, [location], "moved"),
          (views) => {
            this.connections.delete(url);
            for (const view of views) void this.rehold(view, this.order(url), "failover");
          }
        );
        void subscriber.closed.then(() => {
          if (this.connections.get(url) === opening) this.connections.delete(url);
        });
        return subscriber;
      });
      opening.catch(() => this.connections.delete(url));
      this.connections.set(url, opening);
    }
    return opening;
  }
  /**
   * Hold `view` of `dataset` at the relay responsible for it (rule 1).
   * @throws SubscriptionError a relay refused it for another reason than a redirect.
   * @throws ConnectionFailed, HandshakeRefused no relay of `relays` could be reached.
   */
  async subscribe(dataset, view, options = {}) {
    let failure = null;
    for (const url of this.relays) {
      try {
        return await this.follow(url, dataset, view, options);
      } catch (error) {
        if (!unreachable(error)) throw error;
        failure = error;
      }
    }
    throw failure;
  }
  /** Subscribe at `url`, following redirects (rule 1). */
  async follow(entry, dataset, view, options) {
    const maxHops = this.options.maxHops ?? MAX_HOPS;
    let url = entry;
    let previous = null;
    for (let hop = 0; ; hop++) {
      let subscriber;
      try {
        subscriber = await this.connection(url);
      } catch (error) {
        if (previous === null || !unreachable(error)) throw error;
        return (await this.connection(previous)).subscribe(dataset, view, { ...options, stay: true });
      }
      try {
        return await subscriber.subscribe(dataset, view, { ...options, stay: options.stay || hop >= maxHops });
      } catch (error) {
        if (!(error instanceof SubscriptionError) || error.code !== "redirect" || error.location === null) throw error;
        this.redirects += 1;
        previous = url;
        url = error.location;
      }
    }
  }
  /** The relays to try for a view of the relay at `url` that failed: it first, then the others. */
  order(url) {
    return [url, ...this.relays.filter((relay) => relay !== url)];
  }
  /** Hold `view` again, as the same object, at the first of `urls` that takes it (rules 3, 4). */
  async rehold(view, urls, why) {
    const options = {
      rate: view.rate,
      priority: view.priority,
      transform: view.transform,
      mode: view.mode,
      relevance: view.state.asked.relevance ?? null,
      transduce: view.state.asked.transduce ?? null,
      // a transduced view starts again (a full push): its window was at the relay it left
      resume: view.mode === "every" && !view.state.asked.transduce ? view : null,
      into: view,
      stay: why === "moved"
    };
    let delay = this.options.delay ?? 0.25;
    for (let round = 0; !this.closing && !view.ended; round++) {
      for (const url of urls) {
        try {
          await (why === "moved" ? this.connection(url).then((s) => s.subscribe(view.dataset, view.view, options)) : this.follow(url, view.dataset, view.view, options));
          if (why === "moved") this.moves += 1;
          else this.failovers += 1;
          return;
        } catch (error) {
          if (!unreachable(error)) return this.end(view, error);
        }
      }
      if (round + 1 >= (this.options.retries ?? Infinity)) break;
      await sleep(delay);
      delay = Math.min(delay * 2, this.options.maxDelay ?? 5);
      if (why === "moved") urls = this.order(urls[0]);
    }
    const reason = this.closing ? "the client was closed" : `no relay of ${urls.join(", ")} could hold the view again`;
    this.end(view, new SubscriptionError("closed", reason));
  }
  end(view, error) {
    if (view.ended) return;
    view.state.end(error);
    view.wake();
  }
  /** Close every connection; views end with them and are not held again. */
  async close() {
    this.closing = true;
    const open = [...this.connections.values()];
    this.connections.clear();
    await Promise.all(open.map((opening) => opening.then((s) => s.close(), () => void 0)));
  }
};

// src/views.ts
function finite(owner, name, value) {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new InvalidView(`${owner}: ${name} = ${String(value)} is not a finite number`);
  }
  return value;
}
function point(owner, name, value) {
  if (!Array.isArray(value)) throw new InvalidView(`${owner}: ${name} is not a sequence of coordinates`);
  const coords = value.map((v, i) => finite(owner, `${name}[${i}]`, v));
  if (coords.length !== 2 && coords.length !== 3) {
    throw new InvalidView(`${owner}: ${name} has ${coords.length} coordinates; regions are 2-D or 3-D`);
  }
  return coords;
}
function radius(owner, value) {
  if (finite(owner, "radius", value) < 0) throw new InvalidView(`${owner}: radius = ${value} is negative`);
  return value;
}
function entityKey(owner, key) {
  const ok = typeof key === "number" && Number.isSafeInteger(key) || typeof key === "bigint" || typeof key === "string" && key !== "";
  if (!ok) throw new InvalidView(`${owner}: ${String(key)} must be an integer or a non-empty string`);
  return key;
}
function dims(view) {
  switch (view.kind) {
    case "box":
      return view.lo.length;
    case "union":
      return dims(view.members[0]);
    default:
      return view.center.length;
  }
}
function box(lo, hi) {
  const low = point("box", "lo", lo);
  const high = point("box", "hi", hi);
  if (low.length !== high.length) {
    throw new InvalidView(`box: lo has ${low.length} coordinates but hi has ${high.length}`);
  }
  low.forEach((l, i) => {
    if (l > high[i]) throw new InvalidView(`box: lo[${i}] = ${l} is greater than hi[${i}] = ${high[i]}`);
  });
  return { kind: "box", lo: low, hi: high };
}
function sphere(center, r) {
  return { kind: "sphere", center: point("sphere", "center", center), radius: radius("sphere", r) };
}
function sector(center, r, heading, halfAngle) {
  const c = point("sector", "center", center);
  const h = c.length === 2 ? finite("sector", "heading", heading) : Array.isArray(heading) && heading.length === 2 ? [finite("sector", "heading[0]", heading[0]), finite("sector", "heading[1]", heading[1])] : null;
  if (h === null) throw new InvalidView("sector: a 3-D sector's heading is [azimuth, elevation]");
  const half = finite("sector", "half_angle", halfAngle);
  if (!(half > 0 && half <= Math.PI)) throw new InvalidView(`sector: half_angle = ${half} is outside (0, pi]`);
  return { kind: "sector", center: c, radius: radius("sector", r), heading: h, half_angle: half };
}
function union(...members) {
  const flat = members.flatMap((m) => m.kind === "union" ? m.members : [m]);
  if (flat.length === 0) throw new InvalidView("union: needs at least one member");
  flat.forEach((m, i) => {
    if (!["box", "sphere", "sector"].includes(m.kind)) throw new InvalidView(`union: member ${i} is not a box, sphere or sector`);
  });
  if (new Set(flat.map(dims)).size > 1) throw new InvalidView("union: members of different dimensions");
  return { kind: "union", members: flat };
}
function meet(...parts) {
  const flat = parts.flatMap((p) => p.kind === "meet" ? p.parts : [p]);
  if (flat.length < 2) throw new InvalidView("meet: needs at least two parts");
  if (new Set(flat.map(dims)).size > 1) throw new InvalidView("meet: parts of different dimensions");
  return { kind: "meet", parts: flat };
}
function relative(entity2, view) {
  if (!["box", "sphere", "sector", "union"].includes(view.kind)) {
    throw new InvalidView("relative: view must be a box, sphere, sector or union");
  }
  return { kind: "relative", entity: entityKey("relative: entity", entity2), view };
}
function sql(text2) {
  if (typeof text2 !== "string" || !text2.trim()) throw new InvalidView("sql: the query is empty");
  return { kind: "sql", text: text2 };
}
function topic(filter) {
  if (typeof filter !== "string" || filter === "") throw new InvalidView("topic: the filter is empty");
  if (filter.includes("\0")) throw new InvalidView(`topic: ${JSON.stringify(filter)} contains U+0000 (MQTT 4.7.3)`);
  if (new TextEncoder().encode(filter).length > 65535) throw new InvalidView("topic: the filter is over 65,535 bytes of UTF-8 (MQTT 1.5.3)");
  let levels = filter.split("/");
  if (filter.startsWith("$share/")) {
    const group = levels[1];
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
function path(text2) {
  if (typeof text2 !== "string" || text2 === "") throw new InvalidView("path: the path is empty");
  return { kind: "path", path: text2 };
}
function anyOf(...views) {
  const flat = views.flatMap((v) => v.kind === "any" ? v.views : [v]);
  const seen = new Map(flat.map((v) => [JSON.stringify(v), v]));
  const distinct = [...seen.values()];
  if (distinct.length < 2) throw new InvalidView("any of: needs at least two distinct views");
  if (new Set(distinct.map((v) => v.kind)).size > 1) {
    throw new InvalidView("any of: the views must all be topic filters, or all object paths");
  }
  return { kind: "any", views: distinct };
}
function entity(key) {
  return { kind: "entity", key: entityKey("entity: key", key) };
}
function toText(view) {
  const numbers = (values) => values.map((v) => String(v)).join(",");
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
export {
  CalendarDate,
  Client,
  ClientCore,
  ConnectionFailed,
  Decimal,
  FanoutError,
  HandshakeRefused,
  InvalidView,
  LiveView,
  MAX_HOPS,
  PROTOCOL_VERSION,
  ProtocolError,
  Subscriber,
  SubscriptionError,
  Timestamp,
  ViewState,
  anyOf,
  box,
  checkWelcome,
  connect,
  decode,
  decodeColumns,
  dims,
  encode,
  encodeColumns,
  entity,
  hello,
  isNoUpdate,
  keyColumn,
  meet,
  packBytes,
  path,
  relative,
  rowsOf,
  sector,
  sphere,
  sql,
  toText,
  topic,
  union,
  validity
};
