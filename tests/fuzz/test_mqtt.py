"""Fuzzing a real relay's MQTT listener over real sockets: hostile TCP connections send mutated
MQTT 3.1.1 and 5.0 packets, lying lengths and raw bytes, before and after a CONNECT, while a
paho-mqtt publisher and subscriber on the same relay exchange messages. The relay answers only
with well-formed MQTT packets (a DISCONNECT from it carries an error reason code) or closes the
connection, logs no traceback, and the good subscriber gets every message (QoS 1)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import AsyncIterator

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from fanout.relay.config import Mqtt
from fanout.relay.shell.server import RelayServer
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog

HOSTILE = 8  # connections
MESSAGES = 80  # each
GOOD = 60  # messages the good publisher sends
#: Packet types a server may send (high nibble): CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL,
#: PUBCOMP, SUBACK, UNSUBACK, PINGRESP, DISCONNECT.
SERVER_SENDS = {2, 3, 4, 5, 6, 7, 9, 11, 13, 14}


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value % 128, value // 128
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def text(value: str) -> bytes:
    data = value.encode()
    return len(data).to_bytes(2, "big") + data


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def valid_packets(version: int, client: str) -> list[bytes]:
    """Well-formed client packets of ``version`` (4: 3.1.1, 5: 5.0), written out by hand."""
    props = b"\x00" if version == 5 else b""
    return [
        packet(0x10, text("MQTT") + bytes([version, 0x02, 0, 30]) + props + text(client)),
        packet(0x82, b"\x00\x01" + props + text("hostile/#") + b"\x01"),
        packet(0x82, b"\x00\x02" + props + text("$share/g/hostile/+") + b"\x01"),
        packet(0x30, text("hostile/a") + props + b"payload"),
        packet(0x32, text("hostile/b") + b"\x00\x03" + props + b"payload"),
        packet(0x31, text("hostile/r") + props + b"retained"),
        packet(0xA2, b"\x00\x04" + props + text("hostile/#")),
        packet(0x40, b"\x00\x05"),
        b"\xc0\x00",
        packet(0xE0, b"\x00\x00" if version == 5 else b""),
    ]


def invalid_packets(version: int) -> list[bytes]:
    """Packets the specification names as errors: a wildcard in a PUBLISH topic, a bad filter,
    a reserved flag set, a remaining length past the largest there is, a second CONNECT."""
    props = b"\x00" if version == 5 else b""
    return [
        packet(0x30, text("a/#") + props + b"x"),
        packet(0x82, b"\x00\x06" + props + text("a/#/b") + b"\x01"),
        packet(0x80, b"\x00\x07" + props + text("a") + b"\x01"),
        b"\x30\xff\xff\xff\x7f",
        b"\x30\xff\xff\xff\xff\x01",
        packet(0x10, text("MQTT") + bytes([version, 0x02, 0, 30]) + props + text("again")),
        packet(0x36, text("a") + b"\x00\x08" + props + b"x"),
    ]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random change: a flipped byte, a cut, an insertion, or a changed length."""
    buffer = bytearray(data)
    choice = rng.randrange(4)
    if choice == 0:
        buffer[rng.randrange(len(buffer))] ^= 1 << rng.randrange(8)
    elif choice == 1:
        del buffer[rng.randrange(1, len(buffer) + 1) :]
    elif choice == 2:
        at = rng.randrange(len(buffer) + 1)
        buffer[at:at] = rng.randbytes(rng.randrange(1, 8))
    else:
        buffer[1:2] = bytes([rng.randrange(256)])
    return bytes(buffer)


def hostile_message(rng: random.Random, version: int) -> bytes:
    roll = rng.random()
    if roll < 0.5:
        return mutate(rng.choice(valid_packets(version, "x")), rng)
    if roll < 0.7:
        return rng.choice(invalid_packets(version))
    if roll < 0.85:
        return rng.randbytes(rng.randrange(1, 64))
    return rng.choice(valid_packets(version, "x")[1:])


