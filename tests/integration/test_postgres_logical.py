"""The database connector by logical decoding, end to end: a publisher (Spark) reading a table's
replication slot is killed (SIGKILL) while writers keep writing, and started again from its
checkpoint; a subscriber of a real relay ends with exactly the table, having never seen a
counter go back (a change repeated after a later one, or lost and made up later, would), and
the table has no trigger: its writers paid nothing for the capture."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fanout.client import LiveView, connect
from fanout.launch import Child, Children
from fanout.testing.needs import need
from fanout.testing.ports import free_port
from fanout.testing.postgres import throwaway_postgres
from fanout.testing.wait import eventually
from fanout.views.sql import parse as sql

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """
[datasets.counters]
key = "id"
index = "sql"
schema = {{ id = "long", n = "long" }}
source = {{ kind = "postgres", url = "{url}", table = "counters", capture = "logical" }}
"""
#: Counters 1..20 are only ever incremented; 21..30 come and go.
KEPT, COMING = range(1, 21), range(21, 31)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    need("initdb", "pg_ctl")
    with throwaway_postgres() as url, psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE counters (id bigint PRIMARY KEY, n bigint NOT NULL)")
        db.execute("INSERT INTO counters SELECT id, 0 FROM generate_series(1, 20) id")
        yield url


def table(url: str) -> dict[int, int]:
    with psycopg.connect(url) as db:
        return dict(db.execute("SELECT id, n FROM counters").fetchall())


def write(url: str, stop: threading.Event) -> None:
    """Increment, insert and delete, one row per transaction, until ``stop``."""
    rng = random.Random(7)
    with psycopg.connect(url, autocommit=True) as db:
        while not stop.wait(0.005):
            key = rng.randrange(1, 31)
            if key in KEPT or rng.random() < 0.5:
                db.execute("UPDATE counters SET n = n + 1 WHERE id = %s", (key,))
            if key in COMING:
                if rng.random() < 0.5:
                    db.execute("DELETE FROM counters WHERE id = %s", (key,))
                else:
                    db.execute("INSERT INTO counters VALUES (%s, 0) ON CONFLICT DO NOTHING", (key,))


async def publisher(children: Children, config: Path, state: Path, log: Path, port: int) -> Child:
    args = ["--config", str(config), "--port", str(port), "--state-dir", str(state)]
    return await children.start("publisher", [*args, "--log-level", "info"], log)


def rows(view: LiveView) -> dict[int, int]:
    return {row["id"]: row["n"] for row in view.rows.values()}


async def test_a_killed_publisher_resumes_from_its_slot(tmp_path: Path, database: str) -> None:
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG.format(url=database))
    port, state = free_port(), tmp_path / "state"
    stop = threading.Event()
    writer = threading.Thread(target=write, args=(database, stop))
    went_back: list[tuple[int, int, int]] = []
    async with Children() as children:  # leaving it stops the relay and the publishers
        first = await publisher(children, config, state, tmp_path / "publisher-1.log", port)
        relay = await children.start(
            "relay", ["--publisher", first.url, "--port", "0"], tmp_path / "relay.log"
        )
        try:
            async with connect(relay.url) as subscriber, asyncio.TaskGroup() as tasks:
                view = await subscriber.subscribe(
                    sql("SELECT id, n FROM counters"), dataset="counters", rate=50.0
                )
                await eventually(lambda: len(view.rows), lambda n: n >= 20, timeout=180)
                seen: dict[int, int] = {}

                async def watch() -> None:
                    while True:
                        for key, n in rows(view).items():
                            if key in KEPT and n < seen.get(key, 0):
                                went_back.append((key, seen[key], n))
                            seen[key] = max(n, seen.get(key, 0))
                        await asyncio.sleep(0.02)

                watching = tasks.create_task(watch())
                writer.start()
                await eventually(lambda: sum(seen.values()), lambda n: n > 50, timeout=120)
                first.kill()  # mid-stream: no goodbye, its last micro-batch perhaps half done
                await first.process.wait()
                await asyncio.sleep(2.0)  # the writers go on meanwhile
                await publisher(children, config, state, tmp_path / "publisher-2.log", port)
                restarted = sum(seen.values())  # the writers go on until the new one serves them
                await eventually(lambda: sum(seen.values()), lambda n: n > restarted, timeout=120)
                stop.set()
                await asyncio.to_thread(writer.join)
                final = table(database)
                await eventually(lambda: rows(view), lambda got: got == final, timeout=180)
                watching.cancel()
        finally:
            stop.set()
            if writer.is_alive():
                writer.join()
    assert went_back == []
    assert sum(final[key] for key in KEPT) > 50
    with psycopg.connect(database) as db:
        triggers: Any = db.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'counters'::regclass"
        ).fetchall()
        (confirmed,) = db.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots"
            " WHERE slot_name LIKE 'fanout_counters_%'"
        ).fetchone() or (None,)
    assert [name for (name,) in triggers] == ["fanout_refuse_truncate_counters"]
    assert confirmed is not None  # the slot the publisher read, advanced as it committed
