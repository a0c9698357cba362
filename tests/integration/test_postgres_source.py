"""The database connector end to end (Liebig et al.): a real PostgreSQL table's rows, and every
change written to it afterwards, reach a subscriber's SQL view through a real publisher (Spark)
and a real relay; a table with ``timestamptz``, ``date``, ``numeric`` and NULLs in every column
(issue 29) arrives as ``datetime`` in UTC, ``date``, exact ``Decimal`` and ``None``, every SQL
view's rows DuckDB's answer to the view on the table's rows."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio

from fanout.client import LiveView, connect
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing.audit import duckdb_answer, same_rows
from fanout.testing.needs import need
from fanout.testing.postgres import throwaway_postgres
from fanout.testing.wait import eventually
from fanout.views.sql import parse as sql

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """
[datasets.orders]
key = "order_id"
schema = {{ order_id = "long", customer = "string", amount = "double" }}
index = "sql"
source = {{ kind = "postgres", url = "{url}", table = "shop_orders" }}

[datasets.payments]
key = "id"
index = "sql"
source = {{ kind = "postgres", url = "{url}", table = "payments" }}

[datasets.payments.schema]
id = "long"
paid_at = "timestamp"
day = "date"
amount = "decimal(12,2)"
payer = "string"
settled = "boolean"
tries = "int"
rate = "double"

[datasets.ledger]
key = "id"
index = "sql"
source = {{ kind = "postgres", url = "{url}", table = "ledger" }}

[datasets.ledger.schema]
id = "long"
amount = "decimal(6,2)"
ratio = "float"
at = "timestamp"
sig = "bytes"
"""


UTC = datetime.UTC
COLUMNS = ("id", "paid_at", "day", "amount", "payer", "settled", "tries", "rate")
PAYMENTS = [
    (1, "2024-03-01 10:00:00.123456+00", "2024-03-01", "12.50", "ada", True, 1, 0.5),
    (2, None, None, None, None, None, None, None),
    (3, "2024-03-01 12:30:00+02", "2024-02-29", "99999999.99", "bob", False, 3, None),
    (4, "2024-03-02 00:00:00+00", None, "0.01", None, None, None, float("nan")),
]
VIEWS = [
    "SELECT * FROM payments WHERE amount > 10.50",
    "SELECT * FROM payments WHERE paid_at IS NULL",
    "SELECT * FROM payments WHERE day = DATE '2024-03-01' OR day IS NULL",
    "SELECT * FROM payments WHERE paid_at > TIMESTAMPTZ '2024-03-01 10:00:00+00'",
    "SELECT * FROM payments WHERE NOT settled",
    "SELECT id, amount FROM payments WHERE amount BETWEEN 0 AND 20 OR payer LIKE 'b%'",
    "SELECT * FROM payments WHERE rate > 0.1",
    "SELECT id, paid_at FROM payments WHERE paid_at > now() - INTERVAL '100000 days'",
]


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A PostgreSQL server whose ``shop_orders`` table holds two rows before fanout starts."""
    need("initdb", "pg_ctl")
    with throwaway_postgres() as url, psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "CREATE TABLE shop_orders (order_id bigint PRIMARY KEY, customer text,"
            " amount double precision, note text)"
        )
        db.execute("INSERT INTO shop_orders VALUES (1, 'ada', 10, 'x'), (2, 'bob', 20, 'y')")
        db.execute(
            "CREATE TABLE payments (id bigint PRIMARY KEY, paid_at timestamptz, day date,"
            " amount numeric(12,2), payer text, settled boolean, tries integer,"
            " rate double precision)"
        )
        db.cursor().executemany(
            "INSERT INTO payments VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", PAYMENTS
        )
        # numeric without a precision: its values may exceed the declared decimal(6,2)
        db.execute(
            "CREATE TABLE ledger (id bigint PRIMARY KEY, amount numeric, ratio double precision,"
            " at timestamptz, sig bytea)"
        )
        db.execute(
            "INSERT INTO ledger VALUES (1, 1.50, 0.5, '2024-03-01 10:00+00', '\\x00ff'),"
            " (2, 12345.5, 0.5, NULL, NULL)"  # 7 digits: refused from the table's first read on
        )
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(
    children: Children, tmp_path: Path, database: str
) -> AsyncIterator[tuple[Child, Child]]:
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG.format(url=database))
    publisher = await children.start(
        "publisher",
        ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "state")],
        tmp_path / "publisher.log",
    )
    try:
        relay = await children.start(
            "relay", ["--publisher", publisher.url, "--port", "0"], tmp_path / "relay.log"
        )
        try:
            yield publisher, relay
        finally:
            await relay.stop()
    finally:
        await publisher.stop()


