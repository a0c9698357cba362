"""The shared match table in a real Redis Cluster (three masters on loopback, started here).

Matches are checked against a brute-force matcher written here from MQTT 4.7, after random
interleavings of several relays' subscribes and unsubscribes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio.cluster import RedisCluster

from fanout.mqtt.matchtable import MatchTable
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import NotYet, eventually

RELAYS = ("r1", "r2", "r3")
namespaces = (f"t{n}:" for n in itertools.count())


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, int]]:
    with throwaway_redis_cluster() as nodes:
        yield nodes[0]


def client(node: tuple[str, int]) -> RedisCluster:
    return RedisCluster(host=node[0], port=node[1])


def levels_match(filter: str, topic: str) -> bool:
    """MQTT 4.7, brute force: level by level, ``+`` one level, ``#`` the rest."""
    if topic.startswith("$") and filter[0] in "+#":
        return False
    f, t = filter.split("/"), topic.split("/")
    for i, level in enumerate(f):
        if level == "#":
            return True
        if i >= len(t) or (level != "+" and level != t[i]):
            return False
    return len(f) == len(t)


def expected(held: dict[str, Counter[str]], topic: str) -> tuple[set[str], dict[str, set[str]]]:
    relays: set[str] = set()
    shared: dict[str, set[str]] = {}
    for relay, filters in held.items():
        for text, count in filters.items():
            if count <= 0:
                continue
            if text.startswith("$share/"):
                _, group, underlying = text.split("/", 2)
                if levels_match(underlying, topic):
                    key = group + "/" + "".join(level + "/" for level in underlying.split("/"))
                    shared.setdefault(key, set()).add(relay)
            elif levels_match(text, topic):
                relays.add(relay)
    return relays, shared


level = st.sampled_from(["a", "b", "$s", ""])
topics = st.lists(level, min_size=1, max_size=3).map("/".join).filter(bool)
plain = st.lists(st.sampled_from(["a", "b", "$s", "", "+"]), min_size=1, max_size=3).flatmap(
    lambda ls: st.sampled_from(["/".join(ls), "/".join([*ls, "#"]), "#"]).filter(bool)
)
filters = plain | plain.map(lambda f: "$share/g/" + f)
moves = st.lists(st.tuples(st.sampled_from(RELAYS), filters, st.booleans()), max_size=24)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moves, st.lists(topics, min_size=1, max_size=6))
def test_matches_equal_a_brute_force_matcher_after_several_relays_interleave(
    cluster: tuple[str, int], moves: list[tuple[str, str, bool]], published: list[str]
) -> None:
    asyncio.run(interleave(cluster, moves, published))


async def interleave(
    cluster: tuple[str, int], moves: list[tuple[str, str, bool]], published: list[str]
) -> None:
    namespace = next(namespaces)
    redis = client(cluster)
    try:
        tables = {r: MatchTable(redis, r, namespace=namespace, lease=60) for r in RELAYS}
        reader = tables["r1"]
        for topic in published:  # fill r1's cache before the others write
            await reader.match(topic)
        await reader.follow_invalidations(block_ms=1)
        held: dict[str, Counter[str]] = {r: Counter() for r in RELAYS}
        plans: dict[str, list[tuple[str, bool]]] = {r: [] for r in RELAYS}
        for relay, text, add in moves:
            if add or held[relay][text] > 0:
                held[relay][text] += 1 if add else -1
                plans[relay].append((text, add))

        async def run(relay: str) -> None:
            table = tables[relay]
            await table.renew()
            for text, add in plans[relay]:
                await (table.add(text) if add else table.remove(text))

        await asyncio.gather(*(run(r) for r in RELAYS))  # the relays' writes interleave
        while await reader.follow_invalidations(block_ms=1):
            pass
        fresh = MatchTable(redis, "reader", namespace=namespace)
        for topic in published:
            want = expected(held, topic)
            for table in (fresh, reader):
                got = await table.match(topic)
                assert (got.relays, got.shared) == want, (table.relay, topic)
    finally:
        await redis.aclose()


async def test_lookups_walk_only_the_matching_branches_a_level_per_round(
    cluster: tuple[str, int],
) -> None:
    redis = client(cluster)
    try:
        table = MatchTable(redis, "r1", namespace=next(namespaces))
        await table.renew()
        for n in range(50):
            await table.add(f"x/{n}/+")
        await table.add("a/+/c")
        await table.add("a/#")
        lookups, rounds = table.lookups, table.rounds
        fresh = MatchTable(redis, "r2", namespace=table.namespace)
        got = await fresh.match("a/b/c")
        assert got.relays == {"r1"}
        # root, a/, a/b/ + a/+/ + a/#/, a/+/c/: the 50 x/ branches are never read
        assert fresh.lookups == 5
        assert fresh.rounds <= 5  # a round per level, then the leases
        await fresh.match("a/b/c")
        assert fresh.lookups == 5 and fresh.cache_hits == 5  # served from the cache
        assert (table.lookups, table.rounds) == (lookups, rounds)
    finally:
        await redis.aclose()


