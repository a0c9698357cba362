"""Three ``fanout relay`` processes as one MQTT broker over a real Redis Cluster: a message
published at one relay reaches the matching subscribers of every relay once and in order (also
across peer connections broken mid-stream), ``$share`` groups span the relays, and a relay
killed mid-stream stops being a subscriber within its lease while the others keep being served.

The relays are processes of their own, as users run them (each its own event loop); their
publisher is the scripted one (``fanout.testing.publisher``): MQTT needs nothing from upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from fanout.launch import Child, Children
from fanout.mqtt.broker import Broker
from fanout.mqtt.federation import Cluster
from fanout.mqtt.matchtable import MatchTable
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.proxy import proxy
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog


@pytest.fixture(scope="module")
def redis_node() -> Iterator[tuple[str, int]]:
    with throwaway_redis_cluster() as nodes:
        yield nodes[0]


@contextlib.asynccontextmanager
async def relays(
    node: tuple[str, int],
    names: list[str],
    logs: Path,
    flags: dict[str, list[str]] | None = None,
) -> AsyncIterator[dict[str, tuple[Child, int]]]:
    """``fanout relay`` processes in one cluster: name -> (process, MQTT port); ``flags``: more
    flags by name."""
    async with serving(ScriptedPublisher(Catalog([]))) as url, Children() as children:
        started: dict[str, tuple[Child, int]] = {}
        try:
            for name in names:
                port = free_port()
                child = await children.start(
                    "relay",
                    [
                        "--publisher",
                        url,
                        "--port",
                        "0",
                        "--name",
                        name,
                        "--mqtt-port",
                        str(port),
                        "--mqtt-redis",
                        f"{node[0]}:{node[1]}",
                        "--mqtt-lease",
                        "1.5",
                        *(flags or {}).get(name, []),
                    ],
                    logs / f"{name}.log",
                )
                started[name] = (child, port)
            yield started
        finally:
            for child, _ in started.values():
                await child.stop()


class Client:
    """A paho-mqtt 5.0 client, collecting what it receives."""

    def __init__(self, port: int, client_id: str) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
        self.got: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_message(self, client: object, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.got.append((message.topic, message.payload))

    def received(self) -> list[tuple[str, bytes]]:
        with self.lock:
            return list(self.got)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


async def wait_registered(node: tuple[str, int], topic: str, names: set[str]) -> None:
    """Wait until the shared table matches ``topic`` to exactly the relays named ``names``."""
    redis = RedisCluster(host=node[0], port=node[1])
    try:
        table = MatchTable(redis, "test", max_age=0)

        async def relays() -> set[str]:
            matches = await table.match(topic)
            found = set(matches.relays)
            for members in matches.shared.values():
                found |= members
            return {relay.rsplit("-", 1)[0] for relay in found}

        await eventually(relays, lambda found: found == names, timeout=20)
    finally:
        await redis.aclose()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path


async def test_messages_reach_every_relays_subscribers_once_in_order(
    redis_node: tuple[str, int], logs: Path
) -> None:
    async with relays(redis_node, ["a", "b", "c"], logs) as running:
        (_, a), (_, b), (_, c) = running["a"], running["b"], running["c"]
        subscribers = [Client(b, "on-b"), Client(c, "on-c"), Client(a, "on-a")]
        other = Client(c, "elsewhere")
        publisher = Client(a, "producer")
        try:
            for client in subscribers:
                client.client.subscribe("line/+/events", qos=1)
            other.client.subscribe("other/#")
            await wait_registered(redis_node, "line/7/events", {"a", "b", "c"})
            for n in range(100):
                publisher.client.publish("line/7/events", str(n).encode(), qos=1)
            expected = [("line/7/events", str(n).encode()) for n in range(100)]
            for client in subscribers:
                await eventually(lambda client=client: len(client.received()) >= 100, timeout=30)
            await asyncio.sleep(0.5)  # a duplicate would have come by now
            for client in subscribers:
                assert client.received() == expected
            assert other.received() == []
        finally:
            for client in [*subscribers, other, publisher]:
                client.close()


async def test_a_share_group_spans_the_relays(redis_node: tuple[str, int], logs: Path) -> None:
    async with relays(redis_node, ["a", "b", "c"], logs) as running:
        members = [Client(running["b"][1], "worker-b"), Client(running["c"][1], "worker-c")]
        publisher = Client(running["a"][1], "boss")
        try:
            for member in members:
                member.client.subscribe("$share/pool/jobs/#", qos=1)
            await wait_registered(redis_node, "jobs/1", {"b", "c"})
            for n in range(20):
                publisher.client.publish(f"jobs/{n}", b"x", qos=1)
            await eventually(lambda: sum(len(m.received()) for m in members) >= 20, timeout=30)
            await asyncio.sleep(0.5)
            got = [sorted(t for t, _ in m.received()) for m in members]
            assert all(got), got  # members on both relays got some
            assert sorted(got[0] + got[1]) == sorted(f"jobs/{n}" for n in range(20))
        finally:
            for client in [*members, publisher]:
                client.close()


async def test_a_relay_killed_mid_stream_leaves_the_table_within_its_lease(
    redis_node: tuple[str, int], logs: Path
) -> None:
    async with relays(redis_node, ["a", "b", "c"], logs) as running:
        stays = Client(running["b"][1], "stays")
        goes = Client(running["c"][1], "goes")
        publisher = Client(running["a"][1], "feeder")
        try:
            stays.client.subscribe("feed")
            goes.client.subscribe("feed")
            await wait_registered(redis_node, "feed", {"b", "c"})
            for n in range(20):
                publisher.client.publish("feed", str(n).encode())
            await eventually(lambda: len(goes.received()) == 20, timeout=30)
            running["c"][0].kill()  # SIGKILL: no goodbye to the table
            for n in range(20, 40):
                publisher.client.publish("feed", str(n).encode())
                await asyncio.sleep(0.05)
            await eventually(lambda: len(stays.received()) == 40, timeout=30)
            assert [p for _, p in stays.received()] == [str(n).encode() for n in range(40)]
            await wait_registered(redis_node, "feed", {"b"})
        finally:
            for client in (stays, goes, publisher):
                client.close()


async def test_a_broken_peer_link_loses_nothing_and_repeats_nothing(
    redis_node: tuple[str, int], logs: Path
) -> None:
    """The link from relay a to relay b is cut four times while QoS 1 messages flow (both ends
    of its TCP connection, at a proxy b advertises as its peer address): the subscriber on b gets
    each message exactly once, in publish order. (QoS 1 alone: a QoS 0 message may overtake
    QoS 1 ones queued for a client's Receive Maximum, as MQTT allows.)"""
    peer = free_port()
    async with proxy((LOOPBACK, peer)) as link:
        flags = {"b": ["--mqtt-peer-port", str(peer), "--mqtt-peer-advertise", link.address]}
        async with relays(redis_node, ["a", "b"], logs, flags) as running:
            far = Client(running["b"][1], "far")
            publisher = Client(running["a"][1], "near")
            try:
                far.client.subscribe("link/+", qos=1)
                await wait_registered(redis_node, "link/x", {"b"})
                expected = [("link/x", str(n).encode()) for n in range(600)]
                for start in range(0, 600, 150):
                    for topic_name, payload in expected[start : start + 150]:
                        publisher.client.publish(topic_name, payload, qos=1)
                    # Mid-stream: once the burst's first message came through the link (so it
                    # is open), the rest of the burst is on its way (the publisher's client
                    # keeps 20 in flight).
                    await eventually(
                        lambda start=start: len(far.received()) > start, timeout=60, every=0.005
                    )
                    assert link.cut() == 2, "the link was not open"
                # One more after the last cut: the last burst may have crossed before it, and
                # this one must cross a link opened again.
                expected.append(("link/x", b"last"))
                publisher.client.publish("link/x", b"last", qos=1)
                await eventually(lambda: len(far.received()) >= len(expected), timeout=60)
                await asyncio.sleep(1.0)  # a duplicate would have come by now
                assert far.received() == expected
                assert link.connections >= 5  # opened again after each cut
            finally:
                for client in (far, publisher):
                    client.close()
        log = (logs / "a.log").read_text()
        assert "the link to b-" in log, "no link was broken"


async def test_a_partitioned_peer_link_delivers_once_in_order_after_heal(
    redis_node: tuple[str, int], logs: Path
) -> None:
    """The link from relay a to relay b goes silent both ways while QoS 1 messages flow (a
    partition: bytes held, not lost), then is also cut while partitioned (the link opened again
    hangs, as a connect to an unreachable host does), then heals: the subscriber on b gets
    nothing across the partition, and after heal each message exactly once, in publish order."""
    peer = free_port()
    async with proxy((LOOPBACK, peer)) as link:
        flags = {"b": ["--mqtt-peer-port", str(peer), "--mqtt-peer-advertise", link.address]}
        async with relays(redis_node, ["a", "b"], logs, flags) as running:
            far = Client(running["b"][1], "far")
            publisher = Client(running["a"][1], "near")
            try:
                far.client.subscribe("split/+", qos=1)
                await wait_registered(redis_node, "split/x", {"b"})
                expected = [("split/x", str(n).encode()) for n in range(400)]
                for topic_name, payload in expected[:100]:
                    publisher.client.publish(topic_name, payload, qos=1)
                await eventually(lambda: len(far.received()) == 100, timeout=60)
                for held_while in ("partitioned", "partitioned and cut"):
                    start = len(far.received())
                    link.partition()
                    for topic_name, payload in expected[start : start + 150]:
                        publisher.client.publish(topic_name, payload, qos=1)
                    await asyncio.sleep(1.0)
                    assert len(far.received()) == start, f"a message crossed while {held_while}"
                    if held_while.endswith("cut"):
                        assert link.cut() == 2, "the link was not open"
                        await asyncio.sleep(1.0)  # a gives the link up and dials into the void
                    link.heal()
                    await eventually(lambda s=start: len(far.received()) >= s + 150, timeout=60)
                await asyncio.sleep(1.0)  # a duplicate would have come by now
                assert far.received() == expected
            finally:
                for client in (far, publisher):
                    client.close()


async def test_a_relay_stalled_past_its_lease_loses_nothing_forwarded_to_it(
    redis_node: tuple[str, int], logs: Path
) -> None:
    """Relay b stops (SIGSTOP: a loaded host, a long pause) for twice its lease while QoS 1
    messages for its subscriber are published at relay a: a holds a link to b, so it forwards
    them whatever b's lease says, and b, going on, delivers each once, in order; nobody swept
    it (its address outlives its lease)."""
    async with relays(redis_node, ["a", "b"], logs) as running:
        far = Client(running["b"][1], "far")
        publisher = Client(running["a"][1], "near")
        try:
            far.client.subscribe("stall/+", qos=1)
            await wait_registered(redis_node, "stall/x", {"b"})
            expected = [("stall/x", str(n).encode()) for n in range(60)]
            publisher.client.publish(*expected[0], qos=1)
            await eventually(lambda: len(far.received()) == 1, timeout=30)  # the link is open
            b = running["b"][0].process
            b.send_signal(signal.SIGSTOP)
            try:
                for n, (topic_name, payload) in enumerate(expected[1:]):
                    publisher.client.publish(topic_name, payload, qos=1)
                    await asyncio.sleep(3.0 / 59 if n < 59 else 0)  # 3 s: twice its lease
            finally:
                b.send_signal(signal.SIGCONT)
            await eventually(lambda: len(far.received()) >= len(expected), timeout=30)
            await asyncio.sleep(0.5)  # a duplicate would have come by now
            assert far.received() == expected
        finally:
            for client in (far, publisher):
                client.close()
    assert "swept" not in (logs / "a.log").read_text() + (logs / "b.log").read_text()


async def test_the_cluster_serves_on_while_redis_fails_and_counts_the_failures(
    redis_node: tuple[str, int],
) -> None:
    """Redis away (no node answering raises ``RedisClusterException``, not a ``RedisError``):
    beats and table writes fail, are counted and tried again; the cluster's task runs on and
    the subscription is written once Redis answers (rule 6)."""

    class Flaky(MatchTable):
        failing = 0

        async def renew(self) -> None:
            if self.failing:
                self.failing -= 1
                raise RedisClusterException("Redis Cluster cannot be connected")
            await super().renew()

        async def add(self, filter: str) -> None:
            if self.failing:
                raise RedisClusterException("Redis Cluster cannot be connected")
            await super().add(filter)

    redis = RedisCluster(host=redis_node[0], port=redis_node[1])
    table = Flaky(redis, "flaky-1", namespace="flaky:", lease=0.6)
    cluster = Cluster(table, Broker(), lambda actions: None, LOOPBACK)
    joined = asyncio.Event()
    task = asyncio.create_task(cluster.run(joined.set))
    try:
        await asyncio.wait_for(joined.wait(), 30)
        table.failing = 3
        cluster.on_filters([("flaky/#", 1)])
        await eventually(lambda: cluster.redis_failures >= 3 and not table.failing, timeout=30)
        assert not task.done()
        await eventually(lambda: cluster._registered == 1, timeout=30)

        async def matched() -> set[str]:
            return (await table.match("flaky/x")).relays

        await eventually(matched, lambda relays: relays == {"flaky-1"}, timeout=30)  # renewed
        assert {s.name: s.value for s in cluster.samples()}[
            "relay_mqtt_cluster_redis_failures_total"
        ] >= 3
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_relay_swept_while_alive_writes_back_what_it_had_written_at_its_next_beat(
    redis_node: tuple[str, int],
) -> None:
    """Swept while alive (its lease and address deleted under it, as after a partition from
    Redis and every peer): at its next renewal the relay writes back exactly the table it had
    written (rule 1), and a change queued meanwhile applies on top."""
    redis = RedisCluster(host=redis_node[0], port=redis_node[1])
    table = MatchTable(redis, "swept-1", namespace="swept:", lease=0.6)
    cluster = Cluster(table, Broker(), lambda actions: None, LOOPBACK)
    other = MatchTable(redis, "other", namespace="swept:", lease=0.6)
    task = asyncio.create_task(cluster.run())
    try:
        cluster.on_filters([("x/#", 1), ("x/#", 1), ("x/+/z", 1), ("y", 1)])
        await eventually(lambda: cluster._registered == 4, timeout=30)
        written = await table_keys(redis, "swept:")

        async def swept() -> list[str]:
            await redis.delete(table._lease_key("swept-1"), table.address_key("swept-1"))
            return await other.sweep()

        await eventually(swept, lambda relays: relays == ["swept-1"], timeout=30)
        await eventually(table.registered, timeout=30)
        assert await table_keys(redis, "swept:") == written
        cluster.on_filters([("y", -1)])
        await eventually(lambda: cluster._registered == 3, timeout=30)
        assert (await other.match("y", linked=["swept-1"])).relays == set()
        assert (await other.match("x/a/z", linked=["swept-1"])).relays == {"swept-1"}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def table_keys(redis: RedisCluster, namespace: str) -> dict[bytes, dict[bytes, bytes]]:
    """The table's entries and filter lists, field by field (not leases, addresses, stream)."""
    found = await redis.keys(f"{namespace}*", target_nodes=RedisCluster.ALL_NODES)
    skip = (b"lease:", b"addr:", b"invalidations")
    relays = f"{namespace}relays".encode()
    wanted = sorted(k for k in found if k != relays and not any(part in k for part in skip))
    return {key: await redis.hgetall(key) for key in wanted}
