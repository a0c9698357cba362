"""The postgres source captured by a trigger: a table's rows, then its changes in commit order,
on a real PostgreSQL server (the session's throwaway one), read by the stream reader Spark runs
(without Spark)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from decimal import Decimal

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

from fanout.errors import ConfigError
from fanout.publisher.sources import postgres_reader
from fanout.publisher.sources.postgres import install
from fanout.publisher.sources.postgres_reader import CaptureError, ReaderOptions
from fanout.publisher.sources.postgres_trigger import TriggerStreamReader
from fanout.testing.capture import COLUMNS, SCHEMA, changes, execute

_tables = itertools.count()
_readers: list[TriggerStreamReader] = []


@pytest.fixture(autouse=True)
def _stop_readers() -> Iterator[None]:
    """Readers close their connections as Spark stops them."""
    yield
    while _readers:
        _readers.pop().stop()


@pytest.fixture
def table(postgres_dsn: str) -> Iterator[str]:
    """A fresh ``orders`` table of its own (each test captures its own)."""
    name = f"orders_{next(_tables)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(
            f"CREATE TABLE {name} (order_id bigint PRIMARY KEY, customer text,"
            " amount double precision, note text)"
        )
        yield name


def reader(dsn: str, table: str, rows: int = 1000) -> TriggerStreamReader:
    install(dsn, table, "order_id", COLUMNS, "trigger")
    made = TriggerStreamReader(ReaderOptions(dsn, table, "unused", rows, "order_id"), SCHEMA)
    _readers.append(made)
    return made


def test_a_new_stream_reads_the_table_then_every_change_in_order(
    postgres_dsn: str, table: str
) -> None:
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 5, 'x'), (2, 'bob', 'NaN', 'y')")
    stream = reader(postgres_dsn, table)
    start = stream.initialOffset()
    assert stream.initialOffset() == start  # Spark asks twice: one snapshot
    execute(
        postgres_dsn,
        f"INSERT INTO {table} VALUES (3, 'cy', 7, NULL)",
        f"UPDATE {table} SET order_id = 10 WHERE order_id = 1",  # a new key: delete, then upsert
        f"UPDATE {table} SET amount = 8 WHERE order_id = 3",
        f"DELETE FROM {table} WHERE order_id = 2",
    )
    batches, end = stream.read(start)
    read = changes(batches)
    assert [(r["_version"], r["order_id"], r["_deleted"]) for r in read] == [
        (1, 1, False),  # the snapshot
        (2, 2, False),
        (3, 3, False),  # then the changes, in commit order
        (4, 1, True),
        (5, 10, False),
        (6, 3, False),
        (7, 2, True),
    ]
    assert read[1]["amount"] != read[1]["amount"]  # NaN travels (jsonb spells it as text)
    assert read[5]["amount"] == 8.0 and "note" not in read[0]  # the dataset's columns only
    assert end == {"id": start["id"] + 7}
    again = changes(stream.readBetweenOffsets(start, end))
    assert repr(again) == repr(read)  # read again, identically (repr: NaN is not NaN)
    batches, later = stream.read(end)
    assert changes(batches) == [] and later == end


def test_admission_control_and_commit_trims_what_spark_committed(
    postgres_dsn: str, table: str
) -> None:
    execute(postgres_dsn, f"INSERT INTO {table} SELECT n, 'c', n FROM generate_series(1, 25) n")
    stream = reader(postgres_dsn, table, rows=10)
    start = stream.initialOffset()
    ends = []
    offset = start
    for _ in range(4):
        batches, offset = stream.read(offset)
        ends.append((len(changes(batches)), offset["id"] - start["id"]))
    assert ends == [(10, 10), (10, 20), (5, 25), (0, 25)]
    stream.commit({"id": start["id"] + 20})
    with psycopg.connect(postgres_dsn) as db:
        (left,) = db.execute(
            "SELECT count(*) FROM fanout_changes WHERE source = %s", (table,)
        ).fetchone() or (0,)
    assert left == 5
    with pytest.raises(CaptureError, match="no longer all there"):
        stream.readBetweenOffsets(start, {"id": start["id"] + 10})


def test_a_rolled_back_transaction_leaves_no_gap(postgres_dsn: str, table: str) -> None:
    stream = reader(postgres_dsn, table)
    start = stream.initialOffset()
    with psycopg.connect(postgres_dsn) as db:
        db.execute(f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)")
        db.rollback()
        db.execute(f"INSERT INTO {table} VALUES (2, 'bob', 2, NULL)")
        db.commit()
    batches, end = stream.read(start)
    assert [r["order_id"] for r in changes(batches)] == [2]
    assert end == {"id": start["id"] + 1}


def test_truncate_is_refused_so_no_row_vanishes_unseen(postgres_dsn: str, table: str) -> None:
    reader(postgres_dsn, table)
    with pytest.raises(psycopg.errors.RaiseException, match="delete its rows instead"):
        execute(postgres_dsn, f"TRUNCATE {table}")


def test_a_snapshot_by_another_stream_is_refused_not_skipped(postgres_dsn: str, table: str) -> None:
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)")
    first = reader(postgres_dsn, table)
    start = first.initialOffset()
    reader(postgres_dsn, table).initialOffset()  # a second stream on the same table
    with pytest.raises(CaptureError, match="another stream took a snapshot"):
        first.read(start)


def test_a_stream_ahead_of_the_tables_changes_is_refused(postgres_dsn: str, table: str) -> None:
    stream = reader(postgres_dsn, table)
    start = stream.initialOffset()
    with pytest.raises(CaptureError, match="changes end at"):
        stream.read({"id": start["id"] + 5})  # as after restoring an older copy of the database


def test_writers_that_overlap_are_read_in_commit_order(postgres_dsn: str, table: str) -> None:
    """The second writer's change waits for the first writer's commit (the clock row's lock),
    so its id comes after it, whichever transaction started first."""
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 'ada', 0, NULL)")
    stream = reader(postgres_dsn, table)
    start = stream.initialOffset()
    first, second = psycopg.connect(postgres_dsn), psycopg.connect(postgres_dsn)
    try:
        second.execute("SELECT 1")  # the second transaction starts first
        first.execute(f"UPDATE {table} SET amount = 1 WHERE order_id = 1")
        waiting = threading.Thread(
            target=lambda: (
                second.execute(f"INSERT INTO {table} VALUES (2, 'bob', 2, NULL)"),
                second.commit(),
            )
        )
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # held back by the first writer's clock lock
        first.commit()
        waiting.join(10)
    finally:
        first.close()
        second.close()
    batches, _ = stream.read(start)
    assert [(r["order_id"], r["amount"]) for r in changes(batches)][1:] == [(1, 1.0), (2, 2.0)]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "rekey", "delete"]),
        st.integers(1, 6),
        st.integers(0, 99),
        st.booleans(),  # commit (True) or roll back
    ),
    max_size=25,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=st.lists(st.integers(1, 6), unique=True, max_size=4), ops=OPS)
def test_the_snapshot_plus_the_changes_is_the_table(
    postgres_dsn: str, table: str, before: list[int], ops: list[tuple[str, int, int, bool]]
) -> None:
    """Oracle: the table itself. Replaying the stream (upserts and deletes by key, in order)
    from nothing gives exactly the table's rows, whatever was done and rolled back."""
    execute(postgres_dsn, f"DELETE FROM {table}")
    for key in before:
        execute(postgres_dsn, f"INSERT INTO {table} VALUES ({key}, 'c', {key}, NULL)")
    stream = reader(postgres_dsn, table, rows=7)
    offset = stream.initialOffset()
    with psycopg.connect(postgres_dsn) as db:
        for op, key, value, commit in ops:
            statement = {
                "insert": f"INSERT INTO {table} VALUES ({key}, 'c', {value}, NULL)"
                " ON CONFLICT (order_id) DO UPDATE SET amount = EXCLUDED.amount",
                "update": f"UPDATE {table} SET amount = {value} WHERE order_id = {key}",
                "rekey": f"UPDATE {table} SET order_id = {key + 10} WHERE order_id = {key}"
                f" AND NOT EXISTS (SELECT 1 FROM {table} WHERE order_id = {key + 10})",
                "delete": f"DELETE FROM {table} WHERE order_id = {key}",
            }[op]
            db.execute(statement)
            db.commit() if commit else db.rollback()
        replayed: dict[int, float] = {}
        while True:
            batches, end = stream.read(offset)
            rows = changes(batches)
            if not rows:
                break
            for row in rows:
                if row["_deleted"]:
                    replayed.pop(row["order_id"], None)
                else:
                    replayed[row["order_id"]] = row["amount"]
            stream.commit(end)
            offset = end
        actual = dict(db.execute(f"SELECT order_id, amount FROM {table}").fetchall())
    assert replayed == actual


def test_a_connection_the_database_dropped_is_made_again(postgres_dsn: str, table: str) -> None:
    stream = reader(postgres_dsn, table)
    start = stream.initialOffset()
    execute(
        postgres_dsn,
        f"SELECT pg_terminate_backend({stream.db.info.backend_pid})",  # as a restart would
        f"INSERT INTO {table} VALUES (1, 'ada', 1, NULL)",
    )
    batches, end = stream.read(start)
    assert [r["order_id"] for r in changes(batches)] == [1] and end == {"id": start["id"] + 1}


def test_a_database_that_stays_away_fails_the_read(
    monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    monkeypatch.setattr(postgres_reader, "RECONNECT_FOR", 0.3)
    gone = TriggerStreamReader(
        ReaderOptions("postgresql://fanout@127.0.0.1:9/none", table, "unused"), SCHEMA
    )
    with pytest.raises(CaptureError, match=r"stayed unreachable for 0\.3 s"):
        gone.read({"id": 0})


def test_a_table_without_the_datasets_columns_is_refused(postgres_dsn: str, table: str) -> None:
    with pytest.raises(CaptureError, match="has no column 'price'"):
        install(postgres_dsn, table, "order_id", {**COLUMNS, "price": "double"})
    with pytest.raises(CaptureError, match=r"column 'note' of table .* is text, which does not"):
        install(postgres_dsn, table, "order_id", {**COLUMNS, "note": "double"})
    with pytest.raises(CaptureError, match="is double precision, which does not read as"):
        install(postgres_dsn, table, "order_id", {**COLUMNS, "amount": "long"})
    with pytest.raises(CaptureError, match="the database has no table 'nope'"):
        install(postgres_dsn, "nope", "order_id", COLUMNS)
    with pytest.raises(CaptureError, match="postgres source for table"):
        install("postgresql://fanout@127.0.0.1:9/none", table, "order_id", COLUMNS)


def test_reader_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="option 'table' is required"):
        ReaderOptions.from_options({"url": "postgresql://x", "schema": "a int"})
    with pytest.raises(ConfigError, match="maxRowsPerBatch='0'"):
        ReaderOptions.from_options(
            {"url": "postgresql://x", "table": "t", "schema": "a int", "maxRowsPerBatch": "0"}
        )


def test_a_change_whose_value_does_not_fit_is_marked_refused_whole(postgres_dsn: str) -> None:
    """A numeric beyond the declared decimal(6,2), a double beyond a float's range and a
    timestamptz of infinity each refuse their change, naming the table, key and column, with
    only the key kept; a delete is never refused; the changes around them read as they are."""
    columns = {"id": "long", "amount": "decimal(6,2)", "ratio": "float", "at": "timestamp"}
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("amount", DecimalType(6, 2)),
            StructField("ratio", FloatType()),
            StructField("at", TimestampType()),
            StructField("_version", LongType()),
            StructField("_deleted", BooleanType()),
            StructField("_problem", StringType()),
        ]
    )
    execute(
        postgres_dsn,
        "CREATE TABLE ledger_unit (id bigint PRIMARY KEY, amount numeric, ratio double precision,"
        " at timestamptz)",
    )
    install(postgres_dsn, "ledger_unit", "id", columns, "trigger")
    stream = TriggerStreamReader(ReaderOptions(postgres_dsn, "ledger_unit", "", 100, "id"), schema)
    _readers.append(stream)
    start = stream.initialOffset()
    execute(
        postgres_dsn,
        "INSERT INTO ledger_unit VALUES (1, 1.5, 0.5, '2024-03-01 10:00+00')",
        "INSERT INTO ledger_unit VALUES (2, 12345.5, 0.5, NULL)",  # 7 digits in decimal(6,2)
        "INSERT INTO ledger_unit VALUES (3, 1.234, 0.5, NULL)",  # 3 decimals
        "INSERT INTO ledger_unit VALUES (4, 'NaN', 0.5, NULL)",
        "INSERT INTO ledger_unit VALUES (5, 1, 1e300, NULL)",  # beyond a float's range
        "INSERT INTO ledger_unit VALUES (6, 1, 'Infinity', 'infinity')",
        "INSERT INTO ledger_unit VALUES (7, 9999.99, 'Infinity', NULL)",  # fits
        "DELETE FROM ledger_unit WHERE id = 2",  # a delete of a row that does not fit
    )
    read = changes(stream.read(start)[0])
    refused = {row["id"]: row["_problem"] for row in read if row["_problem"] is not None}
    assert set(refused) == {2, 3, 4, 5, 6}
    assert refused[2].startswith("table 'ledger_unit', key 2, change ")
    assert refused[2].endswith(": column 'amount' is decimal(6,2), not Decimal('12345.5')")
    assert "column 'amount' is decimal(6,2), not Decimal('1.234')" in refused[3]
    assert "column 'ratio' is float, not 1e+300" in refused[5]
    assert "column 'at' is timestamp, not 'infinity'" in refused[6]
    assert all(
        row["amount"] is None and row["ratio"] is None for row in read if row["_problem"]
    )  # nothing but the key of a refused change
    fine = [row for row in read if row["_problem"] is None]
    assert [(row["id"], row["_deleted"]) for row in fine] == [(1, False), (7, False), (2, True)]
    assert fine[0]["amount"] == Decimal("1.50") and fine[1]["amount"] == Decimal("9999.99")
    assert fine[1]["ratio"] == float("inf")
    assert fine[2]["amount"] is None  # the delete's value that does not fit: NULL