def rows(view: LiveView) -> dict[Any, dict[str, Any]]:
    return {key: dict(row) for key, row in view.rows.items()}


async def test_a_tables_rows_and_then_its_changes_reach_a_sql_view(
    deployment: tuple[Child, Child], database: str
) -> None:
    _, relay = deployment
    query = sql("SELECT order_id, amount FROM orders WHERE amount > 5")
    async with connect(relay.url) as subscriber:
        view = await subscriber.subscribe(query, dataset="orders", rate=50.0)
        # the rows it held before
        await eventually(lambda: set(view.rows), lambda keys: keys == {1, 2}, timeout=120)
        with psycopg.connect(database, autocommit=True) as db:
            db.execute("INSERT INTO shop_orders VALUES (3, 'cy', 30, NULL)")
            db.execute("UPDATE shop_orders SET amount = 1 WHERE order_id = 1")  # leaves the view
            db.execute("UPDATE shop_orders SET order_id = 20 WHERE order_id = 2")  # a new key
            db.execute("DELETE FROM shop_orders WHERE order_id = 3")
            db.execute("INSERT INTO shop_orders VALUES (4, 'dee', 40, NULL)")
        await eventually(lambda: set(view.rows), lambda keys: keys == {20, 4}, timeout=120)
        assert rows(view) == {
            20: {"order_id": 20, "amount": 20.0},
            4: {"order_id": 4, "amount": 40.0},
        }


def payments_table(database: str) -> dict[str, list[object]]:
    """The table as PostgreSQL holds it now (psycopg: datetime, date, Decimal, None)."""
    with psycopg.connect(database) as db:
        db.execute("SET TIME ZONE 'UTC'")
        found = db.execute(f"SELECT {', '.join(COLUMNS)} FROM payments").fetchall()
    return {name: [row[number] for row in found] for number, name in enumerate(COLUMNS)}


def comparison(view: LiveView, text: str, database: str) -> tuple[bool, str]:
    """Whether the view's rows are DuckDB's answer on the table now, and both, to show."""
    names, want = duckdb_answer(text, {"payments": payments_table(database)})
    got = [[row[name] for name in names] for row in view.rows.values()]
    agreed = bool(view.updates) and same_rows(view.rows.values(), names, want)
    return agreed, f"{text}: got {got}, DuckDB says {want}"


