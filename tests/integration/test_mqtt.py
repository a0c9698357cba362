"""MQTT clients on a relay, a real Spark publisher behind it: retained messages become the topic
dataset's state (and its log), and a relay started later serves that state as retained messages.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import pytest_asyncio
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from redis.asyncio.cluster import RedisCluster

from fanout.client import SubscriptionError, connect
from fanout.client.publisher import open_producer, open_reader
from fanout.launch import Child, Children
from fanout.mqtt.matchtable import MatchTable
from fanout.mqtt.stored import Position, SessionStore
from fanout.relay.config import Mqtt
from fanout.testing.needs import need
from fanout.testing.ports import free_port
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views.topic import parse as topic

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

NEXT_BATCH = {"timeout": 90.0, "every": 0.5}

CONFIG = """
[datasets.devices]
key = "topic"
schema = { topic = "string", payload = "string" }
index = "topic"
source = "ingest"

[datasets.events]
key = "id"
schema = { id = "string", topic = "string", payload = "string", retain = "boolean" }
index = { kind = "topic", columns = ["topic"] }
source = "ingest"
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(
    children: Children, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Child]:
    tmp_path = tmp_path_factory.mktemp("mqtt")
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG)
    child = await children.start(
        "publisher",
        ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "state")],
        tmp_path / "publisher.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def run(*args: str) -> str:
    need(args[0])
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_retained_messages_are_the_topic_datasets_state(
    publisher: Child, tmp_path: Path
) -> None:
    async with running_relay(publisher.url, mqtt=Mqtt(0, dataset="devices")) as (relay, _):
        assert relay.mqtt is not None and relay.mqtt.ingest is not None
        pub = ["mosquitto_pub", "-p", str(relay.mqtt.port), "-q", "1"]
        await run(*pub, "-t", "dev/1/state", "-m", "on", "-r")
        await run(*pub, "-t", "dev/2/state", "-m", "off", "-r")
        await run(*pub, "-t", "dev/3/state", "-m", "gone", "-r")
        await run(*pub, "-t", "dev/3/state", "-m", "", "-r")  # removes the retained message
        await run(*pub, "-t", "dev/4/state", "-m", "live only")  # not retained: not kept
        async with open_reader(publisher.url) as reader:
            await eventually(
                lambda: reader.read("devices", topic("dev/#")),
                lambda result: (
                    sorted(
                        zip(result[1]["topic"].tolist(), result[1]["payload"].tolist(), strict=True)
                    )
                    == [("dev/1/state", "on"), ("dev/2/state", "off")]
                ),
                retrying=(SubscriptionError,),  # "state is at no batch yet" before the first one
                **NEXT_BATCH,
            )
    # A relay that starts now has no retained message of its own: it serves the dataset's.
    async with running_relay(publisher.url, mqtt=Mqtt(0, dataset="devices")) as (relay, _):
        assert relay.mqtt is not None
        broker = relay.mqtt.broker
        await eventually(lambda: len(kept(broker.retained)) == 2, timeout=30)
        out = await run(
            "mosquitto_sub", "-p", str(relay.mqtt.port), "-t", "dev/+/state", "-C", "2", "-v"
        )
        assert sorted(out.splitlines()) == ["dev/1/state on", "dev/2/state off"]


def kept(retained: Mapping[str, object]) -> list[str]:
    """The retained messages' topics, but the broker's own (``$SYS``)."""
    return [topic for topic in retained if not topic.startswith("$SYS/")]


