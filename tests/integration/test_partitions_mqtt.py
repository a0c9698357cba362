"""A partition between one relay of an MQTT cluster and Redis, its peer links up (issue 45):
real ``fanout relay`` processes (the scripted publisher upstream: MQTT needs nothing from it),
a real Redis Cluster whose nodes announce proxies (``Proxy.isolate`` cuts one relay alone), and
paho-mqtt clients.

Relay b, which holds the subscriber, loses Redis for longer than its peer address outlives its
lease (``ADDRESS_LEASES``); midway its peer connections are cut too, so the others dial it again
while Redis has not heard from it for leases. Messages at QoS 0, 1 and 2 are published at a
(forwarding to b before the cut) and at c (only once the cut began) throughout. Every one is
acknowledged to its publisher and reaches the subscriber once, in order: the others vouch for b
(``matchtable`` rule 5), so it is never swept. Before, b was swept three leases into the cut
and everything published for it from then (at c: from its lease on) until it wrote its
filters again after the heal was lost, acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
import pytest_asyncio
from paho.mqtt.enums import CallbackAPIVersion
from redis.asyncio.cluster import RedisCluster

from fanout.launch import Child, Children
from fanout.mqtt.matchtable import ADDRESS_LEASES, MatchTable
from fanout.testing.clusterview import metric
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.proxy import Proxy, proxy
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.redis import cluster_ports, throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

LEASE = 1.0
RATE = 20  # messages a second, per publisher and QoS


@dataclass
class Broker:
    relays: dict[str, tuple[Child, int]]  # name -> (process, MQTT port)
    redis: list[Proxy]  # one in front of each Redis node
    peer: Proxy  # in front of b's peer port
    logs: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def broker(children: Children, tmp_path: Path) -> AsyncIterator[Broker]:
    ports = cluster_ports(3)
    async with contextlib.AsyncExitStack() as stack:
        redis = [await stack.enter_async_context(proxy((LOOPBACK, port))) for port in ports]
        announced = throwaway_redis_cluster(ports=ports, announce=[link.port for link in redis])
        await asyncio.to_thread(stack.enter_context, announced)
        url = await stack.enter_async_context(serving(ScriptedPublisher(Catalog([]))))
        peer_port = free_port()
        peer = await stack.enter_async_context(proxy((LOOPBACK, peer_port)))
        relays: dict[str, tuple[Child, int]] = {}
        try:
            for name in "abc":
                port = free_port()
                args = ["--publisher", url, "--port", "0", "--name", name, "--log-level", "info"]
                args += ["--mqtt-port", str(port), "--mqtt-redis", redis[0].address]
                args += ["--mqtt-lease", str(LEASE)]
                if name == "b":
                    args += ["--mqtt-peer-port", str(peer_port)]
                    args += ["--mqtt-peer-advertise", peer.address]
                child = await children.start("relay", args, tmp_path / f"{name}.log")
                relays[name] = (child, port)
            yield Broker(relays, redis, peer, tmp_path)
        finally:
            for child, _ in relays.values():
                await child.stop()


class Client:
    """A paho-mqtt 5.0 client: what it received, and what it published, acknowledged or not."""

    def __init__(self, port: int, client_id: str) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
        self.client.max_inflight_messages_set(1000)
        self.got: list[tuple[str, int]] = []
        self.sent: list[tuple[str, mqtt.MQTTMessageInfo]] = []
        self.lock = threading.Lock()
        self.client.on_message = self._on_message
        self.client.connect(LOOPBACK, port)
        self.client.loop_start()

    def _on_message(self, client: object, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.got.append((message.topic, int(message.payload)))

    def received(self) -> list[tuple[str, int]]:
        with self.lock:
            return list(self.got)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


async def publish(client: Client, name: str, until: asyncio.Event) -> None:
    """``n`` = 1, 2, ... on ``q0/name``, ``q1/name``, ``q2/name`` at their QoS, ``RATE`` a
    second, until ``until`` is set."""
    n = 0
    while not until.is_set():
        n += 1
        for qos in range(3):
            topic = f"q{qos}/{name}"
            client.sent.append((topic, client.client.publish(topic, str(n), qos=qos)))
        await asyncio.sleep(1 / RATE)


async def registered(broker: Broker) -> set[str]:
    """The relays (by name) whose filters match all of ``q0/x``, ``q1/x`` and ``q2/x``."""
    redis = RedisCluster(host=LOOPBACK, port=broker.redis[0].port)
    try:
        table = MatchTable(redis, "probe", max_age=0)
        found = [(await table.match(f"q{qos}/x")).relays for qos in range(3)]
        return {relay.rsplit("-", 1)[0] for relay in set.intersection(*found)}
    finally:
        await redis.aclose()


async def test_a_relay_cut_from_redis_past_its_address_keeps_every_message_for_it(
    broker: Broker,
) -> None:
    relays = broker.relays
    subscriber = Client(relays["b"][1], "subscriber")
    near, far = Client(relays["a"][1], "near"), Client(relays["c"][1], "far")
    done = asyncio.Event()
    publishing: list[asyncio.Task[None]] = []
    try:
        for qos in range(3):
            subscriber.client.subscribe(f"q{qos}/+", qos=qos)
        await eventually(lambda: registered(broker), lambda relays: relays == {"b"}, timeout=30)
        for name in "ac":  # the mesh: each dialed the relay with subscriptions, b
            await eventually(
                lambda url=relays[name][0].url: metric(url, "fanout_relay_mqtt_cluster_peers"),
                lambda peers: peers == 1,
                timeout=30,
                what=f"{name} linked to b",
            )
        publishing.append(asyncio.create_task(publish(near, "a", done)))
        await eventually(lambda: len(subscriber.received()) >= 3, timeout=30)  # a forwards
        b = relays["b"][0].process.pid
        for link in broker.redis:
            link.isolate(b)
        await asyncio.sleep(LEASE)  # b's lease has run out: c has never forwarded to it
        publishing.append(asyncio.create_task(publish(far, "c", done)))
        await asyncio.sleep(LEASE * ADDRESS_LEASES / 2)
        assert broker.peer.cut() >= 2, "no peer connection to b was open"
        await asyncio.sleep(LEASE * (ADDRESS_LEASES / 2 + 1.5))  # its address would be gone
        for link in broker.redis:
            link.heal()
        await asyncio.sleep(LEASE)
        done.set()
        await asyncio.gather(*publishing)
        await eventually(
            lambda: all(info.is_published() for _, info in near.sent + far.sent),
            timeout=30,
            what="every QoS 1 and 2 message acknowledged to its publisher",
        )
        counts = Counter(topic for topic, _ in near.sent + far.sent)
        expected = {topic: list(range(1, count + 1)) for topic, count in counts.items()}

        def delivered() -> dict[str, list[int]]:
            got: dict[str, list[int]] = {topic: [] for topic in expected}
            for topic, n in subscriber.received():
                got[topic].append(n)
            return got

        await eventually(
            delivered,
            lambda got: all(len(got[t]) >= len(expected[t]) for t in expected),
            timeout=30,
            what=f"every message of {counts.total()} at the subscriber",
        )
        await asyncio.sleep(0.5)  # a duplicate would have come by now
        assert delivered() == expected  # none lost, none twice, in order: at every QoS
    finally:
        done.set()
        for task in publishing:
            task.cancel()
        for client in (subscriber, near, far):
            client.close()
    logs = "".join((broker.logs / f"{name}.log").read_text() for name in "abc")
    assert "swept" not in logs, "b was swept while the others reached it"