async def test_timestamps_dates_decimals_and_nulls_from_postgres(
    deployment: tuple[Child, Child], database: str
) -> None:
    _, relay = deployment
    async with connect(relay.url) as subscriber:
        views = [
            await subscriber.subscribe(sql(text), dataset="payments", rate=50.0) for text in VIEWS
        ]
        for text, view in zip(VIEWS, views, strict=True):
            await eventually(
                lambda v=view, t=text: comparison(v, t, database), lambda c: c[0], timeout=120
            )
        everything = views[1]  # paid_at IS NULL
        assert everything.rows[2] == dict.fromkeys(COLUMNS[1:], None) | {"id": 2}
        first = views[0].rows[1]
        assert first["paid_at"] == datetime.datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)
        assert first["day"] == datetime.date(2024, 3, 1)
        assert first["amount"] == Decimal("12.50") and isinstance(first["amount"], Decimal)
        assert views[0].rows[3]["amount"] == Decimal("99999999.99")  # exact, not a float
        assert views[0].rows[3]["paid_at"] == datetime.datetime(2024, 3, 1, 10, 30, tzinfo=UTC)
        with psycopg.connect(database, autocommit=True) as db:
            db.execute("UPDATE payments SET paid_at = NULL, amount = 20.25 WHERE id = 1")
            db.execute(
                "UPDATE payments SET paid_at = '2024-03-05 08:00+00', day = '2024-03-01'"
                " WHERE id = 2"
            )
            db.execute("DELETE FROM payments WHERE id = 4")
        for text, view in zip(VIEWS, views, strict=True):
            await eventually(
                lambda v=view, t=text: comparison(v, t, database), lambda c: c[0], timeout=120
            )
        assert set(views[1].rows) == {1}


def refused(publisher: Child) -> float:
    return scrape(publisher.url).get('fanout_publisher_rows_refused_total{dataset="ledger"}', 0)


async def test_a_value_that_does_not_fit_is_refused_and_the_stream_flows_on(
    deployment: tuple[Child, Child], database: str
) -> None:
    """A numeric beyond the declared decimal(6,2) (more digits, more decimals), a double beyond
    a float's range and an infinite timestamptz are refused with the table, key and column
    named, counted in the publisher's /metrics, and none of their writes applied; the changes
    around them reach the subscriber."""
    publisher, relay = deployment
    async with connect(relay.url) as subscriber:
        view = await subscriber.subscribe(sql("SELECT * FROM ledger"), dataset="ledger", rate=50)
        signed = await subscriber.subscribe(
            sql("SELECT id, sig FROM ledger WHERE length(sig) = 2 OR sig = 'ab'"), dataset="ledger"
        )
        await eventually(lambda: set(view.rows), lambda keys: keys == {1}, timeout=120)
        with psycopg.connect(database, autocommit=True) as db:
            db.execute("INSERT INTO ledger VALUES (3, 1.234, 0.5, NULL)")  # 3 decimals
            db.execute("UPDATE ledger SET amount = 99999, ratio = 2 WHERE id = 1")  # 7 digits
            db.execute("INSERT INTO ledger VALUES (4, 2, 1e300, NULL)")  # beyond a float
            db.execute("INSERT INTO ledger VALUES (5, 2, 0.25, 'infinity')")
            db.execute("INSERT INTO ledger VALUES (6, 9999.99, 'Infinity', NULL)")  # fits
            db.execute("UPDATE ledger SET amount = -0.5, sig = 'ab' WHERE id = 6")
        await eventually(lambda: set(view.rows), lambda keys: keys == {1, 6}, timeout=120)
        await eventually(lambda: view.rows[6]["amount"], lambda a: a == Decimal("-0.50"))
        assert view.rows[1] == {  # the update that did not fit changed nothing
            "id": 1,
            "amount": Decimal("1.50"),
            "ratio": 0.5,
            "at": datetime.datetime(2024, 3, 1, 10, tzinfo=UTC),
            "sig": b"\x00\xff",  # bytea as bytes
        }
        assert view.rows[6]["ratio"] == float("inf")
        await eventually(lambda: signed.rows, lambda rows: set(rows) == {1, 6})
        assert signed.rows[6] == {"id": 6, "sig": b"ab"}
    await eventually(lambda: refused(publisher), lambda n: n == 5, in_thread=True, timeout=60)
    logged = publisher.log.read_text()
    assert "table 'ledger', key 2, change " in logged
    assert ": column 'amount' is decimal(6,2), not Decimal('12345.5')" in logged
    assert "table 'ledger', key 1, change " in logged
    assert "column 'ratio' is float, not 1e+300" in logged
    assert "column 'at' is timestamp, not 'infinity'" in logged
