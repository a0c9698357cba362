"""MQTT packets from bytes: framing, then each packet's body (rules in ``mqtt.packets``)."""

from __future__ import annotations

from collections.abc import Callable

from fanout.mqtt.packets import (
    BINARY,
    BYTE,
    CONNACK,
    CONNECT,
    DISCONNECT,
    NO_PROPERTIES,
    PACKET_TOO_LARGE,
    PAIR,
    PINGREQ,
    PINGRESP,
    PROPERTIES,
    PROTOCOL_ERROR,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    REPEATABLE,
    SUBACK,
    SUBSCRIBE,
    SUCCESS,
    U16,
    U32,
    UNSUBACK,
    UNSUBSCRIBE,
    UNSUPPORTED_PROTOCOL_VERSION,
    UTF8,
    V5,
    V311,
    VARINT,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketError,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)

# -- framing ---------------------------------------------------------------------------------


def split(buffer: bytes | bytearray, max_size: int) -> tuple[int, bytes, int] | None:
    """Find the first whole packet in ``buffer``.

    Args:
        buffer: bytes received and not yet taken.
        max_size: the largest packet (fixed header included) accepted.

    Returns:
        (first byte, body, bytes taken), or None while the packet is not whole.

    Raises:
        PacketError: a Remaining Length longer than 4 bytes or not minimal (malformed), or a
            packet larger than ``max_size`` (0x95), known as soon as its length is.
    """
    if len(buffer) < 2:
        return None
    length, size = _read_varint(buffer, 1, what="remaining length")
    if length is None:
        return None
    total = 1 + size + length
    if total > max_size:
        raise PacketError(f"packet of {total} bytes, more than {max_size}", PACKET_TOO_LARGE)
    if len(buffer) < total:
        return None
    return buffer[0], bytes(buffer[1 + size : total]), total