class Session:
    """A paho-mqtt 5.0 client with a persistent session (clean start off, 300 s expiry)."""

    def __init__(self, port: int, client_id: str) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
        self.got: list[tuple[str, bytes, bool]] = []
        self.lock = threading.Lock()
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(1, 2)
        self.client.connect("127.0.0.1", port, clean_start=False, properties=self._properties())
        self.client.loop_start()

    def move(self, port: int) -> None:
        """Reconnect to the relay on ``port`` from now on (paho's loop reconnects, keeping the
        client's session state: its QoS 2 messages awaiting PUBREL)."""
        self.client.connect_async(
            "127.0.0.1", port, clean_start=False, properties=self._properties()
        )

    @staticmethod
    def _properties() -> Properties:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 300
        return properties

    def _on_message(self, client: object, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.got.append((message.topic, message.payload, bool(message.dup)))

    def received(self) -> list[tuple[str, bytes, bool]]:
        with self.lock:
            return list(self.got)


async def positioned(node: tuple[str, int], client_id: str, filter: str, held: int = 0) -> None:
    """Wait until Redis holds ``client_id``'s session with a position for ``filter`` past at
    least ``held`` of its topics, and the match table a subscriber of it (``filter``'s ``+``
    levels read as ``x``)."""
    redis = RedisCluster(host=node[0], port=node[1])
    try:
        store = SessionStore(redis)

        async def position() -> Position | None:
            record = await store.load(client_id)
            return None if record is None else record.positions.get(filter)

        await eventually(
            position, lambda found: found is not None and len(found.topics) >= held, timeout=90
        )
        table = MatchTable(redis, "test", max_age=0)

        async def relays() -> set[str]:
            return set((await table.match(filter.replace("+", "x"))).relays)

        await eventually(relays, bool, timeout=20)  # the shared table has its subscription
    finally:
        await redis.aclose()


async def test_a_persistent_session_survives_its_relay_killed_mid_stream(
    children: Children, publisher: Child, tmp_path: Path
) -> None:
    """Three relays over Redis Cluster, the Spark publisher's topic dataset that logs messages: a
    subscriber's relay is SIGKILLed mid-stream, it reconnects to another relay with clean start
    off, and gets every message published at QoS 1, retained or not (each on a topic of its own,
    so each is in the log), in publish order; a message it got twice is marked DUP the second
    time. A QoS 2 subscriber (the same paho client, moved) gets each exactly once, in order. A
    new subscriber gets the retained ones alone as retained messages."""
    with throwaway_redis_cluster() as nodes:
        node = f"{nodes[0][0]}:{nodes[0][1]}"
        relays: dict[str, tuple[Child, int]] = {}
        try:
            for name in ("a", "b", "c"):
                port = free_port()
                child = await children.start(
                    "relay",
                    [
                        *("--publisher", publisher.url, "--port", "0", "--name", name),
                        *("--mqtt-port", str(port), "--mqtt-redis", node),
                        *("--mqtt-lease", "1.5", "--mqtt-dataset", "events"),
                    ],
                    tmp_path / f"relay-{name}.log",
                )
                relays[name] = (child, port)
            first = subscriber = Session(relays["c"][1], "durable-1")
            subscriber.client.subscribe("feed/+", qos=1)
            twice = Session(relays["c"][1], "durable-2")  # QoS 2: exactly once across the move
            twice.client.subscribe("feed/+", qos=2)
            feeder = mqtt.Client(CallbackAPIVersion.VERSION2, "feeder", protocol=mqtt.MQTTv5)
            feeder.connect("127.0.0.1", relays["a"][1])
            feeder.loop_start()
            sent = [(f"feed/{n:04d}", str(n).encode()) for n in range(120)]
            try:
                await positioned(nodes[0], "durable-1", "feed/+")
                await positioned(nodes[0], "durable-2", "feed/+")
                for n, (topic_name, payload) in enumerate(sent):
                    feeder.publish(topic_name, payload, qos=2, retain=n % 2 == 0)
                    await asyncio.sleep(0.05)
                    if n == 40:
                        # The session's position in the log moved on: it is resumed from there.
                        await positioned(nodes[0], "durable-1", "feed/+", held=20)
                        relays["c"][0].kill()  # SIGKILL mid-stream
                        first.client.loop_stop()
                    if n == 60:  # away for a while, then back on another relay
                        subscriber = Session(relays["b"][1], "durable-1")
                        twice.move(relays["b"][1])

                def complete() -> set[bytes]:  # across both relays: nothing lost
                    return {p for _, p, _ in first.received() + subscriber.received()}

                await eventually(
                    complete, lambda have: have >= {p for _, p in sent}, timeout=90, every=0.5
                )
                await eventually(
                    lambda: {p for _, p, _ in twice.received()},
                    lambda have: have >= {p for _, p in sent},
                    timeout=90,
                    every=0.5,
                )
                await asyncio.sleep(1.0)  # a late duplicate would have come by now
            finally:
                feeder.loop_stop()
                subscriber.client.loop_stop()
                twice.client.loop_stop()
            exactly = [(t, p) for t, p, _ in twice.received()]
            assert exactly == sent, "QoS 2: not each message once, in publish order"
            before = {(t, p) for t, p, _ in first.received()}
            after = subscriber.received()
            seen: set[tuple[str, bytes]] = set()
            order: list[tuple[str, bytes]] = []
            for topic_name, payload, dup in after:
                if (topic_name, payload) in seen | before:
                    assert dup, f"{topic_name} {payload!r} again without DUP"
                if (topic_name, payload) in seen:
                    continue
                seen.add((topic_name, payload))
                order.append((topic_name, payload))
            # Nothing lost across the kill: what the old relay delivered, then the new one.
            assert {*before, *order} >= set(sent)
            assert order == sorted(order, key=sent.index), "not in publish order"
            # Resumed from the position: what was acknowledged before it is not sent again.
            assert ("feed/0000", b"0") not in order
            # The messages without RETAIN are in the log, not in the retained state.
            out = await run(
                *("mosquitto_sub", "-p", str(relays["a"][1]), "-t", "feed/+", "-v"),
                *("-C", str(len(sent) // 2)),
            )
            retained = {f"{t} {p.decode()}" for t, p in sent[::2]}
            assert set(out.splitlines()) == retained
        finally:
            for child, _ in relays.values():
                await child.stop()


async def test_a_producers_messages_reach_mqtt_subscribers_once(publisher: Child) -> None:
    """Rows written through the producer API and through the relay's WebSocket reach a matching
    MQTT subscriber once, at once (passed on by the live path once durable, not by the log); a
    retained message an MQTT client published reaches it once too, though the log carries it
    again. A routed dataset no subscription here could take (``plant/`` into ``events``) is
    not passed to the relay at all: the log carries it."""
    mqtt_port = Mqtt(0, dataset="devices", routes=(("plant/", "events"),))
    async with running_relay(publisher.url, mqtt=mqtt_port) as (relay, url):
        assert relay.mqtt is not None
        subscriber = mqtt.Client(CallbackAPIVersion.VERSION2, "news", protocol=mqtt.MQTTv5)
        got: list[tuple[str, bytes]] = []
        subscriber.on_message = lambda _c, _u, m: got.append((m.topic, m.payload))
        subscriber.connect("127.0.0.1", relay.mqtt.port)
        subscriber.loop_start()
        try:
            subscriber.subscribe("news/#", qos=1)
            async with open_producer(publisher.url) as producer:
                # Until the relay follows the dataset's log, a row is state, not news: probe.
                probes = iter(range(1000))

                async def probe() -> list[tuple[str, bytes]]:
                    row = {"topic": "news/probe", "payload": str(next(probes))}
                    await producer.publish("devices", [row])
                    return [m for m in got if m[0] == "news/probe"]

                await eventually(probe, bool, timeout=90, every=2.0)
                assert relay.mqtt.feed is not None
                passed = relay.mqtt.feed.passed
                await run(
                    *("mosquitto_pub", "-p", str(relay.mqtt.port), "-q", "1", "-r"),
                    *("-t", "news/mqtt", "-m", "live"),
                )
                rows = [{"topic": "news/api", "payload": "from a producer"}]
                await producer.publish("devices", [*rows, {"topic": "other", "payload": "x"}])
            async with connect(url) as writer:
                await writer.publish("devices", [{"topic": "news/ws", "payload": "through it"}])

            def news() -> list[tuple[str, bytes]]:
                return sorted(m for m in got if m[0] != "news/probe")

            await eventually(lambda: len(news()) >= 3, timeout=90, every=0.5)
            assert relay.mqtt.feed.passed >= passed + 2  # news/api and news/ws: not the log's
            # The next micro-batches carry news/mqtt as well: it is not sent again.
            async with open_reader(publisher.url) as reader:
                await eventually(
                    lambda: reader.read("devices", topic("news/#")),
                    lambda result: "news/mqtt" in result[1]["topic"].tolist(),
                    retrying=(SubscriptionError,),  # no micro-batch yet: the news came live
                    **NEXT_BATCH,
                )
            await asyncio.sleep(2.0)
            assert news() == [
                ("news/api", b"from a producer"),
                ("news/mqtt", b"live"),
                ("news/ws", b"through it"),
            ]
            passed = relay.mqtt.feed.passed
            async with open_producer(publisher.url) as producer:
                row = {"id": "plant/1", "topic": "plant/1", "payload": "p", "retain": True}
                await producer.publish("events", [row])
            async with open_reader(publisher.url) as reader:
                await eventually(
                    lambda: reader.read("events", topic("plant/#")),
                    lambda result: "plant/1" in result[1]["topic"].tolist(),
                    retrying=(SubscriptionError,),
                    **NEXT_BATCH,
                )
            assert relay.mqtt.feed.passed == passed  # the write was durable before its batch
            await _an_mqtt_message_is_shown_at_once_on_its_relay(publisher, relay, url)
        finally:
            subscriber.disconnect()
            subscriber.loop_stop()


async def _an_mqtt_message_is_shown_at_once_on_its_relay(
    publisher: Child, relay: Any, url: str
) -> None:
    """Issue 40: a retained message published on a relay reaches that relay's ``latest`` view
    as it goes to the publisher (``LivePath.ours``), provisional, not when the publisher passes
    it back (that copy is not shown again: ``live_passed`` stays)."""
    async with connect(url) as watcher:
        view = await watcher.subscribe(topic("news/#"), dataset="devices", rate=100.0)
        async with asyncio.timeout(90):
            await anext(aiter(view))  # the full push
            passed = relay.core.serving.live.passed
            await run(
                *("mosquitto_pub", "-p", str(relay.mqtt.port), "-q", "1", "-r"),
                *("-t", "news/again", "-m", "at once"),
            )
            async for shown in view:  # (a push with nothing new may come first)
                if "news/again" in list(shown.entered.get("topic", ())):
                    break
        assert shown.provisional
    async with open_reader(publisher.url) as reader:  # passed back long before this
        await eventually(
            lambda: reader.read("devices", topic("news/#")),
            lambda result: "news/again" in result[1]["topic"].tolist(),
            retrying=(SubscriptionError,),
            **NEXT_BATCH,
        )
    assert relay.core.serving.live.passed == passed
