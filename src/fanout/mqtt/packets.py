"""MQTT 3.1.1 and 5.0 control packets: immutable structs, their bytes, and the checks on them
(bytes in ``decoding`` and ``encoding``; why a codec of our own: docs/mqtt.md). Rules (rule ids in
brackets):

1. A fixed header, a Remaining Length of at most 4 bytes in the fewest [MQTT-1.5.5-1], then that
   many bytes, read to the last exactly.
2. Flags are fixed but PUBLISH's DUP, QoS, RETAIN [MQTT-2.1.3-1]; QoS 3 is malformed.
3. Strings are well-formed UTF-8 without U+0000 [MQTT-1.5.4-1, MQTT-1.5.4-2].
4. A 5.0 property appears once (but User Property, and Subscription Identifier in PUBLISH)
   [MQTT-2.2.2-1]; one not allowed in the packet is a protocol error.
5. Some property values are protocol errors (``check_values``), checked by the receiving broker:
   the codec reads and writes them, so that a test can send them.

A malformed packet raises :class:`PacketError` with the 5.0 reason code to answer (0x81, 0x82,
0x95); a 3.1.1 receiver closes the connection instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

# Packet types (fixed header, high nibble).
CONNECT, CONNACK, PUBLISH, PUBACK = 1, 2, 3, 4
PUBREC, PUBREL, PUBCOMP = 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK = 8, 9, 10, 11
PINGREQ, PINGRESP, DISCONNECT = 12, 13, 14

# Reason codes (MQTT 5.0 section 2.4) the relay sends.
SUCCESS = 0x00
NO_MATCHING_SUBSCRIBERS = 0x10
NO_SUBSCRIPTION_EXISTED = 0x11
UNSPECIFIED_ERROR = 0x80
MALFORMED_PACKET = 0x81
PROTOCOL_ERROR = 0x82
UNSUPPORTED_PROTOCOL_VERSION = 0x84
CLIENT_ID_NOT_VALID = 0x85
BAD_AUTHENTICATION_METHOD = 0x8C
SERVER_UNAVAILABLE = 0x88
SERVER_SHUTTING_DOWN = 0x8B
KEEP_ALIVE_TIMEOUT = 0x8D
SESSION_TAKEN_OVER = 0x8E
TOPIC_FILTER_INVALID = 0x8F
TOPIC_NAME_INVALID = 0x90
PACKET_TOO_LARGE = 0x95
PACKET_ID_NOT_FOUND = 0x92
RECEIVE_MAXIMUM_EXCEEDED = 0x93
TOPIC_ALIAS_INVALID = 0x94
QUOTA_EXCEEDED = 0x97
QOS_NOT_SUPPORTED = 0x9B
SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E

#: The protocol levels spoken: 4 is MQTT 3.1.1, 5 is MQTT 5.0.
V311, V5 = 4, 5

MAX_VARINT = 268_435_455

# MQTT 5.0 properties (section 2.2.2.2): id -> (name, type).
BYTE, U16, U32, VARINT, UTF8, BINARY, PAIR = range(7)
PROPERTIES: dict[int, tuple[str, int]] = {
    0x01: ("payload_format", BYTE),
    0x02: ("message_expiry", U32),
    0x03: ("content_type", UTF8),
    0x08: ("response_topic", UTF8),
    0x09: ("correlation_data", BINARY),
    0x0B: ("subscription_identifier", VARINT),
    0x11: ("session_expiry", U32),
    0x12: ("assigned_client_id", UTF8),
    0x13: ("server_keep_alive", U16),
    0x15: ("authentication_method", UTF8),
    0x16: ("authentication_data", BINARY),
    0x17: ("request_problem_information", BYTE),
    0x18: ("will_delay", U32),
    0x19: ("request_response_information", BYTE),
    0x1A: ("response_information", UTF8),
    0x1C: ("server_reference", UTF8),
    0x1F: ("reason_string", UTF8),
    0x21: ("receive_maximum", U16),
    0x22: ("topic_alias_maximum", U16),
    0x23: ("topic_alias", U16),
    0x24: ("maximum_qos", BYTE),
    0x25: ("retain_available", BYTE),
    0x26: ("user_property", PAIR),
    0x27: ("maximum_packet_size", U32),
    0x28: ("wildcard_available", BYTE),
    0x29: ("subscription_identifiers_available", BYTE),
    0x2A: ("shared_available", BYTE),
}
#: Properties that may appear more than once in one packet.
REPEATABLE = {0x26, 0x0B}

#: Properties as read: (id, value) pairs in the order of the bytes.
Properties: TypeAlias = tuple[tuple[int, object], ...]
NO_PROPERTIES: Properties = ()


class PacketError(Exception):
    """A packet that breaks the protocol; ``code`` is the MQTT 5.0 reason code to answer with."""

    def __init__(self, message: str, code: int = MALFORMED_PACKET) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Will:
    """The will message of a CONNECT (3.1.2.5-3.1.2.7; 5.0 3.1.3.2-3.1.3.4)."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = ()


