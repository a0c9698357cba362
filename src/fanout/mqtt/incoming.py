"""A client's PUBLISH taken in: checked, acknowledged at its QoS, and made into the message
delivered to subscribers, or refused (rules 5, 7 and 11 of docs/mqtt.md, "The broker's rules")."""

from __future__ import annotations

from dataclasses import dataclass

from fanout.errors import InvalidView
from fanout.mqtt import packets as p
from fanout.mqtt.actions import Limits
from fanout.mqtt.denials import publish_refused
from fanout.mqtt.encoding import encode
from fanout.mqtt.outgoing import forwarded, is_sys
from fanout.mqtt.sessions import Session
from fanout.views.topic.syntax import topic_levels


@dataclass(frozen=True)
class Taken:
    """What a PUBLISH makes: the packets its client is answered with, and the message to
    deliver (None: refused, or a QoS 2 message again, delivered when it first came)."""

    answers: list[bytes]
    message: p.Publish | None
    refused: bool = False


def take_publish(session: Session, packet: p.Publish, limits: Limits) -> Taken:
    """Take ``packet`` from ``session``'s client.

    Raises:
        PacketError: a topic alias or Subscription Identifier from a client, an invalid topic
            name, or a QoS 2 message past Receive Maximum (the connection ends, rule 7).
    """
    if p.prop(packet.properties, 0x23) is not None:
        raise p.PacketError("a topic alias, past Topic Alias Maximum 0", p.TOPIC_ALIAS_INVALID)
    if p.prop(packet.properties, 0x0B) is not None:
        raise p.PacketError(
            "a Subscription Identifier from a client [MQTT-3.3.4-6]", p.PROTOCOL_ERROR
        )
    try:
        topic_levels(packet.topic)
    except InvalidView as error:
        raise p.PacketError(str(error), p.TOPIC_NAME_INVALID) from error
    if is_sys(packet.topic) or (
        session.rights is not None and not session.rights.may_write(packet.topic)
    ):
        return Taken(publish_refused(session, packet), None, refused=True)
    answers: list[bytes] = []
    if packet.qos == 1:
        assert packet.packet_id is not None
        answers.append(encode(p.PubAck(packet.packet_id), session.version))
    elif packet.qos == 2:
        assert packet.packet_id is not None
        again = packet.packet_id in session.incoming
        if not again and len(session.incoming) >= limits.receive_maximum:
            raise p.PacketError("past Receive Maximum at QoS 2", p.RECEIVE_MAXIMUM_EXCEEDED)
        session.incoming.add(packet.packet_id)
        answers.append(encode(p.PubRec(packet.packet_id), session.version))
        if again:
            return Taken(answers, None)  # delivered when it first came (sessions rule 6)
    if not packet.properties and packet.packet_id is None and not packet.dup:
        return Taken(answers, packet)  # as delivered already: no copy
    properties = forwarded(packet.properties)
    message = p.Publish(
        packet.topic, packet.payload, packet.qos, packet.retain, properties=properties
    )
    return Taken(answers, message)
