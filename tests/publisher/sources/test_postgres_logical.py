"""The postgres source captured by logical decoding: a table's rows, then its changes in commit
order from a replication slot, on a real PostgreSQL server (the session's throwaway one, with
``wal_level = logical``), read by the stream reader Spark runs (without Spark)."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    FloatType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from fanout.publisher.sources import pgoutput
from fanout.publisher.sources import postgres_logical as logical_source
from fanout.publisher.sources.postgres import install
from fanout.publisher.sources.postgres_logical import LogicalStreamReader, capture_name
from fanout.publisher.sources.postgres_reader import CaptureError, ConnectedReader, ReaderOptions
from fanout.publisher.sources.postgres_trigger import TriggerStreamReader
from fanout.testing.capture import COLUMNS, SCHEMA, changes, execute

_tables = itertools.count()
_readers: list[ConnectedReader] = []


@pytest.fixture(autouse=True)
def _stop_readers() -> Iterator[None]:
    yield
    while _readers:
        _readers.pop().stop()


@pytest.fixture
def table(postgres_dsn: str) -> Iterator[str]:
    """A fresh ``orders`` table of its own; its slot is dropped after the test (it keeps WAL)."""
    name = f"lorders_{next(_tables)}"
    execute(
        postgres_dsn,
        f"CREATE TABLE {name} (order_id bigint PRIMARY KEY, customer text,"
        " amount double precision, note text)",
    )
    yield name
    drop_slot(postgres_dsn, name)


def drop_slot(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        logical_source.drop_slot(db, dsn, capture_name(dsn, table))


def reader(
    dsn: str, table: str, rows: int = 1000, schema: StructType = SCHEMA
) -> LogicalStreamReader:
    made = LogicalStreamReader(ReaderOptions(dsn, table, "", rows, "order_id", "logical"), schema)
    _readers.append(made)
    return made


def captured(dsn: str, table: str, rows: int = 1000) -> LogicalStreamReader:
    assert install(dsn, table, "order_id", COLUMNS, "logical") == "logical"
    return reader(dsn, table, rows)


def test_a_new_stream_reads_the_table_then_every_change_in_commit_order(
    postgres_dsn: str, table: str
) -> None:
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 5, 'x'), (2, 'bob', 'NaN', 'y')")
    stream = captured(postgres_dsn, table)
    start = stream.initialOffset()
    assert stream.initialOffset() == start  # Spark asks twice: one snapshot
    execute(
        postgres_dsn,
        f"INSERT INTO {table} VALUES (3, 'cy', 7, NULL)",
        f"UPDATE {table} SET order_id = 10 WHERE order_id = 1",  # a new key: delete, then upsert
        f"UPDATE {table} SET amount = 8 WHERE order_id = 3",
        f"DELETE FROM {table} WHERE order_id = 2",
    )
    snapshot, after_snapshot = stream.read(start)
    batches, end = stream.read(after_snapshot)
    read = changes(snapshot) + changes(batches)
    assert [(r["_version"], r["order_id"], r["_deleted"]) for r in read] == [
        (1, 1, False),  # the snapshot
        (2, 2, False),
        (3, 3, False),  # then the changes, in commit order
        (4, 1, True),
        (5, 10, False),
        (6, 3, False),
        (7, 2, True),
    ]
    assert read[1]["amount"] != read[1]["amount"]  # NaN travels
    assert read[4] == {**read[0], "order_id": 10, "_version": 5}  # the whole row, moved
    assert read[5]["amount"] == 8.0 and "note" not in read[0]  # the dataset's columns only
    again = changes(stream.readBetweenOffsets(after_snapshot, end))
    assert repr(again) == repr(read[2:])  # read again, identically
    batches, later = stream.read(end)
    assert changes(batches) == [] and later == end


def test_writers_are_not_serialised_and_are_read_in_commit_order(
    postgres_dsn: str, table: str
) -> None:
    """No clock row: the second writer commits while the first is still open, and its change
    comes first, as it committed first."""
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 0, NULL)")
    stream = captured(postgres_dsn, table)
    offset = stream.read(stream.initialOffset())[1]
    with psycopg.connect(postgres_dsn) as first, psycopg.connect(postgres_dsn) as second:
        first.execute(f"UPDATE {table} SET amount = 1 WHERE order_id = 1")
        second.execute(f"INSERT INTO {table} VALUES (2, 'bob', 2, NULL)")
        second.commit()  # does not wait for the first
        first.commit()
    batches, _ = stream.read(offset)
    assert [(r["order_id"], r["amount"], r["_version"]) for r in changes(batches)] == [
        (2, 2.0, 2),
        (1, 1.0, 3),
    ]


def test_admission_control_keeps_transactions_whole(postgres_dsn: str, table: str) -> None:
    stream = captured(postgres_dsn, table, rows=10)
    offset = stream.initialOffset()
    for low in range(0, 25, 5):  # five transactions of five changes
        execute(
            postgres_dsn,
            f"INSERT INTO {table} SELECT n, 'c', n FROM generate_series({low + 1}, {low + 5}) n",
        )
    execute(postgres_dsn, f"UPDATE {table} SET amount = 0")  # one transaction of 25
    sizes = []
    for _ in range(5):
        batches, offset = stream.read(offset)  # not committed: each read skips the ones read
        sizes.append(len(changes(batches)))
    assert sizes == [10, 10, 5, 25, 0]


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["insert", "update", "rekey", "delete", "other", "read", "commit", "restart"]
        ),
        st.integers(1, 6),
        st.integers(0, 99),
        st.booleans(),  # commit (True) or roll back the write
    ),
    max_size=30,
)


def statement(table: str, op: str, key: int, value: int) -> str:
    return {
        "insert": f"INSERT INTO {table} VALUES ({key}, 'c', {value}, NULL)"
        " ON CONFLICT (order_id) DO UPDATE SET amount = EXCLUDED.amount",
        "update": f"UPDATE {table} SET amount = {value} WHERE order_id = {key}",
        "rekey": f"UPDATE {table} SET order_id = {key + 10} WHERE order_id = {key}"
        f" AND NOT EXISTS (SELECT 1 FROM {table} WHERE order_id = {key + 10})",
        "delete": f"DELETE FROM {table} WHERE order_id = {key}",
        "other": f"INSERT INTO elsewhere VALUES ({value})",  # the slot moves on quietly
    }[op]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=st.lists(st.integers(1, 6), unique=True, max_size=4), ops=OPS)
def test_a_restarted_stream_loses_and_repeats_nothing(
    postgres_dsn: str, table: str, before: list[int], ops: list[tuple[str, int, int, bool]]
) -> None:
    """The audit, as Spark drives a source: micro-batches read and committed; a restart (a new
    reader, as after the publisher restarted) reads Spark's last uncommitted micro-batch again
    (``readBetweenOffsets``), then goes on. Oracle: every ``_version`` once, 1, 2, 3...; the
    micro-batches Spark kept, replayed, are exactly the table."""
    execute(postgres_dsn, f"DELETE FROM {table}", "CREATE TABLE IF NOT EXISTS elsewhere (n int)")
    for key in before:
        execute(postgres_dsn, f"INSERT INTO {table} VALUES ({key}, 'c', {key}, NULL)")
    stream = captured(postgres_dsn, table, rows=3)
    committed = stream.initialOffset()  # Spark's offset and commit logs: the last two offsets
    latest = committed
    kept: list[dict[str, Any]] = []  # the rows of the micro-batches Spark ran
    batch: list[dict[str, Any]] = []  # the last one's, until committed

    def spark_commits() -> None:
        nonlocal committed, batch
        stream.commit(latest)
        committed, batch = latest, []

    with psycopg.connect(postgres_dsn) as db:
        for op, key, value, commit in [*ops, ("commit", 0, 0, True)]:
            if op in ("read", "commit") and latest != committed:
                spark_commits()
            if op == "read":
                batches, latest = stream.read(committed)
                batch = changes(batches)
                kept += batch
            elif op == "restart":  # the micro-batch ran, its commit was not written
                stream.stop()
                stream = reader(postgres_dsn, table, rows=3)
                again = changes(stream.readBetweenOffsets(committed, latest))
                assert repr(again) == repr(batch)  # the same changes, numbered the same
            elif op != "commit":
                db.execute(statement(table, op, key, value))
                db.commit() if commit else db.rollback()
        while True:  # the stream catches up
            batches, latest = stream.read(committed)
            rows = changes(batches)
            if not rows:
                break
            kept += rows
            spark_commits()
        actual = dict(db.execute(f"SELECT order_id, amount FROM {table}").fetchall())
    assert [row["_version"] for row in kept] == list(range(1, len(kept) + 1))
    assert replayed(kept) == actual


def replayed(rows: list[dict[str, Any]]) -> dict[int, float]:
    """The table a stream's rows make: upserts and deletes by key, in order."""
    table: dict[int, float] = {}
    for row in rows:
        if row["_deleted"]:
            table.pop(row["order_id"], None)
        else:
            table[row["order_id"]] = row["amount"]
    return table


