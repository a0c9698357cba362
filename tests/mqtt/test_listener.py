"""A real relay's MQTT listener, with stock clients: mosquitto_sub / mosquitto_pub (Debian's
mosquitto-clients) and paho-mqtt 2.x, over real sockets on loopback.

The relay's publisher is the scripted one (``fanout.testing.publisher``): MQTT clients here
talk to the relay's broker, which needs nothing from upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from fanout.mqtt.sessions import Session
from fanout.relay.config import Mqtt
from fanout.relay.shell.server import RelayServer
from fanout.testing.needs import need
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog


@pytest.fixture
async def relay() -> AsyncIterator[RelayServer]:
    async with (
        serving(ScriptedPublisher(Catalog([]))) as url,
        running_relay(url, mqtt=Mqtt(0)) as (server, _),
    ):
        yield server


def session(relay: RelayServer, client_id: str) -> Session | None:
    """The relay's MQTT session of ``client_id``, if it has one."""
    assert relay.mqtt is not None
    return relay.mqtt.broker.sessions.get(client_id)


def port_of(relay: RelayServer) -> str:
    assert relay.mqtt is not None
    return str(relay.mqtt.port)


async def mosquitto(*args: str, timeout: float = 10.0) -> str:
    """Run a mosquitto client to its end; its standard output."""
    need(args[0])
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode == 0, err.decode()
    return out.decode()


