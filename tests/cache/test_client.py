"""Snoopy caches (cache.client) and the connector's shell (publisher.busconnector) on a real
nats-server: the connector is fed micro-batches by hand here (the pipeline, with Spark and
PostgreSQL, is tests/integration/test_auction.py's)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator

import msgspec
import nats
import pyarrow as pa
import pytest
import pytest_asyncio

from fanout.cache.client import LoadTimeout, NotStored, SnoopyCache, UnknownType
from fanout.publisher.busconnector import BusConnector
from fanout.publisher.bustable import ObjectTable, object_type
from fanout.publisher.config import parse_config
from fanout.testing.nats import NatsServer, throwaway_nats
from fanout.testing.needs import need
from fanout.testing.wait import eventually
from fanout.wire.bus import InvalidLabel, ObjectMessage, encode_row

pytestmark = [
    pytest.mark.integration,
    pytest.mark.no_spark_publisher,  # a nats-server only: it runs beside the publishers' lane
    pytest.mark.asyncio(loop_scope="module"),
]
#: Seconds to wait for what the bus brings: generous, the machine may be loaded.
WAIT = 60

CONFIG = """
[bus]
url = "nats://127.0.0.1:4222"
domain = "shop"
fragment_bytes = 64
[datasets.item]
key = "id"
schema = { id = "long", title = "string", category = "string" }
source = { kind = "postgres", url = "postgresql://u@127.0.0.1/db", table = "items" }
bus = { label = "category" }
"""


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    need("nats-server")
    with throwaway_nats() as running:
        yield running


class Feed:
    """The connector, fed micro-batches by hand (versions counting up, as commits would)."""

    def __init__(self, connector: BusConnector) -> None:
        self.connector = connector
        self.versions = itertools.count(1)
        self.batches = itertools.count()

    async def change(self, *rows: dict[str, object], deleted: bool = False) -> int:
        version = 0
        table = {name: [row[name] for row in rows] for name in ("id", "title", "category")}
        versions = [version := next(self.versions) for _ in rows]
        table |= {"_version": versions, "_deleted": [deleted] * len(rows)}
        request = f"b1.{next(self.batches)}"
        await asyncio.to_thread(
            self.connector.publish_changes, "item", pa.table(table), request, None
        )
        return version


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def feed(server: NatsServer) -> AsyncIterator[Feed]:
    item = parse_config(CONFIG).datasets["item"]
    connector = BusConnector(
        server.url, "shop", {"item": ObjectTable(object_type(item), "shop", 64)}
    )
    await asyncio.to_thread(connector.start)
    try:
        yield Feed(connector)
    finally:
        await asyncio.to_thread(connector.stop)


def item(key: int, category: str | None, title: str = "thing") -> dict[str, object]:
    return {"id": key, "title": title, "category": category}


async def test_a_load_warms_every_other_cache(server: NatsServer, feed: Feed) -> None:
    await feed.change(item(1, "computer.hardware.misc", "a lamp " * 30))  # several fragments
    async with (
        await SnoopyCache.connect(server.url, "shop") as first,
        await SnoopyCache.connect(server.url, "shop") as second,
    ):
        there, here = first.find_by_key("item", 1), second.find_by_key("item", 1)
        await here.listening()
        loads = feed.connector.counters.loads
        assert (await there.get())["title"] == "a lamp " * 30
        assert first.counters.faults == 1
        # the second cache snooped the first one's LOADREPLY: no load of its own
        await eventually(lambda: here.version, lambda v: v >= 1, timeout=WAIT)
        assert (await here.get())["category"] == "computer.hardware.misc"
        assert (second.counters.faults, second.counters.hits, second.counters.snooped) == (0, 1, 1)
        assert feed.connector.counters.loads == loads + 1


async def test_updates_creates_and_deletes_reach_every_cache_in_order(
    server: NatsServer, feed: Feed
) -> None:
    async with await SnoopyCache.connect(server.url, "shop") as cache:
        seen: list[tuple[str, int]] = []
        cache.on_change(lambda change: seen.append((change.kind, change.version)))
        changes = cache.events()
        handle = cache.find_by_key("item", 2)
        assert await handle.get() is None  # not there: a LOADREPLY without state
        created = await feed.change(item(2, "garden"))
        updated = await feed.change(item(2, "garden", "rake"))
        await eventually(lambda: handle.version, lambda v: v == updated, timeout=WAIT)
        assert (await handle.get())["title"] == "rake"
        deleted = await feed.change(item(2, "garden"), deleted=True)
        await eventually(lambda: handle.version, lambda v: v == deleted, timeout=WAIT)
        assert await handle.get() is None
        expected = [
            ("LOADREPLY", 0),
            ("CREATE", created),
            ("UPDATENOTIFY", updated),
            ("DELETE", deleted),
        ]
        assert seen == expected
        # the same changes, in the same order, through an async iterator
        iterated = [await anext(changes) for _ in expected]
        assert [(change.kind, change.version) for change in iterated] == expected
        await changes.aclose()


async def test_a_write_reaches_caches_at_once_and_its_micro_batch_is_dropped_as_a_repeat(
    server: NatsServer, feed: Feed
) -> None:
    """A durable write handed to the connector (``publish_written``, as ``Pipeline.publish``
    does once the log holds it) reaches a cache before any micro-batch; the micro-batch that
    carries it, same version, changes nothing the application sees (docs/caches.md)."""
    async with await SnoopyCache.connect(server.url, "shop") as cache:
        seen: list[tuple[str, int]] = []
        cache.on_change(lambda change: seen.append((change.kind, change.version)))
        handle = cache.find_by_key("item", 20)
        await handle.listening()  # else the change may come before its subscription
        await feed.change(item(20, "garden"))
        await eventually(lambda: handle.version, lambda v: v > 0, timeout=WAIT)
        version = next(feed.versions)  # the write's ingest offset
        feed.connector.publish_written("item", [item(20, "home", "kettle")], [version], [False])
        await eventually(lambda: handle.version, lambda v: v == version, timeout=WAIT)
        assert (await handle.get())["title"] == "kettle"
        stale = cache.counters.stale
        table = {name: [value] for name, value in item(20, "home", "kettle").items()}
        table |= {"_version": [version], "_deleted": [False]}
        await asyncio.to_thread(
            feed.connector.publish_changes, "item", pa.table(table), "b1.99", None
        )
        await eventually(lambda: cache.counters.stale, lambda n: n > stale, timeout=WAIT)
        assert [kind for kind, v in seen if v == version] == ["UPDATENOTIFY"]


async def test_a_label_collection_is_kept_current(server: NatsServer, feed: Feed) -> None:
    await feed.change(item(10, "computer.hardware"), item(11, "computer.software"))
    await feed.change(item(12, "garden"))
    async with await SnoopyCache.connect(server.url, "shop") as cache:
        computers = await cache.find_by_label("item", "computer.>")
        assert {10, 11} <= computers.keys()
        assert 12 not in computers.items()
        await feed.change(item(12, "computer.misc"))  # moves in
        await feed.change(item(10, "garden"))  # moves out
        await eventually(computers.keys, lambda keys: 12 in keys and 10 not in keys, timeout=WAIT)
        await feed.change(item(11, "computer.software"), deleted=True)
        await eventually(computers.keys, lambda keys: 11 not in keys, timeout=WAIT)
        await computers.close()


async def test_bad_input_is_a_clear_error_or_counted_and_dropped(
    server: NatsServer, feed: Feed
) -> None:
    async with await SnoopyCache.connect(server.url, "shop", capacity=2) as cache:
        with pytest.raises(
            UnknownType, match=r"unknown type 'nope' \(the connector serves: item\)"
        ):
            cache.find_by_key("nope", 1)
        with pytest.raises(InvalidLabel, match="mixes a wildcard"):
            await cache.find_by_label("item", "computer*")
        with pytest.raises(TypeError, match="an integer key"):
            cache.find_by_key("item", "1")
        with pytest.raises(NotStored, match="without db"):
            await cache.save("item", item(5, None))
        handle = cache.find_by_key("item", 1)
        await handle.get()
        wrong_key = ObjectMessage("r", 99, True, 0, 1, encode_row(item(2, "x")), 0.0)
        raw = await nats.connect(server.url)
        try:
            for subject, data in [
                ("UPDATENOTIFY.item.1.shop.x", b"\x01garbage"),
                # a well-formed message whose state is another object's
                ("UPDATENOTIFY.item.1.shop.x", msgspec.msgpack.encode(wrong_key)),
                ("UPDATENOTIFY.item.1.shop.x", b"\x97\xa1r\x09\xc3\x00\x01\xc4\x03abc\x00"),
            ]:
                await raw.publish(subject, data)
            await raw.publish("LOAD.item.1.shop", b"not msgpack")
            await raw.flush()
        finally:
            await raw.close()
        await eventually(lambda: cache.counters.malformed, lambda n: n == 3, timeout=WAIT)
        await eventually(lambda: feed.connector.counters.malformed, lambda n: n >= 1, timeout=WAIT)
        # still served
        version = await feed.change(item(1, "x", "after"))
        await eventually(lambda: handle.version, lambda v: v == version, timeout=WAIT)
        assert (await handle.get())["title"] == "after"


async def test_concurrent_accesses_share_one_load(server: NatsServer, feed: Feed) -> None:
    await feed.change(item(40, "x", "shared"))
    async with await SnoopyCache.connect(server.url, "shop") as cache:
        handle = cache.find_by_key("item", 40)
        rows = await asyncio.gather(*(handle.get() for _ in range(5)))
        assert [row["title"] for row in rows] == ["shared"] * 5
        assert cache.shell.loads_sent == 1


async def test_a_full_cache_evicts_and_faults_again(server: NatsServer, feed: Feed) -> None:
    await feed.change(*(item(key, "bulk") for key in range(20, 25)))
    async with await SnoopyCache.connect(server.url, "shop", capacity=2) as cache:
        handles = [cache.find_by_key("item", key) for key in range(20, 25)]
        for handle in handles:
            assert (await handle.get())["id"] == handle.ref[1]
        assert len(cache.core.objects) == 2
        assert cache.counters.evicted >= 3
        assert (await handles[0].get())["id"] == 20  # loaded again
        assert cache.counters.faults == 6


async def test_no_connector_is_a_clear_error(server: NatsServer) -> None:
    with pytest.raises(LoadTimeout, match="domain = 'elsewhere'"):
        await SnoopyCache.connect(server.url, "elsewhere", load_wait=1.0)


async def test_a_restarted_bus_is_caught_up_by_loading_again(
    server: NatsServer, feed: Feed
) -> None:
    """The server is killed and restarted while updates are published: what the cache missed
    it loads again once reconnected, and it never shows an older version after a newer one."""
    await feed.change(item(30, "x", "v0"))
    async with await SnoopyCache.connect(server.url, "shop") as cache:
        handle = cache.find_by_key("item", 30)
        await handle.get()
        shown: list[int] = []
        cache.on_change(lambda change: shown.append(change.version))
        await asyncio.to_thread(server.kill)
        last = 0
        for n in range(5):  # published while the bus is away: the connector's buffer, or lost
            last = await feed.change(item(30, "x", f"v{n + 1}"))
        await asyncio.to_thread(server.start)
        await eventually(lambda: cache.shell.reconnects, lambda n: n >= 1, timeout=WAIT)
        await eventually(lambda: handle.version, lambda v: v == last, timeout=WAIT)
        assert (await handle.get())["title"] == "v5"
        assert shown == sorted(shown)
        after = await feed.change(item(30, "x", "v6"))
        await eventually(lambda: handle.version, lambda v: v == after, timeout=WAIT)
