"""A message made ready for one session, or withheld: the client's rights (rule 11), the
message's expiry (rule 9) and the client's Maximum Packet Size decide (docs/mqtt.md, "The
broker's rules"); and the properties that pass from a publisher to its subscribers."""

from __future__ import annotations

import enum
import math
from dataclasses import replace

from fanout.mqtt import packets as p
from fanout.mqtt.actions import Action, Send
from fanout.mqtt.encoding import encode
from fanout.mqtt.sessions import Session, Target


class Withheld(enum.Enum):
    """Why a message matched a session but is not sent to it."""

    UNREADABLE = "a topic the client may not read"  # rule 11, whichever way it came
    EXPIRED = "its Message Expiry Interval passed"  # rule 9
    TOO_LARGE = "over the client's Maximum Packet Size"  # 5.0 3.1.2.11.4: as if delivered


#: Bytes of one message's QoS 0 copies, by (protocol version, retain, properties): one
#: encoding shared by every session that takes the same bytes (``outgoing``'s ``shared``).
Encoded = dict[tuple[int, bool, p.Properties], bytes]


def outgoing(
    session: Session, message: p.Publish, now: float, shared: Encoded | None = None
) -> tuple[p.Publish, bytes] | Withheld:
    """``message`` as sent to ``session`` at ``now`` and its bytes: what is left of its expiry,
    and at QoS 1 or 2 its packet identifier, taken and held in flight until acknowledged.

    ``shared``: the encodings of this message's other copies (one delivery to many sessions):
    a copy at QoS 0 that does not expire is the same bytes for every session of a protocol
    version, so it is encoded once (most of a fan-out's cost in the broker was encoding).
    """
    if session.rights is not None and not session.rights.may_read(message.topic):
        return Withheld.UNREADABLE
    if shared is not None and not message.qos and message.expires is None:
        data = _shared(message, session.version, shared)
        return (message, data) if len(data) <= session.max_packet_size else Withheld.TOO_LARGE
    if message.expires is not None:
        left = message.expires - now
        if left <= 0:
            return Withheld.EXPIRED
        message = replace(message, properties=expiring(message.properties, math.ceil(left)))
    if message.qos:
        message = replace(message, packet_id=session.next_packet_id())
        session.in_flight[message.packet_id or 0] = message
    data = encode(message, session.version)
    if len(data) > session.max_packet_size:
        session.in_flight.pop(message.packet_id or 0, None)
        return Withheld.TOO_LARGE
    return message, data


def fan_out(message: p.Publish, targets: list[Target], shared: Encoded, out: list[Action]) -> int:
    """Append to ``out`` a ``Send`` of ``message`` (QoS 0, not expiring: every copy at QoS 0,
    nothing queued) to each of ``targets`` that is connected: what ``copy_for`` and
    ``outgoing`` make of it, in one loop (most of a fan-out; no call a copy, and for a copy
    that is the message itself one look-up by protocol version). Returns how many copies were
    withheld as unreadable (rule 11)."""
    unreadable, topic = 0, message.topic
    itself = message.retain if message.packet_id is None and not message.dup else None
    plain: dict[int, bytes] = {}  # the message itself, encoded, by protocol version
    for session, _, retain, identifiers in targets:
        connection = session.connection
        if connection is None:  # away: a QoS 0 copy is not kept
            continue
        rights = session.rights
        if rights is not None and not rights.may_read(topic):
            unreadable += 1
            continue
        if retain == itself and not identifiers:
            data = plain.get(session.version)
            if data is None:
                data = plain[session.version] = _shared(message, session.version, shared)
        else:
            data = _shared(copy_for(message, 0, retain, identifiers), session.version, shared)
        if len(data) <= session.max_packet_size:
            out.append(Send(connection, data))
    return unreadable


def _shared(copy: p.Publish, version: int, shared: Encoded) -> bytes:
    """``copy`` encoded for ``version``, once for every copy alike (``Encoded``)."""
    key = (version, copy.retain, copy.properties)
    data = shared.get(key)
    if data is None:
        data = shared[key] = encode(copy, version)
    return data


def copy_for(message: p.Publish, qos: int, retain: bool, identifiers: tuple[int, ...]) -> p.Publish:
    """The copy of ``message`` for one subscriber (broker rule 4): at ``qos``, with the retain
    flag ``retain`` and its subscriptions' ``identifiers``; ``message`` itself where nothing
    differs, as in most of a fan-out (no object made per subscriber)."""
    if (
        qos == message.qos
        and retain == message.retain
        and not identifiers
        and message.packet_id is None
        and not message.dup
    ):
        return message
    properties = message.properties + tuple((0x0B, i) for i in identifiers)
    return p.Publish(
        message.topic, message.payload, qos, retain, properties=properties, expires=message.expires
    )


def expiring(properties: p.Properties, left: int) -> p.Properties:
    """``properties`` with Message Expiry Interval ``left`` seconds (rule 9)."""
    return tuple((k, left if k == 0x02 else v) for k, v in properties)


def forwarded(properties: p.Properties) -> p.Properties:
    """The properties a server passes on to subscribers (5.0 3.3.2.3): not the alias or ids."""
    return tuple((k, v) for k, v in properties if k not in (0x23, 0x0B))


def is_sys(topic: str) -> bool:
    """Whether ``topic`` is one of the broker's own (``$SYS``), which no client writes (rule
    11), as Mosquitto refuses them."""
    return topic == "$SYS" or topic.startswith("$SYS/")
