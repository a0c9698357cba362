"""SUBSCRIBE and UNSUBSCRIBE answered for one session, and the retained messages a new
subscription gets: the broker's rules 6 and 11 (docs/mqtt.md, "The broker's rules")."""

from __future__ import annotations

from dataclasses import dataclass

from fanout.errors import InvalidView
from fanout.mqtt import packets as p
from fanout.mqtt.access import NOT_AUTHORIZED
from fanout.mqtt.actions import Limits
from fanout.mqtt.denials import Denials
from fanout.mqtt.sessions import Session, Subscription
from fanout.mqtt.subscribers import Subscribers
from fanout.views.topic.syntax import filter_regex, parse_filter


@dataclass(frozen=True)
class Subscribed:
    """What a SUBSCRIBE did: its SUBACK, and per subscription owed the retained messages it
    matches (rule 6: not shared, Retain Handling 0, or 1 and new), the filter and its QoS."""

    ack: p.SubAck
    retained: list[tuple[str, int]]


def subscribe(
    session: Session,
    packet: p.Subscribe,
    subscribers: Subscribers,
    limits: Limits,
    denials: Denials,
) -> Subscribed:
    """Install each filter of ``packet`` that is valid, allowed (rule 11) and within the
    session's limit; each other one is refused in the SUBACK alone.

    Raises:
        PacketError: No Local on a shared subscription [MQTT-3.8.3-4] (the connection ends).
    """
    v5 = session.version == p.V5
    identifier = p.prop(packet.properties, 0x0B)
    codes: list[int] = []
    retained: list[tuple[str, int]] = []
    for text, options in packet.filters:
        try:
            parts = parse_filter(text)
        except InvalidView:
            codes.append(p.TOPIC_FILTER_INVALID if v5 else 0x80)
            continue
        shared = parts.share_group is not None
        if shared and options & 0x04:
            raise p.PacketError(
                "No Local on a shared subscription [MQTT-3.8.3-4]", p.PROTOCOL_ERROR
            )
        if session.rights is not None and not session.rights.may_subscribe(parts.topic_filter):
            denials.subscribe += 1
            codes.append(NOT_AUTHORIZED if v5 else 0x80)
            continue
        known = session.subscriptions.get(text)
        if known is None and len(session.subscriptions) >= limits.max_subscriptions:
            codes.append(p.QUOTA_EXCEEDED if v5 else 0x80)
            continue
        qos = options & 0x03
        sub = Subscription(
            text,
            qos,
            bool(options & 0x04),
            bool(options & 0x08),
            identifier if isinstance(identifier, int) else None,
        )
        subscribers.install(session, sub)
        codes.append(qos)
        handling = (options >> 4) & 0x03
        if not shared and (handling == 0 or (handling == 1 and known is None)):
            retained.append((parts.topic_filter, qos))
    return Subscribed(p.SubAck(packet.packet_id, tuple(codes)), retained)


def unsubscribe(session: Session, packet: p.Unsubscribe, subscribers: Subscribers) -> p.UnsubAck:
    """Remove each filter of ``packet``; the UNSUBACK says which the session had."""
    codes = tuple(
        p.SUCCESS if subscribers.remove(session, text) else p.NO_SUBSCRIPTION_EXISTED
        for text in packet.filters
    )
    return p.UnsubAck(packet.packet_id, codes)


def retained_for(
    retained: dict[str, p.Publish], topic_filter: str, qos: int, now: float
) -> list[p.Publish]:
    """The retained messages ``topic_filter`` matches, by topic, as a subscription granted
    ``qos`` gets them (retain set, QoS capped); an expired one met is dropped from ``retained``
    (rule 9; as Mosquitto, the others only when met). A filter without wildcards is one look-up,
    not a pass over every retained topic: a relay holding a dataset's rows retained serves a
    storm of subscriptions."""
    parts = parse_filter(topic_filter)
    if "+" in parts.levels or "#" in parts.levels:
        pattern = filter_regex(parts.levels)
        found = sorted(t for t in retained if pattern.fullmatch(t))
    else:
        found = [parts.topic_filter] if parts.topic_filter in retained else []
    out = []
    for topic in found:
        message = retained[topic]
        if message.expires is not None and message.expires <= now:
            del retained[topic]
            continue
        out.append(
            p.Publish(
                message.topic,
                message.payload,
                min(qos, message.qos),
                True,
                properties=message.properties,
                expires=message.expires,
            )
        )
    return out