def test_bytea_reads_as_bytes_in_both_of_postgres_spellings(postgres_dsn: str) -> None:
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("blob", BinaryType()),
            StructField("day", DateType()),
            StructField("_version", LongType()),
            StructField("_deleted", BooleanType()),
            StructField("_problem", StringType()),
        ]
    )
    execute(postgres_dsn, "CREATE TABLE blobs_unit (id bigint PRIMARY KEY, blob bytea, day date)")
    install(
        postgres_dsn, "blobs_unit", "id", {"id": "long", "blob": "bytes", "day": "date"}, "trigger"
    )
    stream = TriggerStreamReader(ReaderOptions(postgres_dsn, "blobs_unit", "", 100, "id"), schema)
    _readers.append(stream)
    start = stream.initialOffset()
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute("INSERT INTO blobs_unit VALUES (1, %s, '2024-03-01')", (b"\x00\\a\xff",))
        db.execute("SET bytea_output = 'escape'")  # the writer's session spells the change
        db.execute("INSERT INTO blobs_unit VALUES (2, %s, NULL)", (b"\x00\\a\xff\x7f",))
        db.execute("INSERT INTO blobs_unit VALUES (3, '', 'infinity')")
    read = changes(stream.read(start)[0])
    assert [(row["id"], row["blob"], row["_problem"]) for row in read[:2]] == [
        (1, b"\x00\\a\xff", None),
        (2, b"\x00\\a\xff\x7f", None),
    ]
    assert read[2]["_problem"].endswith("column 'day' is date, not 'infinity'")
