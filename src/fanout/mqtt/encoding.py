"""MQTT packets to bytes (the inverse of ``mqtt.decoding``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fanout.mqtt.packets import (
    BINARY,
    BYTE,
    CONNACK,
    CONNECT,
    DISCONNECT,
    MAX_VARINT,
    PAIR,
    PINGREQ,
    PINGRESP,
    PROPERTIES,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    SUBSCRIBE,
    U16,
    U32,
    UNSUBACK,
    UNSUBSCRIBE,
    UTF8,
    V5,
    VARINT,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
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
)


def varint(value: int) -> bytes:
    """The Variable Byte Integer encoding of ``value`` (0..268,435,455)."""
    if not 0 <= value <= MAX_VARINT:
        raise ValueError(f"{value} is not a Variable Byte Integer")
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


# -- encoding --------------------------------------------------------------------------------


def _u16(value: int) -> bytes:
    return value.to_bytes(2, "big")


def _binary(data: bytes) -> bytes:
    return _u16(len(data)) + data


def _text(text: str) -> bytes:
    return _binary(text.encode("utf-8"))


def _property_value(kind: int, value: Any) -> bytes:
    if kind == PAIR:
        key, text = value
        return _text(key) + _text(text)
    return _WRITES[kind](value)


_WRITES: dict[int, Callable[[Any], bytes]] = {
    BYTE: lambda value: bytes([value]),
    U16: _u16,
    U32: lambda value: value.to_bytes(4, "big"),
    VARINT: varint,
    UTF8: _text,
    BINARY: _binary,
}


def encode_properties(properties: Properties) -> bytes:
    """The MQTT 5.0 property block (length first) of ``properties``."""
    body = b"".join(
        varint(ident) + _property_value(PROPERTIES[ident][1], value) for ident, value in properties
    )
    return varint(len(body)) + body


def _frame(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def encode(packet: Packet, version: int) -> bytes:
    """The bytes of ``packet`` as protocol level ``version`` writes it (a CONNECT: its own)."""
    write = _ENCODERS.get(type(packet))
    if write is None:
        raise TypeError(f"not a packet: {packet!r}")
    return write(packet, version == V5)


def _props(properties: Properties, v5: bool) -> bytes:
    return encode_properties(properties) if v5 else b""


def _encode_publish(packet: Publish, v5: bool) -> bytes:
    flags = (packet.dup << 3) | (packet.qos << 1) | packet.retain
    body = _text(packet.topic)
    if packet.qos:
        body += _u16(packet.packet_id or 0)
    return _frame((PUBLISH << 4) | flags, body + _props(packet.properties, v5) + packet.payload)


#: The first byte of PUBACK, PUBREC, PUBREL (fixed flags 0010) and PUBCOMP.
_ACK_FIRST = {PubAck: PUBACK << 4, PubRec: PUBREC << 4, PubRel: PUBREL << 4 | 2}
_ACK_FIRST[PubComp] = PUBCOMP << 4


def _encode_ack(packet: PubAck | PubRec | PubRel | PubComp, v5: bool) -> bytes:
    body = _u16(packet.packet_id)
    if v5 and (packet.code or packet.properties):
        body += bytes([packet.code]) + encode_properties(packet.properties)
    return _frame(_ACK_FIRST[type(packet)], body)


def _encode_connack(packet: ConnAck, v5: bool) -> bytes:
    body = bytes([packet.session_present, packet.code]) + _props(packet.properties, v5)
    return _frame(CONNACK << 4, body)


def _encode_suback(packet: SubAck, v5: bool) -> bytes:
    body = _u16(packet.packet_id) + _props(packet.properties, v5) + bytes(packet.codes)
    return _frame(SUBACK << 4, body)


def _encode_unsuback(packet: UnsubAck, v5: bool) -> bytes:
    body = _u16(packet.packet_id)
    if v5:
        body += encode_properties(packet.properties) + bytes(packet.codes)
    return _frame(UNSUBACK << 4, body)


def _encode_disconnect(packet: Disconnect, v5: bool) -> bytes:
    body = b""
    if v5 and (packet.code or packet.properties):
        body = bytes([packet.code]) + encode_properties(packet.properties)
    return _frame(DISCONNECT << 4, body)


def _encode_subscribe(packet: Subscribe, v5: bool) -> bytes:
    entries = b"".join(_text(text) + bytes([options]) for text, options in packet.filters)
    body = _u16(packet.packet_id) + _props(packet.properties, v5) + entries
    return _frame((SUBSCRIBE << 4) | 2, body)


def _encode_unsubscribe(packet: Unsubscribe, v5: bool) -> bytes:
    entries = b"".join(_text(text) for text in packet.filters)
    body = _u16(packet.packet_id) + _props(packet.properties, v5) + entries
    return _frame((UNSUBSCRIBE << 4) | 2, body)


def _encode_connect(packet: Connect, _: bool) -> bytes:
    v5 = packet.version == V5
    will = packet.will
    flags = (
        (packet.username is not None) << 7
        | (packet.password is not None) << 6
        | (bool(will and will.retain)) << 5
        | ((will.qos if will else 0) << 3)
        | (will is not None) << 2
        | packet.clean_start << 1
    )
    body = _text("MQTT") + bytes([packet.version, flags]) + _u16(packet.keepalive)
    if v5:
        body += encode_properties(packet.properties)
    body += _text(packet.client_id)
    if will is not None:
        if v5:
            body += encode_properties(will.properties)
        body += _text(will.topic) + _binary(will.payload)
    if packet.username is not None:
        body += _text(packet.username)
    if packet.password is not None:
        body += _binary(packet.password)
    return _frame(CONNECT << 4, body)


_ENCODERS: dict[type, Callable[[Any, bool], bytes]] = {
    Publish: _encode_publish,
    PubAck: _encode_ack,
    PubRec: _encode_ack,
    PubRel: _encode_ack,
    PubComp: _encode_ack,
    ConnAck: _encode_connack,
    SubAck: _encode_suback,
    UnsubAck: _encode_unsuback,
    Disconnect: _encode_disconnect,
    Subscribe: _encode_subscribe,
    Unsubscribe: _encode_unsubscribe,
    Connect: _encode_connect,
    PingReq: lambda packet, v5: _frame(PINGREQ << 4, b""),
    PingResp: lambda packet, v5: _frame(PINGRESP << 4, b""),
}
