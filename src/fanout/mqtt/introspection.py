"""What the relay's MQTT broker tells its operator (docs/mqtt.md, "Introspection"): its figures
as ``$SYS`` topics and ``GET /metrics`` samples, its clients, sessions and subscriptions as JSON
pages (``GET /v1/mqtt/...``). Pure: the listener and the broker count, this reads. Rules:

1. The ``$SYS`` topics have Mosquitto's names and meanings (``$SYS/broker/clients/connected``,
   ``.../messages/received``: packets of any type, ``.../publish/messages/received``: PUBLISH
   packets, wills included), published retained through the broker, so that a client's rights
   decide who reads them as for any topic: a filter starting with a wildcard never matches a
   ``$`` topic, so only rights naming ``$SYS`` (an ACL line, a token's ``admin`` role) or no
   access checks at all let a client read them. They are kept in no dataset (``ingest``).
2. Counters count from the listener's start.
3. A page lists at most ``limit`` rows from ``offset`` in a stable order (connection number;
   client id; client id and filter) with the total, as NATS's ``/connz`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fanout.metrics import Sample
from fanout.mqtt.broker import Broker
from fanout.mqtt.packets import Publish

#: The prefix of the broker's own topics (rule 1).
SYS = "$SYS/broker/"
#: The first byte's high nibble of a PUBLISH packet (MQTT 2.1.2).
_PUBLISH = 3


@dataclass
class Traffic:
    """What one connection, or all of them, moved (rule 2)."""

    bytes_received: int = 0
    bytes_sent: int = 0
    packets_sent: int = 0
    messages_received: int = 0
    messages_sent: int = 0

    def sent(self, packets: list[bytes], connection: Traffic, size: int | None = None) -> None:
        """``packets`` written to one connection (each ``Send.data`` is one packet; ``size``:
        their bytes, if known), counted here and in that ``connection``'s own (once a write
        for each connection: no generator, no loop over the two)."""
        if size is None:
            size = sum(map(len, packets))
        messages = 0
        for data in packets:
            if data[0] >> 4 == _PUBLISH:
                messages += 1
        count = len(packets)
        self.bytes_sent += size
        self.packets_sent += count
        self.messages_sent += messages
        connection.bytes_sent += size
        connection.packets_sent += count
        connection.messages_sent += messages

    def received(self, data: bytes) -> None:
        """``data`` read (the broker counts the packets in it: ``Broker.packets_in``)."""
        self.bytes_received += len(data)


@dataclass
class Peer:
    """One connection as the listener knows it: its address, since when (seconds since the
    epoch), over what (``tcp``, ``tls``, ``websocket``), and its traffic."""

    address: str
    since: float
    transport: str
    traffic: Traffic = field(default_factory=Traffic)


def figures(broker: Broker, total: Traffic) -> dict[str, int]:
    """The broker's figures now, by their ``$SYS/broker/`` name."""
    sessions = broker.sessions.values()
    connected = sum(s.connection is not None for s in sessions)
    return {
        "clients/connected": connected,
        "clients/disconnected": len(broker.sessions) - connected,
        "clients/total": len(broker.sessions),
        "messages/received": broker.packets_in,
        "messages/sent": total.packets_sent,
        "publish/messages/received": total.messages_received,
        "publish/messages/sent": total.messages_sent,
        "bytes/received": total.bytes_received,
        "bytes/sent": total.bytes_sent,
        "subscriptions/count": sum(len(s.subscriptions) for s in sessions),
        "retained messages/count": len(broker.retained),
    }


def sys_messages(now: Mapping[str, int], uptime: float, version: str) -> list[Publish]:
    """The ``$SYS`` messages of figures ``now`` (rule 1), retained, at QoS 0."""
    texts = {name: str(value) for name, value in now.items()}
    texts |= {"uptime": f"{int(uptime)} seconds", "version": f"fanout {version}"}
    return [Publish(SYS + name, text.encode(), 0, retain=True) for name, text in texts.items()]


#: (figure, metric name without ``fanout_``, kind, help) for ``GET /metrics``.
_METRICS: list[tuple[str, str, Literal["counter", "gauge"], str]] = [
    ("clients/connected", "relay_mqtt_clients", "gauge", "MQTT clients connected."),
    ("clients/total", "relay_mqtt_sessions", "gauge", "MQTT sessions, connected or not."),
    ("subscriptions/count", "relay_mqtt_subscriptions", "gauge", "MQTT subscriptions held."),
    ("retained messages/count", "relay_mqtt_retained_messages", "gauge", "Retained messages."),
    ("publish/messages/received", "relay_mqtt_messages_received", "counter", "PUBLISHes in."),
    ("publish/messages/sent", "relay_mqtt_messages_sent", "counter", "PUBLISHes out."),
    ("messages/received", "relay_mqtt_packets_received", "counter", "MQTT packets in."),
    ("messages/sent", "relay_mqtt_packets_sent", "counter", "MQTT packets out."),
    ("bytes/received", "relay_mqtt_bytes_received", "counter", "Bytes read from MQTT clients."),
    ("bytes/sent", "relay_mqtt_bytes_sent", "counter", "Bytes written to MQTT clients."),
]


def samples(now: Mapping[str, int]) -> list[Sample]:
    """The figures ``now`` as ``GET /metrics`` samples (``fanout_relay_mqtt_*``)."""
    return [Sample(name, kind, text, now[figure]) for figure, name, kind, text in _METRICS]


def clients(broker: Broker, peers: Mapping[int, Peer]) -> list[dict[str, Any]]:
    """Every connection, by connection number: who, from where, since when, what it holds."""
    rows = []
    for number, peer in sorted(peers.items()):
        session, keepalive = broker.client(number) or (None, 0)
        rows.append(
            {
                "connection": number,
                "client_id": None if session is None else session.client_id,
                "address": peer.address,
                "transport": peer.transport,
                "version": None if session is None else _VERSIONS.get(session.version),
                "keep_alive": keepalive,
                "connected_since": peer.since,
                "subscriptions": 0 if session is None else len(session.subscriptions),
                "in_flight": 0 if session is None else len(session.in_flight),
                "queued": 0 if session is None else len(session.queued),
                "bytes_received": peer.traffic.bytes_received,
                "bytes_sent": peer.traffic.bytes_sent,
                "packets_received": broker.packets(number),
                "packets_sent": peer.traffic.packets_sent,
            }
        )
    return rows


def sessions(broker: Broker) -> list[dict[str, Any]]:
    """Every session, connected or not, by client id."""
    return [
        {
            "client_id": client_id,
            "connected": session.connection is not None,
            "version": _VERSIONS.get(session.version),
            "expiry": None if session.expiry == float("inf") else session.expiry,
            "subscriptions": len(session.subscriptions),
            "in_flight": len(session.in_flight),
            "queued": len(session.queued),
            "dropped": session.dropped,
        }
        for client_id, session in sorted(broker.sessions.items())
    ]


def subscriptions(broker: Broker) -> list[dict[str, Any]]:
    """Every subscription, by client id and filter."""
    return [
        {
            "client_id": client_id,
            "filter": text,
            "qos": subscription.qos,
            "no_local": subscription.no_local,
            "retain_as_published": subscription.retain_as_published,
            "identifier": subscription.identifier,
        }
        for client_id, session in sorted(broker.sessions.items())
        for text, (_, subscription) in sorted(session.subscriptions.items())
    ]


#: A page's rows, made when asked (``http.pages.Page``).
Rows = Callable[[], Sequence[dict[str, Any]]]
_VERSIONS = {3: "3.1", 4: "3.1.1", 5: "5.0"}