def test_types_decode_as_the_trigger_reads_them(postgres_dsn: str) -> None:
    """The same writes to two tables, one captured each way: the same rows, NULLs and refusals
    (numeric beyond its decimal, NaN, infinities), but for ``_version`` and a delete's values
    other than its key (the replica identity's: only the key)."""
    columns = {
        "id": "long",
        "amount": "decimal(6,2)",
        "ratio": "float",
        "at": "timestamp",
        "day": "date",
        "blob": "bytes",
    }
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("amount", DecimalType(6, 2)),
            StructField("ratio", FloatType()),
            StructField("at", TimestampType()),
            StructField("day", DateType()),
            StructField("blob", BinaryType()),
            StructField("_version", LongType()),
            StructField("_deleted", BooleanType()),
            StructField("_problem", StringType()),
        ]
    )
    read: dict[str, list[dict[str, Any]]] = {}
    for capture in ("trigger", "logical"):
        table = f"ledger_{capture}"
        execute(
            postgres_dsn,
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, amount numeric, ratio real,"
            " at timestamptz, day date, blob bytea)",
            f"INSERT INTO {table} VALUES (0, 1, 1, now(), NULL, NULL)",
        )
        install(postgres_dsn, table, "id", columns, capture)
        options = ReaderOptions(postgres_dsn, table, "", 100, "id", capture)
        stream = (LogicalStreamReader if capture == "logical" else TriggerStreamReader)(
            options, schema
        )
        _readers.append(stream)
        start = stream.initialOffset()
        if capture == "logical":
            start = stream.read(start)[1]  # past the snapshot
        with psycopg.connect(postgres_dsn, autocommit=True) as db:
            db.execute("SET TimeZone = 'Asia/Kolkata'")  # the writer's zone changes nothing
            db.execute(
                f"INSERT INTO {table} VALUES (1, 1.5, 0.5, '2024-03-01 10:00:00.123456+00',"
                " '2024-02-29', %s)",
                (b"\x00\\a\xff",),
            )
            db.execute(f"INSERT INTO {table} VALUES (2, NULL, NULL, NULL, NULL, NULL)")
            db.execute(f"INSERT INTO {table} VALUES (3, 12345.5, 0.5, NULL, NULL, '')")
            db.execute(f"INSERT INTO {table} VALUES (4, 'NaN', 'Infinity', NULL, NULL, NULL)")
            db.execute(f"INSERT INTO {table} VALUES (5, 1, 1, 'infinity', NULL, NULL)")
            db.execute(f"INSERT INTO {table} VALUES (6, 1, 1, NULL, '-infinity', NULL)")
            db.execute(f"INSERT INTO {table} VALUES (7, 9999.99, '-Infinity', NULL, NULL, NULL)")
            db.execute(f"UPDATE {table} SET blob = '\\x0102', amount = -0.5 WHERE id = 1")
            db.execute(f"DELETE FROM {table} WHERE id = 3")
        read[capture] = [
            {
                **row,
                "_version": None,
                "_problem": re.sub(r"change \d+|ledger_\w+", "", row["_problem"] or ""),
            }
            for row in changes(stream.read(start)[0])
            if row["id"] != 0  # the trigger's snapshot
        ]
        if capture == "logical":
            drop_slot(postgres_dsn, table)
    key_only = {name: None for name in columns if name != "id"}
    for logical, trigger in zip(read["logical"], read["trigger"], strict=True):
        # a trigger's delete has the old row, the slot's its key
        assert repr(logical) == repr({**trigger, **key_only} if trigger["_deleted"] else trigger)
    assert [row["id"] for row in read["logical"] if row["_problem"]] == [3, 4, 5, 6]


