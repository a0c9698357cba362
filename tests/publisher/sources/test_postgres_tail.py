"""The live tail (sources.postgres_tail) on a real PostgreSQL beside the logical capture's reader
(without Spark): it starts after the reader, waits for an anchor past its start (the reader's
quiet one, asked for), then publishes each commit at once with the very ``_version`` and values
the reader's micro-batch gives it — inserts, updates, a key change, deletes, several changes in
one transaction — and nothing of a rolled-back one."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from pyspark.sql.pandas.types import to_arrow_schema

from fanout.publisher.sources.postgres import install
from fanout.publisher.sources.postgres_logical import LogicalStreamReader, capture_name
from fanout.publisher.sources.postgres_logical import drop_slot as drop_capture_slot
from fanout.publisher.sources.postgres_reader import ReaderOptions
from fanout.publisher.sources.postgres_tail import LiveTail
from fanout.testing.capture import COLUMNS, SCHEMA, changes, execute

TABLE = "tail_orders"


class Published:
    """What the tail handed over, by version (thread-safe)."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[bool, dict[str, Any]]] = {}
        self.lock = threading.Lock()

    def __call__(
        self, rows: list[dict[str, Any]], versions: list[int], deleted: list[bool]
    ) -> None:
        with self.lock:
            for row, version, gone in zip(rows, versions, deleted, strict=True):
                assert version not in self.rows  # never twice
                self.rows[version] = (gone, row)

    def wait_for(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.rows) < count and time.monotonic() < deadline:
            time.sleep(0.01)


def wait_until_counting(tail: LiveTail, reader: LogicalStreamReader, offset: dict) -> None:
    """Spark's trigger: quiet reads, one anchoring past the tail's start once it asks."""
    deadline = time.monotonic() + 30
    while not tail.counting and time.monotonic() < deadline:
        reader.read(offset)
        time.sleep(0.1)
    assert tail.counting


def expected(batch: list[dict[str, Any]]) -> dict[int, tuple[bool, dict[str, Any]]]:
    """A micro-batch's rows as the tail hands them over, by version."""
    return {
        row["_version"]: (row["_deleted"], {name: row[name] for name in COLUMNS}) for row in batch
    }


def test_the_tail_publishes_each_commit_as_the_micro_batch_will(postgres_dsn: str) -> None:
    execute(
        postgres_dsn,
        f"DROP TABLE IF EXISTS {TABLE}",
        f"CREATE TABLE {TABLE} (order_id bigint PRIMARY KEY, customer text, amount float8,"
        " note text)",
        f"INSERT INTO {TABLE} VALUES (1, 'ada', 1, NULL), (2, 'bob', 2, NULL)",
    )
    assert install(postgres_dsn, TABLE, "order_id", COLUMNS, "logical") == "logical"
    options = ReaderOptions(postgres_dsn, TABLE, "", 1000, "order_id", "logical")
    reader = LogicalStreamReader(options, SCHEMA)
    published = Published()
    tail = LiveTail(options, to_arrow_schema(SCHEMA, timezone="UTC"), published)
    try:
        offset = reader.initialOffset()
        _, offset = reader.read(offset)  # the snapshot's rows
        tail.start()
        wait_until_counting(tail, reader, offset)
        execute(
            postgres_dsn,
            f"INSERT INTO {TABLE} VALUES (3, 'cy', 3, NULL)",
            f"UPDATE {TABLE} SET amount = 10 WHERE order_id = 1",
            f"UPDATE {TABLE} SET order_id = 20 WHERE order_id = 2",  # a delete and an upsert
            f"DELETE FROM {TABLE} WHERE order_id = 3",
        )
        with psycopg.connect(postgres_dsn) as db:  # one transaction, two changes
            db.execute(f"INSERT INTO {TABLE} VALUES (4, 'di', 4, NULL)")
            db.execute(f"UPDATE {TABLE} SET customer = 'dee' WHERE order_id = 4")
        with psycopg.connect(postgres_dsn) as db:  # rolled back: never decoded
            db.execute(f"INSERT INTO {TABLE} VALUES (5, 'eve', 5, NULL)")
            db.rollback()
        published.wait_for(7)
        batch = changes(reader.read(offset)[0])
    finally:
        tail.stop()
        reader.stop()
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            drop_capture_slot(db, postgres_dsn, capture_name(postgres_dsn, TABLE))
    assert len(batch) == 7
    assert published.rows == expected(batch)


def test_a_new_streams_snapshot_restarts_the_tail_which_counts_as_it_does(
    postgres_dsn: str,
) -> None:
    """Another stream's snapshot makes the slot again and numbers from its copied rows: the
    tail's anchor is then of another slot, so it starts again and counts as the new stream."""
    table = TABLE + "_again"
    execute(
        postgres_dsn,
        f"DROP TABLE IF EXISTS {table}",
        f"CREATE TABLE {table} (order_id bigint PRIMARY KEY, customer text, amount float8)",
        f"INSERT INTO {table} VALUES (1, 'ada', 1)",
    )
    assert install(postgres_dsn, table, "order_id", COLUMNS, "logical") == "logical"
    options = ReaderOptions(postgres_dsn, table, "", 1000, "order_id", "logical")
    first, published = LogicalStreamReader(options, SCHEMA), Published()
    tail = LiveTail(options, to_arrow_schema(SCHEMA, timezone="UTC"), published)
    second = LogicalStreamReader(options, SCHEMA)
    try:
        _, offset = first.read(first.initialOffset())
        tail.start()
        wait_until_counting(tail, first, offset)
        execute(postgres_dsn, f"UPDATE {table} SET amount = 2 WHERE order_id = 1")
        published.wait_for(1)
        first.stop()
        execute(postgres_dsn, f"INSERT INTO {table} VALUES (2, 'bob', 2)")
        _, again = second.read(second.initialOffset())  # the new stream: 2 rows copied
        deadline = time.monotonic() + 30
        while tail.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tail.restarts >= 1
        wait_until_counting(tail, second, again)
        published.rows.clear()
        execute(postgres_dsn, f"UPDATE {table} SET customer = 'bo' WHERE order_id = 2")
        published.wait_for(1)
        batch = changes(second.read(again)[0])
    finally:
        tail.stop()
        first.stop()
        second.stop()
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            drop_capture_slot(db, postgres_dsn, capture_name(postgres_dsn, table))
    assert [row["_version"] for row in batch] == [3]  # after the new snapshot's two rows
    assert published.rows == expected(batch)