def server_packets(data: bytes) -> list[tuple[int, bytes]]:
    """Split what the relay sent into (first byte, body); raise if it is not MQTT."""
    out, at = [], 0
    while at < len(data):
        first, length, shift, at = data[at], 0, 0, at + 1
        while True:
            assert at < len(data), f"a packet from the relay is cut short: {data!r}"
            byte = data[at]
            length, shift, at = length + ((byte & 0x7F) << shift), shift + 7, at + 1
            if not byte & 0x80:
                break
        assert first >> 4 in SERVER_SENDS, f"the relay sent packet type {first >> 4}"
        out.append((first, data[at : at + length]))
        at += length
    return out


async def attack(port: int, seed: int) -> dict[str, object]:
    """One hostile client sending ``MESSAGES`` messages, connecting again each time the relay
    closes its connection; what it was answered and how many connections the relay closed."""
    rng = random.Random(seed)
    version = rng.choice([4, 5])
    sent, closes, answers = 0, 0, []
    while sent < MESSAGES:
        received, closed = await _connection(port, rng, version, seed, MESSAGES - sent)
        sent += received[0]
        answers += server_packets(received[1])
        closes += closed
    return {"version": version, "packets": answers, "closes": closes}


async def _connection(
    port: int, rng: random.Random, version: int, seed: int, budget: int
) -> tuple[tuple[int, bytes], bool]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received, closed, sent = b"", False, 0
    try:
        if rng.random() < 0.75:  # most connect first; the others send garbage from the first byte
            writer.write(valid_packets(version, f"hostile-{seed}")[0])
        while sent < budget and not closed:
            writer.write(hostile_message(rng, version))
            sent += 1
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                chunk = await asyncio.wait_for(reader.read(65536), 0.02)
                closed = not chunk
                received += chunk
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    finally:
        writer.close()
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            await writer.wait_closed()
    return (max(sent, 1), received), closed


class Good:
    """A paho-mqtt client whose received payloads are collected, thread-safe."""

    def __init__(self, port: int, client_id: str) -> None:
        self.payloads: list[bytes] = []
        self.lock = threading.Lock()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_message(self, client: object, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.payloads.append(message.payload)

    def got(self) -> list[bytes]:
        with self.lock:
            return list(self.payloads)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
async def relay() -> AsyncIterator[RelayServer]:
    async with (
        serving(ScriptedPublisher(Catalog([]))) as url,
        running_relay(url, mqtt=Mqtt(0)) as (server, _),
    ):
        yield server


async def test_hostile_mqtt_connections_get_mqtt_answers_and_good_clients_are_served(
    relay: RelayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    assert relay.mqtt is not None
    port = relay.mqtt.port
    subscriber, publisher = Good(port, "good-sub"), Good(port, "good-pub")
    try:
        subscriber.client.subscribe("good/#", qos=1)
        sessions = relay.mqtt.broker.sessions
        await eventually(lambda: getattr(sessions.get("good-sub"), "subscriptions", None))
        attacks = [asyncio.create_task(attack(port, seed)) for seed in range(HOSTILE)]
        for n in range(GOOD):
            publisher.client.publish(f"good/{n}", str(n).encode(), qos=1)
            await asyncio.sleep(0.03)
        answered = await asyncio.gather(*attacks)
        await eventually(lambda: len(subscriber.got()) >= GOOD, timeout=20)
    finally:
        subscriber.close()
        publisher.close()
    assert sorted(subscriber.got(), key=int) == [str(n).encode() for n in range(GOOD)]
    for outcome in answered:
        for first, body in outcome["packets"]:  # type: ignore[attr-defined]
            if first >> 4 == 14 and outcome["version"] == 5:  # DISCONNECT from the server
                assert body and body[0] >= 0x80, f"a server DISCONNECT without an error: {body!r}"
    # The fuzzing reached the decoder: the relay closed connections over their bad packets.
    assert sum(int(outcome["closes"]) for outcome in answered) >= HOSTILE * 4, answered  # type: ignore[call-overload]
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
