"""The database connector across a publisher restart: its table is loaded again from Spark's
state before the first micro-batch after the restart is published, so a change made while the
publisher was down reaches a cache as an update of what it held, and loads are answered from the
whole table again. Then writes reach the caches at once: a producer's, and a database commit
(the live tail), each before its micro-batch and taken once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import nats
import numpy as np
import psycopg
import pytest

from fanout.cache.client import SnoopyCache
from fanout.client.publisher import open_producer
from fanout.launch import Children
from fanout.testing.nats import NatsServer, throwaway_nats
from fanout.testing.needs import need
from fanout.testing.postgres import throwaway_postgres
from fanout.testing.wait import eventually
from fanout.wire.bus import ObjectMessage

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """
[bus]
url = "{nats}"
domain = "shop"

[datasets.item]
key = "id"
schema = {{ id = "long", title = "string", category = "string" }}
source = {{ kind = "postgres", url = "{db}", table = "items" }}
bus = {{ label = "category" }}

[datasets.note]
key = "id"
schema = {{ id = "long", text = "string" }}
source = {{ kind = "ingest" }}
bus = true
"""


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    need("initdb", "pg_ctl")
    with throwaway_postgres() as url, psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE items (id bigint PRIMARY KEY, title text, category text)")
        db.execute("INSERT INTO items VALUES (1, 'lamp', 'home'), (2, 'rake', 'garden')")
        yield url


@pytest.fixture(scope="module")
def bus() -> Iterator[NatsServer]:
    need("nats-server")
    with throwaway_nats() as server:
        yield server


async def test_a_restarted_publisher_goes_on_from_its_table(
    children: Children, tmp_path: Path, database: str, bus: NatsServer
) -> None:
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG.format(nats=bus.url, db=database))
    args = ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "state")]
    args += ["--log-level", "info"]
    publisher = await children.start("publisher", args, tmp_path / "publisher.log")
    async with await SnoopyCache.connect(bus.url, "shop", load_wait=180) as cache:
        seen: list[tuple[str, int]] = []
        cache.on_change(lambda change: seen.append((change.kind, change.ref[1])))
        lamp = cache.find_by_key("item", 1)
        assert (await lamp.get())["title"] == "lamp"
        before = lamp.version
        await publisher.stop()
        seen.clear()
        with psycopg.connect(database, autocommit=True) as db:
            db.execute("UPDATE items SET title = 'lamp, used' WHERE id = 1")
        publisher = await children.start("publisher", args, tmp_path / "publisher.log")
        try:
            await eventually(lambda: lamp.version, lambda v: v > before, timeout=180)
            assert (await lamp.get())["title"] == "lamp, used"
            # an update of what the table held before the restart, not a creation
            assert ("UPDATENOTIFY", 1) in seen
            assert ("CREATE", 1) not in seen
            # loads are answered from the whole table, loaded again from Spark's state
            assert (await cache.find_by_key("item", 2).get())["title"] == "rake"
            await writes_reach_caches_at_once(publisher.url, bus.url, cache)
            await commits_reach_caches_at_once(database, bus.url, cache, tmp_path)
        finally:
            await publisher.stop()


async def listening(url: str, subject: str, heard: list[tuple[int, str]]) -> nats.aio.client.Client:
    """A bus connection noting (version, request) of each object message on ``subject`` in
    ``heard``; the caller closes it."""
    bus = await nats.connect(url)

    async def listen(msg: nats.aio.msg.Msg) -> None:
        message = msgspec.msgpack.decode(msg.data, type=ObjectMessage)
        heard.append((message.version, message.request))

    await bus.subscribe(subject, cb=listen)
    await bus.flush()
    return bus


async def writes_reach_caches_at_once(publisher: str, url: str, cache: SnoopyCache) -> None:
    """A write through the producer API to an ingest dataset on the bus reaches a cache holding
    the object as soon as it is logged (``bustable`` rule 6): the first message of its version
    is the write's (request ``written``), the micro-batch's a repeat the cache drops."""
    heard: list[tuple[int, str]] = []
    bus = await listening(url, "*.note.7.shop.>", heard)
    try:
        note = cache.find_by_key("note", 7)
        async with open_producer(publisher) as producer:
            rows = {"id": np.array([7]), "text": np.array(["first"], dtype=object)}
            await producer.publish("note", rows=rows)  # its table is loaded by this batch
            await eventually(note.get, lambda row: row is not None, timeout=180)
            rows["text"] = np.array(["second"], dtype=object)
            _, last = await producer.publish("note", rows=rows)
            await eventually(lambda: note.version, lambda v: v >= last, timeout=180)
        assert (await note.get())["text"] == "second"
        of_last = lambda: [request for v, request in heard if v == last]  # noqa: E731
        await eventually(of_last, lambda requests: len(requests) >= 2, timeout=180)
        assert of_last()[0] == "written"  # the write's own message first, the batch's after
    finally:
        await bus.close()


async def commits_reach_caches_at_once(
    database: str, url: str, cache: SnoopyCache, tmp_path: Path
) -> None:
    """A database commit reaches a cache holding the object from the publisher's live tail
    (``sources.postgres_tail``) before the micro-batch, under the version that micro-batch
    carries: the cache takes it once, the batch's message a repeat it drops."""
    log = tmp_path / "publisher.log"
    since_start = lambda: log.read_text().rsplit("live tail from", 1)[-1]  # noqa: E731
    await eventually(since_start, lambda text: "live tail counts from" in text, timeout=60)
    heard: list[tuple[int, str]] = []
    bus = await listening(url, "*.item.2.shop.>", heard)
    try:
        rake = cache.find_by_key("item", 2)
        before = rake.version
        taken: list[int] = []
        cache.on_change(lambda change: taken.append(change.version) if change.ref[1] == 2 else None)
        with psycopg.connect(database, autocommit=True) as db:
            db.execute("UPDATE items SET title = 'rake, sharp' WHERE id = 2")
        await eventually(lambda: rake.version, lambda v: v > before, timeout=60)
        assert (await rake.get())["title"] == "rake, sharp"
        version = rake.version
        of_it = lambda: [request for v, request in heard if v == version]  # noqa: E731
        await eventually(of_it, lambda requests: len(requests) >= 2, timeout=60)
        assert of_it()[0] == "written"  # the tail's message first, the micro-batch's after
        assert of_it()[1].startswith("b")
        assert taken == [version]  # taken once
    finally:
        await bus.close()
