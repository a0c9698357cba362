"""How the broker answers what a client's rights refuse, and the counts of each refusal
(``mqtt.access``, ``mqtt.rights``; docs/mqtt.md, "Refusals"). Rules:

1. A refused CONNECT gets a CONNACK with the verdict's code (5.0: its Reason String too), then
   the connection closes.
2. A PUBLISH to a topic the client may not write is not delivered: QoS 0 is dropped, QoS 1 is
   answered PUBACK 0x87 and QoS 2 PUBREC 0x87 (5.0 3.4.2.1, 3.5.2.1); a 3.1.1 client, which has
   no reason codes, gets its ordinary PUBACK or PUBREC (then PUBCOMP), as Mosquitto answers.
3. Every refusal is counted here (``Broker.denials``), by kind, and shown on the relay's
   ``GET /metrics`` (``samples``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fanout.metrics import Sample
from fanout.mqtt import packets as p
from fanout.mqtt.access import NOT_AUTHORIZED, Refused
from fanout.mqtt.encoding import encode
from fanout.mqtt.sessions import Session


@dataclass
class Denials:
    """Counts of what access refused (rule 3).

    Attributes:
        logins: refused CONNECTs, by ``Refused.reason`` (``bad_password``, ``rate_limited``...).
        subscribe: SUBSCRIBE filters refused 0x87.
        publish: PUBLISHes refused (rule 2).
        withheld: messages a subscription matched that the client may not read, not sent.
        expired: connections closed when their token expired.
    """

    logins: Counter[str] = field(default_factory=Counter)
    subscribe: int = 0
    publish: int = 0
    withheld: int = 0
    expired: int = 0

    def samples(self) -> list[Sample]:
        """The counts as ``GET /metrics`` shows them (``fanout_relay_mqtt_*_total``)."""
        logins = [
            Sample(
                "relay_mqtt_logins_refused",
                "counter",
                "MQTT CONNECTs refused, by reason (bad_password, bad_token, anonymous,"
                " rate_limited, ...).",
                count,
                {"reason": reason},
            )
            for reason, count in sorted(self.logins.items())
        ]
        figures = [
            ("subscribe", "MQTT SUBSCRIBE filters refused 0x87: no readable topic."),
            ("publish", "MQTT PUBLISHes refused: a topic the client may not write."),
            ("withheld", "MQTT messages not sent: a topic the subscriber may not read."),
            ("expired", "MQTT connections closed when their token expired."),
        ]
        return logins + [
            Sample(f"relay_mqtt_denied_{name}", "counter", text, getattr(self, name))
            for name, text in figures
        ]


def refused_connack(verdict: Refused, version: int) -> bytes:
    """The CONNACK refusing a login (rule 1)."""
    reason = ((0x1F, verdict.why[:200]),) if version == p.V5 else ()
    return encode(p.ConnAck(False, verdict.return_code(version), reason), version)


def publish_refused(session: Session, packet: p.Publish) -> list[bytes]:
    """The answer to a PUBLISH outside the client's rights (rule 2)."""
    assert packet.qos == 0 or packet.packet_id is not None
    v5 = session.version == p.V5
    code = NOT_AUTHORIZED if v5 else p.SUCCESS
    if packet.qos == 1:
        return [encode(p.PubAck(packet.packet_id or 0, code), session.version)]
    if packet.qos == 2:
        if not v5:
            session.incoming.add(packet.packet_id or 0)  # its PUBREL gets a PUBCOMP
        return [encode(p.PubRec(packet.packet_id or 0, code), session.version)]
    return []