async def test_a_cached_entry_is_invalidated_when_another_relay_writes_it(
    cluster: tuple[str, int],
) -> None:
    redis = client(cluster)
    try:
        namespace = next(namespaces)
        reader = MatchTable(redis, "r1", namespace=namespace, max_age=3600)
        writer = MatchTable(redis, "r2", namespace=namespace)
        await writer.renew()
        assert (await reader.match("a/b")).relays == set()
        await reader.follow_invalidations(block_ms=1)
        await writer.add("a/+")
        assert await reader.follow_invalidations(block_ms=1000) >= 1
        assert (await reader.match("a/b")).relays == {"r2"}
    finally:
        await redis.aclose()


async def test_a_relay_that_stops_renewing_leaves_within_its_lease_and_is_swept(
    cluster: tuple[str, int],
) -> None:
    redis = client(cluster)
    try:
        namespace = next(namespaces)
        alive = MatchTable(redis, "alive", namespace=namespace, lease=0.4)
        dying = MatchTable(redis, "dying", namespace=namespace, lease=0.4)
        await alive.renew()
        await dying.renew()
        await dying.add("a/#")
        await dying.add("a/#")
        await alive.add("a/b")
        assert (await alive.match("a/b")).relays == {"alive", "dying"}

        async def renewed_match() -> set[str]:
            await alive.renew()
            return (await alive.match("a/b")).relays

        await eventually(renewed_match, lambda relays: relays == {"alive"}, timeout=10)
        assert await alive.sweep() == ["dying"]
        assert await alive.sweep() == []
        root = await redis.hgetall(namespace)
        assert root == {b"c:a": b"1"}  # only alive's a/b is left on the path
    finally:
        await redis.aclose()


async def test_a_relay_past_its_lease_is_matched_while_linked_and_swept_once_its_address_lapses(
    cluster: tuple[str, int],
) -> None:
    """A relay stalled past its lease (a loaded host) is still matched by a relay holding a link
    to it, and not swept while its address (``ADDRESS_LEASES`` leases) lives."""
    redis = client(cluster)
    try:
        namespace = next(namespaces)
        alive = MatchTable(redis, "alive", namespace=namespace, lease=0.4, max_age=0)
        stalled = MatchTable(redis, "stalled", namespace=namespace, lease=0.4)
        await alive.renew()
        await stalled.renew()
        await stalled.advertise("127.0.0.1:1")
        await stalled.add("a/#")
        await asyncio.sleep(0.5)  # its lease is over, its address (1.2 s) is not
        await alive.renew()
        assert (await alive.match("a/b")).relays == set()
        assert (await alive.match("a/b", linked=["stalled"])).relays == {"stalled"}
        assert await alive.sweep() == []  # its address lives: it may be stalled, not dead
        assert (await alive.match("a/b", linked=["stalled"])).relays == {"stalled"}

        async def swept() -> list[str]:
            await alive.renew()
            return await alive.sweep()

        async def swept_unless_linked() -> list[str]:
            await alive.renew()
            return await alive.sweep(linked=["stalled"])

        with pytest.raises(NotYet):  # a relay holding a link to it never sweeps it
            await eventually(swept_unless_linked, lambda relays: relays != [], timeout=2)
        await eventually(swept, lambda relays: relays == ["stalled"], timeout=10)
        assert (await alive.match("a/b", linked=["stalled"])).relays == set()
    finally:
        await redis.aclose()


async def test_a_relay_vouched_for_is_matched_and_kept_and_once_swept_registers_whole(
    cluster: tuple[str, int],
) -> None:
    """A relay that renews nothing (cut from Redis) while another vouches for it (rule 5) is
    matched by a third that holds no link to it, and not swept; unvouched it is swept, and its
    ``register`` writes back exactly the table it held (the same entries, counts and all)."""
    redis = client(cluster)
    try:
        namespace = next(namespaces)
        tables = {
            name: MatchTable(redis, name, namespace=namespace, lease=0.4, max_age=0)
            for name in ("cut", "voucher", "third")
        }
        cut, voucher, third = tables.values()
        for table in tables.values():
            await table.renew()
        await cut.advertise("127.0.0.1:1")
        held = Counter({"a/#": 2, "a/+/c": 1, "$share/g/a/b": 1})
        for text, count in held.items():
            for _ in range(count):
                await cut.add(text)
        before = {key: await redis.hgetall(key) for key in await keys(redis, namespace)}
        for _ in range(8):  # 1.6 s: four leases, past its address (three)
            await asyncio.sleep(0.2)
            await voucher.renew()
            await third.renew()
            await voucher.vouch(["cut"])
            assert await third.sweep() == []
            assert (await third.match("a/b/c")).relays == {"cut"}
        await eventually(third.sweep, lambda swept: swept == ["cut"], timeout=10)
        assert (await third.match("a/b/c")).relays == set() and not await cut.registered()
        await cut.register(held)
        assert await cut.registered()
        after = {key: await redis.hgetall(key) for key in await keys(redis, namespace)}
        assert after == before
    finally:
        await redis.aclose()


async def keys(redis: RedisCluster, namespace: str) -> list[bytes]:
    """The table's entries and filter lists (not leases, addresses, the stream, the relays)."""
    found = await redis.keys(f"{namespace}*", target_nodes=RedisCluster.ALL_NODES)
    skip = (b"lease:", b"addr:", b"invalidations")
    relays = f"{namespace}relays".encode()
    return sorted(k for k in found if k != relays and not any(part in k for part in skip))