def test_a_slot_confirmed_past_the_stream_is_refused_not_skipped(
    postgres_dsn: str, table: str
) -> None:
    first = captured(postgres_dsn, table)
    start = first.read(first.initialOffset())[1]
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)")
    reader(postgres_dsn, table).initialOffset()  # a second stream on the table: a new slot
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (2, 'bob', 2, NULL)")
    with pytest.raises(CaptureError, match="the changes between are gone"):
        first.read(start)
    drop_slot(postgres_dsn, table)
    with pytest.raises(CaptureError, match=r"its replication slot .* is gone"):
        first.read(start)


def test_a_snapshot_by_another_stream_is_refused_not_skipped(postgres_dsn: str, table: str) -> None:
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)")
    first = captured(postgres_dsn, table)
    start = first.initialOffset()
    reader(postgres_dsn, table).initialOffset()
    with pytest.raises(CaptureError, match="no longer all there"):
        first.read(start)


def test_truncate_is_refused_so_no_row_vanishes_unseen(postgres_dsn: str, table: str) -> None:
    captured(postgres_dsn, table).initialOffset()
    with pytest.raises(psycopg.errors.RaiseException, match="delete its rows instead"):
        execute(postgres_dsn, f"TRUNCATE {table}")


def test_a_connection_the_database_dropped_is_made_again(postgres_dsn: str, table: str) -> None:
    stream = captured(postgres_dsn, table)
    start = stream.read(stream.initialOffset())[1]
    execute(
        postgres_dsn,
        f"SELECT pg_terminate_backend({stream.db.info.backend_pid})",
        f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)",
    )
    batches, end = stream.read(start)
    assert [r["order_id"] for r in changes(batches)] == [1] and end["id"] == 1


