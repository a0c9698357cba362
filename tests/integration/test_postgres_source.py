"""The database connector end to end (Liebig et al.): a real PostgreSQL table's rows, and every
change written to it afterwards, reach a subscriber's SQL view through a real publisher (Spark)
and a real relay."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio

from fanout.client import LiveView, connect
from fanout.launch import Child, start
from fanout.testing.postgres import MISSING, postgres_binaries, throwaway_postgres
from fanout.testing.wait import eventually
from fanout.views.sql import parse as sql

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """
[datasets.orders]
key = "order_id"
schema = {{ order_id = "long", customer = "string", amount = "double" }}
index = "sql"
source = {{ kind = "postgres", url = "{url}", table = "shop_orders" }}
"""


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A PostgreSQL server whose ``shop_orders`` table holds two rows before fanout starts."""
    if postgres_binaries() is None:
        pytest.skip(MISSING)
    with throwaway_postgres() as url, psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "CREATE TABLE shop_orders (order_id bigint PRIMARY KEY, customer text,"
            " amount double precision, note text)"
        )
        db.execute("INSERT INTO shop_orders VALUES (1, 'ada', 10, 'x'), (2, 'bob', 20, 'y')")
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(tmp_path: Path, database: str) -> AsyncIterator[tuple[Child, Child]]:
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG.format(url=database))
    publisher = await start(
        "publisher",
        ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "state")],
        tmp_path / "publisher.log",
    )
    try:
        relay = await start(
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
