"""The MQTT side of ``bench/partitions.py``: paho-mqtt 5.0 clients that collect what they
receive (and go away and come back to a persistent session), and the audit of what each got
against what was published: lost, duplicated (QoS 2), reordered per topic."""

from __future__ import annotations

import threading
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from fanout.testing.ports import LOOPBACK


class MqttClient:
    """A paho-mqtt 5.0 client collecting (topic, payload) as received."""

    def __init__(self, port: int, client_id: str, persistent: bool = False) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
        self.got: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.client.on_message = self._on_message
        properties = None
        if persistent:  # a session the broker keeps while the client is away
            # paho's Properties.__init__ is unannotated.
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = 600
        self.client.connect(LOOPBACK, port, clean_start=not persistent, properties=properties)
        self.client.loop_start()

    def _on_message(self, client: object, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.got.append((message.topic, message.payload.decode()))

    def received(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.got)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def away(self) -> None:
        """Go away as a client does: DISCONNECT, the broker keeping the session (its expiry
        is 600 s) and queueing what arrives for it; paho keeps its QoS 2 state."""
        self.close()

    def back(self) -> None:
        """Come back to the same session (clean start off), as the same client."""
        self.client.reconnect()
        self.client.loop_start()


def mqtt_audit(got: list[tuple[str, str]], sent: dict[str, int], qos: int) -> dict[str, Any]:
    """One subscriber's messages against what was published on each topic (payload ``n``,
    1..sent[topic], one publisher per topic): lost, duplicated, reordered (per topic), and the
    first lost numbers (a message's number over 20 is about when it was published, in s)."""
    lost = duplicated = reordered = 0
    missing: list[int] = []
    for topic, count in sent.items():
        numbers = [int(payload) for name, payload in got if name == topic]
        seen: set[int] = set()
        last = 0
        for number in numbers:
            if number in seen:
                duplicated += 1
                continue
            seen.add(number)
            reordered += int(number < last)
            last = max(last, number)
        gone = sorted(set(range(1, count + 1)) - seen)
        lost += len(gone)
        missing += gone[:20]
    duplicated = duplicated if qos == 2 else 0
    return {"lost": lost, "duplicated": duplicated, "reordered": reordered, "missing": missing}