def test_a_stream_the_database_ended_is_opened_again_and_loses_nothing(
    postgres_dsn: str, table: str
) -> None:
    """The slot's stream ended by the server (its walsender terminated): the next read opens
    it again from the slot's confirmed position, which sends again what Spark has not
    committed; nothing is lost and nothing read twice."""
    stream = captured(postgres_dsn, table)
    start = stream.read(stream.initialOffset())[1]
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)")
    first, offset = stream.read(start)  # read, not committed
    slot = capture_name(postgres_dsn, table)
    execute(
        postgres_dsn,
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
        f" WHERE slot_name = '{slot}'",
        f"INSERT INTO {table} VALUES (2, 'bob', 2, NULL)",
    )
    batches, _ = stream.read(offset)
    assert [r["order_id"] for r in changes(first)] == [1]
    assert [(r["order_id"], r["_version"]) for r in changes(batches)] == [(2, 2)]
    again = changes(stream.readBetweenOffsets(start, offset))
    assert [(r["order_id"], r["_version"]) for r in again] == [(1, 1)]


def test_a_quiet_tables_slot_moves_on_while_others_are_written(
    postgres_dsn: str, table: str
) -> None:
    """Writes to other tables are not read, and once Spark committed all it read, the slot
    is confirmed past them: it keeps no WAL for them, and reads do not decode them again."""
    stream = captured(postgres_dsn, table)
    start = stream.read(stream.initialOffset())[1]
    stream.commit(start)

    def confirmed() -> str:
        with psycopg.connect(postgres_dsn) as db:
            (lsn,) = db.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (capture_name(postgres_dsn, table),),
            ).fetchone() or ("",)
        return str(lsn)

    before = confirmed()
    execute(
        postgres_dsn,
        "CREATE TABLE IF NOT EXISTS elsewhere (n int)",
        "INSERT INTO elsewhere SELECT generate_series(1, 1000)",
    )
    batches, offset = stream.read(start)
    assert changes(batches) == [] and offset == start  # no micro-batch for Spark to run
    moved = time.monotonic() + 10  # the server takes the stream's status update in its time
    while pgoutput.lsn_of(confirmed()) <= pgoutput.lsn_of(before) and time.monotonic() < moved:
        time.sleep(0.05)
    assert pgoutput.lsn_of(confirmed()) > pgoutput.lsn_of(before)
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)")
    assert [r["order_id"] for r in changes(stream.read(start)[0])] == [1]