class Paho:
    """A paho-mqtt client whose received messages are collected, thread-safe."""

    def __init__(self, port: str, client_id: str, version: int = mqtt.MQTTv5) -> None:
        self.port, self.client_id, self.version = int(port), client_id, version
        self.messages: list[tuple[str, bytes, int, bool]] = []
        self.lock = threading.Lock()
        self.client = self._new()

    def _new(self) -> mqtt.Client:
        # A new paho client for every connection: paho leaves a socket unclosed when one
        # client's loop is started a second time.
        client = mqtt.Client(CallbackAPIVersion.VERSION2, self.client_id, protocol=self.version)
        client.on_message = self._on_message
        return client

    def _on_message(self, client: object, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.messages.append((message.topic, message.payload, message.qos, message.retain))

    def got(self) -> list[tuple[str, bytes, int, bool]]:
        with self.lock:
            return list(self.messages)

    @contextlib.contextmanager
    def connected(self, clean_start: bool = True, expiry: int = 0) -> Iterator[mqtt.Client]:
        if self.version == mqtt.MQTTv5:
            properties = Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = expiry
            self.client.connect(
                "127.0.0.1", self.port, clean_start=clean_start, properties=properties
            )
        else:
            self.client.reinitialise(self.client_id, clean_session=clean_start)
            self.client.on_message = self._on_message
            self.client.connect("127.0.0.1", self.port)
        self.client.loop_start()
        try:
            yield self.client
        finally:
            self.client.disconnect()
            self.client.loop_stop()
            self.client = self._new()


@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
async def test_mosquitto_clients_get_retained_and_live_messages(
    relay: RelayServer, version: str
) -> None:
    port = port_of(relay)
    pub = ["mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-V", version]
    await mosquitto(*pub, "-t", "plant/1/temp", "-m", "20.5", "-r", "-q", "1")
    sub = asyncio.create_task(
        mosquitto(
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-V",
            version,
            "-t",
            "plant/+/temp",
            "-q",
            "1",
            "-C",
            "2",
            "-F",
            "%r %t %p",
        )
    )
    await eventually(lambda: len(relay.mqtt.broker.sessions) == 1, timeout=10)  # type: ignore[union-attr]
    await mosquitto(*pub, "-t", "plant/2/temp", "-m", "19", "-q", "1")
    assert (await sub).splitlines() == ["1 plant/1/temp 20.5", "0 plant/2/temp 19"]


async def test_a_persistent_session_gets_what_was_published_while_it_was_away(
    relay: RelayServer,
) -> None:
    port = port_of(relay)
    device = Paho(port, "device-7")
    with device.connected(clean_start=False, expiry=300) as client:
        client.subscribe("cmd/device-7/#", qos=1)
        await eventually(
            lambda: getattr(session(relay, "device-7"), "subscriptions", None), timeout=10
        )  # type: ignore[union-attr]
    await eventually(lambda: getattr(session(relay, "device-7"), "connection", 0) is None)
    for n in range(3):
        await mosquitto(
            "mosquitto_pub", "-p", port, "-t", f"cmd/device-7/{n}", "-m", str(n), "-q", "1"
        )
    with device.connected(clean_start=False, expiry=300):
        await eventually(lambda: len(device.got()) == 3, timeout=10)
    assert [m[:3] for m in device.got()] == [
        (f"cmd/device-7/{n}", str(n).encode(), 1) for n in range(3)
    ]


@pytest.mark.needs("mosquitto_sub")
async def test_a_killed_clients_will_is_published(relay: RelayServer) -> None:
    port = port_of(relay)
    watcher = Paho(port, "watcher", mqtt.MQTTv311)
    with watcher.connected() as client:
        client.subscribe("status/#", qos=1)
        await eventually(lambda: "watcher" in relay.mqtt.broker.sessions, timeout=10)  # type: ignore[union-attr]
        process = await asyncio.create_subprocess_exec(
            "mosquitto_sub",
            "-p",
            port,
            "-i",
            "doomed",
            "-t",
            "nothing",
            "--will-topic",
            "status/doomed",
            "--will-payload",
            "offline",
            "--will-qos",
            "1",
            stdout=asyncio.subprocess.DEVNULL,
        )
        await eventually(lambda: "doomed" in relay.mqtt.broker.sessions, timeout=10)  # type: ignore[union-attr]
        process.kill()
        await process.wait()
        await eventually(
            lambda: watcher.got() == [("status/doomed", b"offline", 1, False)], timeout=10
        )


async def test_a_shared_subscription_spreads_messages_over_its_members(
    relay: RelayServer,
) -> None:
    port = port_of(relay)
    workers = [Paho(port, f"worker-{n}") for n in range(2)]
    with workers[0].connected() as first, workers[1].connected() as second:
        first.subscribe("$share/pool/jobs/#", qos=1)
        second.subscribe("$share/pool/jobs/#", qos=1)
        await eventually(
            lambda: all(
                getattr(session(relay, f"worker-{n}"), "subscriptions", None) for n in range(2)
            ),
            timeout=10,
        )
        for n in range(10):
            await mosquitto("mosquitto_pub", "-p", port, "-t", f"jobs/{n}", "-m", "x", "-q", "1")
        await eventually(lambda: sum(len(w.got()) for w in workers) == 10, timeout=10)
    got = [sorted(m[0] for m in w.got()) for w in workers]
    assert all(got) and sorted(got[0] + got[1]) == sorted(f"jobs/{n}" for n in range(10))


async def test_garbage_and_wildcard_topics_are_cut_off_while_a_good_client_is_served(
    relay: RelayServer,
) -> None:
    port = port_of(relay)
    good = Paho(port, "good")
    with good.connected() as client:
        client.subscribe("ok/#")
        await eventually(lambda: relay.mqtt.broker.sessions.get("good"), timeout=10)  # type: ignore[union-attr]
        loop = asyncio.get_running_loop()
        with socket.create_connection(("127.0.0.1", int(port))) as raw:
            raw.sendall(b"\x10\xff\xff\xff\xff\x01garbage")  # a 5-byte Remaining Length
            raw.settimeout(10)
            assert await loop.run_in_executor(None, raw.recv, 100) == b""  # closed
        bad = Paho(port, "bad")
        reasons: list[int] = []
        bad.client.on_disconnect = lambda c, u, flags, reason, props: reasons.append(reason.value)
        with bad.connected() as bad_client:
            await eventually(lambda: "bad" in relay.mqtt.broker.sessions, timeout=10)  # type: ignore[union-attr]
            # paho refuses to send a wildcard topic; write the packet as another client would
            bad_client._sock_send(b"\x30\x06\x00\x03a/+\x00")  # type: ignore[attr-defined]
            await eventually(lambda: reasons == [0x90], timeout=10)
        client.publish("ok/1", b"still here")
        await eventually(lambda: good.got() == [("ok/1", b"still here", 0, False)], timeout=10)


async def test_qos_2_both_ways_exactly_once_across_a_reconnect(relay: RelayServer) -> None:
    port = port_of(relay)
    device, sender = Paho(port, "q2-device"), Paho(port, "q2-sender")
    with sender.connected() as publisher:

        async def publish(n: int) -> None:
            info = publisher.publish(f"q2/{n}", str(n).encode(), qos=2)
            await asyncio.to_thread(info.wait_for_publish, 10)  # PUBCOMP came back

        with device.connected(clean_start=False, expiry=300) as client:
            client.subscribe("q2/#", qos=2)
            await eventually(lambda: getattr(session(relay, "q2-device"), "subscriptions", None))
            for n in range(10):
                await publish(n)
            await eventually(lambda: len(device.got()) == 10, timeout=10)
        for n in range(10, 20):  # while the device is away: kept for its session
            await publish(n)
        with device.connected(clean_start=False, expiry=300):
            await eventually(lambda: len(device.got()) >= 20, timeout=10)
            await asyncio.sleep(0.5)  # a duplicate would have come by now
    assert [m[:3] for m in device.got()] == [(f"q2/{n}", str(n).encode(), 2) for n in range(20)]
