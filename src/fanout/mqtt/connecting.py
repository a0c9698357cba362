"""What the broker answers a CONNECT with and ends a connection with: the session's expiry,
the CONNACK's properties, and the packet that says why a connection is refused (rules 2 and 7
of docs/mqtt.md, "The broker's rules")."""

from __future__ import annotations

from fanout.mqtt import packets as p
from fanout.mqtt.actions import Limits
from fanout.mqtt.encoding import encode
from fanout.mqtt.sessions import Session


def requested_expiry(packet: p.Connect) -> float:
    """The session expiry the client asks for: 5.0's property (0: none), 3.1.1's clean session
    off (forever)."""
    if packet.version == p.V5:
        return float(p.prop(packet.properties, 0x11, 0))  # type: ignore[arg-type]
    return 0.0 if packet.clean_start else float("inf")


def session_expiry(packet: p.Connect, limits: Limits) -> float:
    """The session expiry granted: what the client asks for, at most the broker's limit."""
    return min(requested_expiry(packet), limits.session_expiry)


def connack(
    packet: p.Connect, present: bool, assigned: str | None, expiry: float, limits: Limits
) -> p.ConnAck:
    """The CONNACK accepting ``packet``; to a 5.0 client it says the client id assigned (rule
    2), the broker's limits and the session expiry where it differs from the one asked for."""
    properties: list[tuple[int, object]] = []
    if packet.version == p.V5:
        if assigned is not None:
            properties.append((0x12, assigned))
        properties += [(0x27, limits.max_packet), (0x21, limits.receive_maximum)]
        if expiry != requested_expiry(packet):
            properties.append((0x11, int(min(expiry, 0xFFFFFFFF))))
    return p.ConnAck(present, p.SUCCESS, tuple(properties))


def refusal(version: int, session: Session | None, code: int, why: str) -> list[bytes]:
    """What a connection refused for ``code`` is told before it closes (rule 7): a connected
    5.0 client a DISCONNECT with the reason (left out past its Maximum Packet Size
    [MQTT-3.14.2-3]); an unsupported protocol version 3.1.1's return code 1, which either
    version's client reads [MQTT-3.1.2-2]; anything else nothing."""
    if version == p.V5 and session is not None:
        data = encode(p.Disconnect(code, ((0x1F, why[:200]),)), p.V5)
        return [data if len(data) <= session.max_packet_size else encode(p.Disconnect(code), p.V5)]
    if session is None and code == p.UNSUPPORTED_PROTOCOL_VERSION:
        return [encode(p.ConnAck(False, 0x01), p.V311)]
    return []