@dataclass(frozen=True)
class Connect:
    """CONNECT (3.1)."""

    client_id: str
    version: int = V311
    clean_start: bool = True
    keepalive: int = 60
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    properties: Properties = ()


@dataclass(frozen=True)
class ConnAck:
    """CONNACK (3.2): ``code`` is a 3.1.1 return code or a 5.0 reason code."""

    session_present: bool = False
    code: int = SUCCESS
    properties: Properties = ()


@dataclass(frozen=True)
class Publish:
    """PUBLISH (3.3); ``packet_id`` is None at QoS 0. ``expires`` is not on the wire: the
    broker's time (monotonic seconds) its Message Expiry Interval ends at, once it took it."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = ()
    expires: float | None = None


@dataclass(frozen=True)
class PubAck:
    """PUBACK (3.4)."""

    packet_id: int
    code: int = SUCCESS
    properties: Properties = ()


@dataclass(frozen=True)
class PubRec:
    """PUBREC (3.5): QoS 2's first answer, "received"."""

    packet_id: int
    code: int = SUCCESS
    properties: Properties = ()


@dataclass(frozen=True)
class PubRel:
    """PUBREL (3.6): QoS 2's "release" (fixed flags ``0010``)."""

    packet_id: int
    code: int = SUCCESS
    properties: Properties = ()


@dataclass(frozen=True)
class PubComp:
    """PUBCOMP (3.7): QoS 2's last answer, "complete"."""

    packet_id: int
    code: int = SUCCESS
    properties: Properties = ()


@dataclass(frozen=True)
class Subscribe:
    """SUBSCRIBE (3.8): (filter, options) pairs; options' low two bits are the maximum QoS."""

    packet_id: int
    filters: tuple[tuple[str, int], ...]
    properties: Properties = ()


@dataclass(frozen=True)
class SubAck:
    """SUBACK (3.9): one granted QoS or failure code per filter."""

    packet_id: int
    codes: tuple[int, ...]
    properties: Properties = ()


@dataclass(frozen=True)
class Unsubscribe:
    """UNSUBSCRIBE (3.10)."""

    packet_id: int
    filters: tuple[str, ...]
    properties: Properties = ()


@dataclass(frozen=True)
class UnsubAck:
    """UNSUBACK (3.11): 5.0 has one reason code per filter, 3.1.1 none."""

    packet_id: int
    codes: tuple[int, ...] = ()
    properties: Properties = ()


@dataclass(frozen=True)
class PingReq:
    """PINGREQ (3.12)."""


@dataclass(frozen=True)
class PingResp:
    """PINGRESP (3.13)."""


@dataclass(frozen=True)
class Disconnect:
    """DISCONNECT (3.14): a reason code and properties in 5.0 only."""

    code: int = SUCCESS
    properties: Properties = field(default=())


Packet: TypeAlias = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
)


def check_values(packet: Packet) -> None:
    """Property values 5.0 calls protocol errors, which a receiver checks past the codec:
    CONNECT's Receive Maximum or Maximum Packet Size 0, Request Problem or Response Information
    other than 0 or 1 (3.1.2.11); a SUBSCRIBE's Subscription Identifier 0 (3.8.2.1.2).

    Raises:
        PacketError: the first such value (0x82).
    """
    for ident, value in packet.properties if isinstance(packet, Connect | Subscribe) else ():
        name = PROPERTIES[ident][0]
        zero = ident in (0x21, 0x27) if isinstance(packet, Connect) else ident == 0x0B
        if zero and value == 0:
            raise PacketError(f"{type(packet).__name__}: {name} 0", PROTOCOL_ERROR)
        if isinstance(packet, Connect) and ident in (0x17, 0x19) and value not in (0, 1):
            raise PacketError(f"CONNECT: {name} {value} is neither 0 nor 1", PROTOCOL_ERROR)


def prop(properties: Properties, ident: int, default: object = None) -> object:
    """The value of property ``ident`` in ``properties`` (the first, if repeated), or default."""
    for key, value in properties:
        if key == ident:
            return value
    return default
