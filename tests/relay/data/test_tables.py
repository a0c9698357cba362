"""The relay's DuckDB tables: mirroring the active buffer, preparing and running views
(relay/data/tables.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fanout.errors import InvalidView
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.relay.data.nulls import masked
from fanout.relay.data.tables import JOIN_KEY, TableStore
from fanout.views.sql import parse as sql
from fanout.wire.messages import DatasetInfo

ORDERS = DatasetInfo(
    "orders",
    "order_id",
    {"order_id": "<i8", "customer": "str", "amount": "<f8"},
    "sql",
    ["order_id", "customer", "amount"],
)
CUSTOMERS = DatasetInfo(
    "customers", "name", {"name": "str", "tier": "<i4"}, "sql", ["name", "tier"]
)
INFOS = {"orders": ORDERS, "customers": CUSTOMERS}


def buffer(info: DatasetInfo) -> DoubleBuffer:
    return DoubleBuffer(info.key, info.columns, ())


def orders(*rows: tuple[int, str | None, float]) -> dict[str, np.ndarray]:
    return {
        "order_id": np.array([r[0] for r in rows], dtype=np.int64),
        "customer": np.array([r[1] for r in rows], dtype=object),
        "amount": np.array([r[2] for r in rows]),
    }


def write(buf: DoubleBuffer, seq: int, upserts=None, deletes=(), epoch: int = 1) -> None:
    if upserts is not None:
        buf.upsert(upserts, seq)
    buf.delete(list(deletes))
    buf.mark(Stamp(epoch, seq, seq, 0.0))
    buf.swap()


@pytest.fixture
def store() -> TableStore:
    tables = TableStore()
    tables.define(ORDERS)
    tables.define(CUSTOMERS)
    return tables


def run(store: TableStore, text: str, *buffers: DoubleBuffer) -> dict[object, dict]:
    query = store.prepare(sql(text), INFOS)
    for name, buf in zip(query.datasets, buffers, strict=True):
        store.sync(name, buf)
    result = store.evaluate(query, tuple(b.generation for b in buffers))
    columns = masked(result.rows)  # NULL as None
    names = list(columns)
    rows = zip(*(columns[n].tolist() for n in names), strict=True)
    return {
        key: dict(zip(names, row, strict=True)) for key, row in zip(result.keys, rows, strict=True)
    }


def test_a_query_over_one_table_is_keyed_by_the_dataset_key(store: TableStore) -> None:
    buf = buffer(ORDERS)
    write(buf, 0, orders((1, "ada", 10.0), (2, "bob", 99.0), (3, "ada", 50.0)))
    got = run(store, "SELECT amount FROM orders WHERE customer = 'ada'", buf)
    assert got == {1: {"order_id": 1, "amount": 10.0}, 3: {"order_id": 3, "amount": 50.0}}
    query = store.prepare(sql("SELECT amount FROM orders"), INFOS)
    assert (query.key, query.columns) == ("order_id", ("order_id", "amount"))


def test_the_mirror_follows_upserts_and_deletes_incrementally(store: TableStore) -> None:
    buf = buffer(ORDERS)
    write(buf, 0, orders((1, "ada", 10.0), (2, "bob", 99.0)))
    assert set(run(store, "SELECT * FROM orders", buf)) == {1, 2}
    write(buf, 1, orders((2, "bob", 5.0), (4, "cy", 1.0)), deletes=[1])
    got = run(store, "SELECT * FROM orders", buf)
    assert got == {
        2: {"order_id": 2, "customer": "bob", "amount": 5.0},
        4: {"order_id": 4, "customer": "cy", "amount": 1.0},
    }
    assert (store.counters.syncs, store.counters.reloads) == (2, 1)  # the second one in place


def test_a_new_epoch_reloads_the_table(store: TableStore) -> None:
    buf = buffer(ORDERS)
    write(buf, 5, orders((1, "ada", 10.0)))
    run(store, "SELECT * FROM orders", buf)
    buf.restart_changes()
    write(buf, 0, orders((2, "bob", 1.0)), deletes=[1], epoch=2)
    assert set(run(store, "SELECT * FROM orders", buf)) == {2}
    assert store.counters.reloads == 2


def test_a_join_is_keyed_by_the_keys_of_its_rows(store: TableStore) -> None:
    left, right = buffer(ORDERS), buffer(CUSTOMERS)
    write(left, 0, orders((1, "ada", 10.0), (2, "bob", 99.0)))
    write(right, 0, {"name": np.array(["ada"], dtype=object), "tier": np.array([3], np.int32)})
    text = "SELECT o.amount, c.tier FROM orders o LEFT JOIN customers c ON o.customer = c.name"
    got = run(store, text, right, left)  # datasets are sorted: customers, orders
    assert got['{"o":1,"c":"ada"}'] == {JOIN_KEY: '{"o":1,"c":"ada"}', "amount": 10.0, "tier": 3}
    unmatched = got['{"o":2,"c":null}']
    assert unmatched["amount"] == 99.0
    assert unmatched["tier"] is None  # a NULL number is NULL, not NaN


def test_identical_queries_are_evaluated_once_per_state(store: TableStore) -> None:
    buf = buffer(ORDERS)
    write(buf, 0, orders((1, "ada", 10.0)))
    run(store, "SELECT * FROM orders", buf)
    run(store, "select *   from orders", buf)  # the same view once normalised
    assert (store.counters.evaluations, store.counters.shared) == (1, 1)
    write(buf, 1, orders((1, "ada", 11.0)))
    run(store, "SELECT * FROM orders", buf)
    assert store.counters.evaluations == 2


def test_updated_rows_have_new_digests(store: TableStore) -> None:
    buf = buffer(ORDERS)
    write(buf, 0, orders((1, "ada", 10.0), (2, "bob", 1.0)))
    query = store.prepare(sql("SELECT * FROM orders"), INFOS)
    store.sync("orders", buf)
    before = store.evaluate(query, (buf.generation,)).digests
    write(buf, 1, orders((1, "ada", 12.0)))
    store.sync("orders", buf)
    after = store.evaluate(query, (buf.generation,)).digests
    assert (before != after).tolist() == [True, False]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT * FROM nope", "unknown table 'nope'"),
        ("SELECT zz FROM orders", 'column "zz" not found'),
        ("SELECT o.order_id, c.name AS order_id FROM orders o, customers c", "named 'order_id'"),
        ("SELECT amount AS order_id FROM orders", "must be the dataset's key column"),
        ("SELECT o.amount AS _key FROM orders o, customers c", "the key of joined rows"),
    ],
)
def test_views_that_do_not_fit_the_tables_are_refused(
    store: TableStore, text: str, message: str
) -> None:
    with pytest.raises(InvalidView, match=message):
        store.prepare(sql(text), INFOS)


def test_distinct_rows_are_keyed_by_their_content(store: TableStore) -> None:
    buf = buffer(ORDERS)
    write(buf, 0, orders((1, "ada", 10.0), (2, "ada", 99.0), (3, "bob", 1.0)))
    got = run(store, "SELECT DISTINCT customer FROM orders", buf)
    assert sorted(got) == ['{"customer":"ada"}', '{"customer":"bob"}']


def test_results_of_views_no_longer_subscribed_are_forgotten(store: TableStore) -> None:
    buf = buffer(ORDERS)
    write(buf, 0, orders((1, "ada", 10.0)))
    kept, dropped = sql("SELECT * FROM orders"), sql("SELECT amount FROM orders")
    run(store, str(kept), buf)
    run(store, str(dropped), buf)
    store.forget([kept])
    run(store, str(kept), buf)
    run(store, str(dropped), buf)
    assert (store.counters.evaluations, store.counters.shared) == (3, 1)


def test_a_query_past_the_time_limit_is_stopped_and_fails_once_per_state() -> None:
    store = TableStore(query_timeout=0.2)
    store.define(ORDERS)
    buf = buffer(ORDERS)
    many = 30_000  # a join on no key: 450 million pairs, far longer than the limit
    ids = np.arange(many, dtype=np.int64)
    customers = np.full(many, "ada", dtype=object)
    write(buf, 0, {"order_id": ids, "customer": customers, "amount": ids * 1.0})
    text = "SELECT a.amount FROM orders a JOIN orders b ON a.amount < b.amount"
    with pytest.raises(InvalidView, match=r"ran longer than 0\.2 s on the relay and was stopped"):
        run(store, text, buf)
    assert store.watchdog.interrupted == 1
    with pytest.raises(InvalidView, match=r"ran longer than 0\.2 s"):
        run(store, text, buf)  # the same rows: it fails without running again
    assert store.watchdog.interrupted == 1
    assert (store.counters.evaluations, store.counters.shared) == (0, 0)  # no result to share
    got = run(store, "SELECT amount FROM orders WHERE order_id = 7", buf)  # the store still works
    assert got == {7: {"order_id": 7, "amount": 7.0}}