def _read_varint(data: bytes | bytearray, at: int, what: str) -> tuple[int | None, int]:
    """(value, bytes used) of the Variable Byte Integer at ``at``; value None if cut short."""
    value = 0
    for i in range(4):
        if at + i >= len(data):
            return None, 0
        byte = data[at + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if i and byte == 0:
                raise PacketError(f"{what} not in the fewest bytes [MQTT-1.5.5-1]")
            return value, i + 1
    raise PacketError(f"{what} longer than 4 bytes (MQTT 1.5.5)")


# -- reading a body --------------------------------------------------------------------------


class _Reader:
    """Reads a packet's body front to back; every read past its end is malformed."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.at, self.what = data, 0, what

    def left(self) -> int:
        return len(self.data) - self.at

    def take(self, n: int) -> bytes:
        if n > self.left():
            raise PacketError(f"{self.what} ends {n - self.left()} bytes early")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def varint(self) -> int:
        value, size = _read_varint(self.data, self.at, f"{self.what}'s variable integer")
        if value is None:
            raise PacketError(f"{self.what} ends inside a variable integer")
        self.at += size
        return value

    def binary(self) -> bytes:
        return self.take(self.u16())

    def text(self) -> str:
        raw = self.binary()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PacketError(
                f"{self.what}: string not well-formed UTF-8 [MQTT-1.5.4-1]"
            ) from error
        if "\x00" in text:
            raise PacketError(f"{self.what}: string contains U+0000 [MQTT-1.5.4-2]")
        return text

    def properties(self, allowed: frozenset[int]) -> Properties:
        length = self.varint()
        inner = _Reader(self.take(length), f"{self.what}'s properties")
        found: list[tuple[int, object]] = []
        seen: set[int] = set()
        while inner.left():
            ident = inner.varint()
            if ident not in PROPERTIES or ident not in allowed:
                raise PacketError(
                    f"{self.what}: property 0x{ident:02X} not allowed here", PROTOCOL_ERROR
                )
            if ident in seen and ident not in REPEATABLE:
                raise PacketError(
                    f"{self.what}: property 0x{ident:02X} twice [MQTT-2.2.2-1]", PROTOCOL_ERROR
                )
            seen.add(ident)
            found.append((ident, inner.property_value(PROPERTIES[ident][1])))
        return tuple(found)

    def property_value(self, kind: int) -> object:
        if kind == PAIR:
            return (self.text(), self.text())
        return _READS[kind](self)

    def end(self) -> None:
        if self.left():
            raise PacketError(f"{self.what} has {self.left()} bytes past its end")


_READS: dict[int, Callable[[_Reader], object]] = {
    BYTE: _Reader.byte,
    U16: _Reader.u16,
    U32: _Reader.u32,
    VARINT: _Reader.varint,
    UTF8: _Reader.text,
    BINARY: _Reader.binary,
}

_ALL = frozenset(PROPERTIES)
_CONNECT_PROPS = frozenset({0x11, 0x21, 0x27, 0x22, 0x19, 0x17, 0x26, 0x15, 0x16})
_WILL_PROPS = frozenset({0x18, 0x01, 0x02, 0x03, 0x08, 0x09, 0x26})
_PUBLISH_PROPS = frozenset({0x01, 0x02, 0x23, 0x08, 0x09, 0x26, 0x0B, 0x03})
_ACK_PROPS = frozenset({0x1F, 0x26})
_SUBSCRIBE_PROPS = frozenset({0x0B, 0x26})
_UNSUBSCRIBE_PROPS = frozenset({0x26})
_DISCONNECT_PROPS = frozenset({0x11, 0x1F, 0x26, 0x1C})

_FIXED_FLAGS = {
    CONNECT: 0,
    CONNACK: 0,
    PUBACK: 0,
    PUBREC: 0,
    PUBREL: 2,
    PUBCOMP: 0,
    SUBSCRIBE: 2,
    SUBACK: 0,
    UNSUBSCRIBE: 2,
    UNSUBACK: 0,
    PINGREQ: 0,
    PINGRESP: 0,
    DISCONNECT: 0,
}


def decode(first: int, body: bytes, version: int) -> Packet:
    """Decode one packet's body.

    Args:
        first: the fixed header's first byte (type and flags).
        body: the bytes after the Remaining Length.
        version: the connection's protocol level (``V311`` or ``V5``); a CONNECT says its own.

    Returns:
        The packet.

    Raises:
        PacketError: anything the rules at the top of this module forbid, and packet types this
            codec does not speak (AUTH), as protocol errors.
    """
    kind, flags = first >> 4, first & 0x0F
    if kind != PUBLISH and _FIXED_FLAGS.get(kind, flags) != flags:
        raise PacketError(f"packet type {kind} with flags {flags:04b} [MQTT-2.1.3-1]")
    read = _DECODERS.get(kind)
    if read is None:
        raise PacketError(f"packet type {kind} is not supported here", PROTOCOL_ERROR)
    reader = _Reader(body, _NAMES[kind])
    packet = read(reader, flags, version == V5)
    reader.end()
    return packet


_NAMES = {
    CONNECT: "CONNECT",
    CONNACK: "CONNACK",
    PUBLISH: "PUBLISH",
    PUBACK: "PUBACK",
    PUBREC: "PUBREC",
    PUBREL: "PUBREL",
    PUBCOMP: "PUBCOMP",
    SUBSCRIBE: "SUBSCRIBE",
    SUBACK: "SUBACK",
    UNSUBSCRIBE: "UNSUBSCRIBE",
    UNSUBACK: "UNSUBACK",
    PINGREQ: "PINGREQ",
    PINGRESP: "PINGRESP",
    DISCONNECT: "DISCONNECT",
}


def _connect(reader: _Reader, flags: int, v5: bool) -> Connect:
    name = reader.text()
    version = reader.byte()
    if name != "MQTT" or version not in (V311, V5):
        raise PacketError(
            f"protocol {name!r} level {version}: only MQTT 3.1.1 (4) and 5.0 (5) are spoken",
            UNSUPPORTED_PROTOCOL_VERSION,
        )
    flags = reader.byte()
    if flags & 0x01:
        raise PacketError("CONNECT's reserved flag is set [MQTT-3.1.2-3]")
    has_will, will_qos, will_retain = bool(flags & 0x04), (flags >> 3) & 0x03, bool(flags & 0x20)
    if will_qos == 3 or (not has_will and (will_qos or will_retain)):
        raise PacketError("CONNECT's will flags are inconsistent [MQTT-3.1.2-11, 3.1.2-13]")
    has_user, has_password = bool(flags & 0x80), bool(flags & 0x40)
    if version == V311 and has_password and not has_user:
        raise PacketError("a password without a user name [MQTT-3.1.2-22]")
    keepalive = reader.u16()
    v5 = version == V5
    properties = reader.properties(_CONNECT_PROPS) if v5 else ()
    client_id = reader.text()
    will = None
    if has_will:
        will_properties = reader.properties(_WILL_PROPS) if v5 else ()
        topic = reader.text()
        will = Will(topic, reader.binary(), will_qos, will_retain, will_properties)
    username = reader.text() if has_user else None
    password = reader.binary() if has_password else None
    return Connect(
        client_id,
        version,
        bool(flags & 0x02),
        keepalive,
        will,
        username,
        password,
        properties,
    )


def _publish(reader: _Reader, flags: int, v5: bool) -> Publish:
    dup, qos, retain = bool(flags & 0x08), (flags >> 1) & 0x03, bool(flags & 0x01)
    if qos == 3:
        raise PacketError("PUBLISH with QoS 3 [MQTT-3.3.1-4]")
    if qos == 0 and dup:
        raise PacketError("PUBLISH with DUP at QoS 0 [MQTT-3.3.1-2]")
    data = reader.data
    if not qos and len(data) >= 2:  # most of them: QoS 0, an ASCII topic, no properties
        end = 2 + (data[0] << 8 | data[1])
        raw = data[2:end]
        whole = end + v5 <= len(data) and (not v5 or data[end] == 0)  # 5.0: no properties
        if whole and raw.isascii() and b"\x00" not in raw:
            reader.at = len(data)
            return Publish(raw.decode("ascii"), data[end + v5 :], 0, retain)
    topic = reader.text()
    packet_id = None
    if qos:
        packet_id = reader.u16()
        if packet_id == 0:
            raise PacketError("packet identifier 0 [MQTT-2.2.1-3]")
    properties = reader.properties(_PUBLISH_PROPS) if v5 else ()
    return Publish(topic, reader.take(reader.left()), qos, retain, dup, packet_id, properties)


def _ack(
    kind: type[PubAck | PubRec | PubRel | PubComp],
) -> Callable[[_Reader, int, bool], Packet]:
    """The decoder of PUBACK, PUBREC, PUBREL or PUBCOMP: one layout (3.4-3.7)."""

    def read(reader: _Reader, flags: int, v5: bool) -> Packet:
        packet_id = reader.u16()
        code, properties = SUCCESS, NO_PROPERTIES
        if v5 and reader.left():  # 5.0 3.4.2.1: code and properties may both be left out
            code = reader.byte()
            if reader.left():
                properties = reader.properties(_ACK_PROPS)
        return kind(packet_id, code, properties)

    return read


def _subscribe(reader: _Reader, flags: int, v5: bool) -> Subscribe:
    packet_id = _nonzero_id(reader)
    properties = reader.properties(_SUBSCRIBE_PROPS) if v5 else ()
    filters = []
    while reader.left():
        text = reader.text()
        options = reader.byte()
        reserved = 0xC0 if v5 else 0xFC
        if options & reserved or options & 0x03 == 3 or (options >> 4) & 0x03 == 3:
            raise PacketError(f"SUBSCRIBE options {options:08b} [MQTT-3.8.3-4, 3-5]")
        filters.append((text, options))
    if not filters:
        raise PacketError("SUBSCRIBE without a topic filter [MQTT-3.8.3-3]", PROTOCOL_ERROR)
    return Subscribe(packet_id, tuple(filters), properties)


def _unsubscribe(reader: _Reader, flags: int, v5: bool) -> Unsubscribe:
    packet_id = _nonzero_id(reader)
    properties = reader.properties(_UNSUBSCRIBE_PROPS) if v5 else ()
    filters = []
    while reader.left():
        filters.append(reader.text())
    if not filters:
        raise PacketError("UNSUBSCRIBE without a topic filter [MQTT-3.10.3-2]", PROTOCOL_ERROR)
    return Unsubscribe(packet_id, tuple(filters), properties)


def _connack(reader: _Reader, flags: int, v5: bool) -> ConnAck:
    acknowledge = reader.byte()
    if acknowledge & 0xFE:
        raise PacketError("CONNACK's reserved flags are set [MQTT-3.2.2-1]")
    code = reader.byte()
    properties = reader.properties(_ALL) if v5 else ()
    return ConnAck(bool(acknowledge), code, properties)


def _disconnect(reader: _Reader, flags: int, v5: bool) -> Disconnect:
    if not v5 or not reader.left():
        return Disconnect()
    code = reader.byte()
    properties = reader.properties(_DISCONNECT_PROPS) if reader.left() else ()
    return Disconnect(code, properties)


def _suback(reader: _Reader, flags: int, v5: bool) -> SubAck:
    packet_id = reader.u16()
    properties = reader.properties(_ACK_PROPS) if v5 else ()
    return SubAck(packet_id, tuple(reader.take(reader.left())), properties)


def _unsuback(reader: _Reader, flags: int, v5: bool) -> UnsubAck:
    packet_id = reader.u16()
    properties = reader.properties(_ACK_PROPS) if v5 else ()
    return UnsubAck(packet_id, tuple(reader.take(reader.left())) if v5 else (), properties)


_DECODERS: dict[int, Callable[[_Reader, int, bool], Packet]] = {
    CONNECT: _connect,
    CONNACK: _connack,
    PUBLISH: _publish,
    PUBACK: _ack(PubAck),
    PUBREC: _ack(PubRec),
    PUBREL: _ack(PubRel),
    PUBCOMP: _ack(PubComp),
    SUBSCRIBE: _subscribe,
    SUBACK: _suback,
    UNSUBSCRIBE: _unsubscribe,
    UNSUBACK: _unsuback,
    PINGREQ: lambda reader, flags, v5: PingReq(),
    PINGRESP: lambda reader, flags, v5: PingResp(),
    DISCONNECT: _disconnect,
}


def _nonzero_id(reader: _Reader) -> int:
    packet_id = reader.u16()
    if packet_id == 0:
        raise PacketError(f"{reader.what} with packet identifier 0 [MQTT-2.2.1-3]")
    return packet_id
