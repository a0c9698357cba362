"""Relay conversations with SQL, topic and object-path views, sans I/O (relay/kinds/keyed.py,
sql.py, topic.py, path.py, through relay/core/relaycore.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core import release
from fanout.relay.core.lifecycle import Phase
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, Send
from fanout.relay.core.upstream import Primitive
from fanout.relay.data.tables import QUERY_TIMEOUT, TableStore
from fanout.relay.kinds.keyed import KeyedKind
from fanout.testing.catalog import sensors
from fanout.testing.relaycore import ready_core
from fanout.views import Box
from fanout.views.objects import parse as path
from fanout.views.sql import SqlBox
from fanout.views.sql import parse as sql
from fanout.views.topic import matches
from fanout.views.topic import parse as topic
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    DatasetInfo,
    Error,
    NoUpdate,
    Push,
    Release,
    Subscribe,
    Subscribed,
    Transform,
    Unsubscribe,
)

ORDERS = DatasetInfo(
    "orders",
    "order_id",
    {"order_id": "<i8", "customer": "str", "amount": "<f8"},
    "sql",
    ["order_id", "customer", "amount"],
)
CUSTOMERS = DatasetInfo(
    "customers", "name", {"name": "str", "tier": "<i8"}, "sql", ["name", "tier"]
)
SENSORS = sensors()
OBJECTS = DatasetInfo("objects", "path", {"path": "str", "state": "str"}, "path", ["path"])
DATASETS = (ORDERS, CUSTOMERS, SENSORS, OBJECTS)
CLIENT = 1


class Conversation:
    """A relay with the four datasets, a client, and the publisher's side played by hand."""

    def __init__(self, query_timeout: float = QUERY_TIMEOUT, **options: Any) -> None:
        engine = TableStore(query_timeout)
        self.core = ready_core(*DATASETS, policy=Policy(grace=0.0), engine=engine, **options)
        self.seqs: dict[str, int] = {}
        self.snapshots: dict[str, list[int]] = {}
        self.now = 0.0
        self.views: dict[int, dict[Any, dict[str, Any]]] = {}
        self.keys: dict[int, str] = {}

    def subscribe(
        self, sub: int, dataset: str, view: object, client: int = CLIENT, **options: Any
    ) -> list[object]:
        request = Subscribe(sub, dataset, view, rate=1000.0, **options)  # type: ignore[arg-type]
        return self.take(self.core.on_subscribe(client, request))

    def take(self, sends: list[Send]) -> list[object]:
        """Frames for the client; acquires are remembered for the next batch's snapshots."""
        out = []
        for send in sends:
            frame = send.message()
            if send.to == UPSTREAM:
                if isinstance(frame, Acquire):
                    self.snapshots.setdefault(frame.dataset, []).append(frame.prim)
                continue
            if isinstance(frame, Subscribed):
                self.keys[frame.sub] = frame.key
            out.append(frame)
        return out

    def batch(self, dataset: str, upserts: dict[str, list] | None = None, deletes=()) -> None:
        # Not the kit's ``batch``: these datasets are keyed by strings too, and each column
        # takes its dataset's dtype.
        info = {d.name: d for d in DATASETS}[dataset]
        seq = self.seqs[dataset] = self.seqs.get(dataset, -1) + 1
        columns = {
            name: np.array(
                values, dtype=object if info.columns[name] == "str" else info.columns[name]
            )
            for name, values in (upserts or {}).items()
        }
        keys = np.array(
            list(deletes), dtype=object if info.columns[info.key] == "str" else np.int64
        )
        snapshots = self.snapshots.pop(dataset, [])
        frame = Batch(
            dataset,
            1,
            seq,
            seq,
            0.0,
            encode_columns(columns),
            encode_columns({info.key: keys}),
            snapshots,
        )
        self.take(self.core.on_batch(frame))

    def push(self) -> list[object]:
        """One round of pushes, applied to the client's views as the client library does."""
        self.now += 1.0
        frames = self.take(self.core.pushes(self.now, lambda client: True))
        for frame in frames:
            if isinstance(frame, Push):
                self.apply(frame)
        return frames

    def apply(self, push: Push) -> None:
        rows = self.views.setdefault(push.sub, {})
        key = self.keys[push.sub]
        if push.full:
            rows.clear()
        for gone in decode_columns(push.left).get(key, np.empty(0)).tolist():
            del rows[gone]
        for columns in (decode_columns(push.entered), decode_columns(push.updated)):
            names = list(columns)
            for values in zip(*(columns[n].tolist() for n in names), strict=True):
                row = dict(zip(names, values, strict=True))
                rows[row[key]] = row


def orders(*rows: tuple[int, str, float]) -> dict[str, list]:
    return {
        "order_id": [r[0] for r in rows],
        "customer": [r[1] for r in rows],
        "amount": [r[2] for r in rows],
    }


def test_a_sql_view_acquires_its_primitive_and_gets_row_deltas() -> None:
    talk = Conversation()
    (reply,) = talk.subscribe(1, "orders", sql("SELECT amount FROM orders WHERE amount > 10"))
    assert reply == Subscribed(1, "order_id", ["order_id", "amount"])
    (prim,) = talk.core.upstream.views("orders")
    assert isinstance(prim, SqlBox) and prim.columns is None  # widened to whole rows
    talk.batch("orders", orders((1, "ada", 5.0), (2, "bob", 20.0), (3, "ada", 30.0)))
    (first,) = talk.push()
    assert isinstance(first, Push) and first.full
    assert talk.views[1] == {2: {"order_id": 2, "amount": 20.0}, 3: {"order_id": 3, "amount": 30.0}}
    talk.batch("orders", orders((1, "ada", 50.0), (3, "ada", 31.0)), deletes=[2])
    (second,) = talk.push()
    assert decode_columns(second.updated)["order_id"].tolist() == [3]  # type: ignore[attr-defined]
    assert talk.views[1] == {1: {"order_id": 1, "amount": 50.0}, 3: {"order_id": 3, "amount": 31.0}}
    talk.batch("orders", orders((2, "bob", 1.0)))  # outside the view
    assert talk.push() == [NoUpdate(1, 1, 2, 2)]


def test_a_join_reads_two_datasets_and_is_pushed_when_either_changes() -> None:
    talk = Conversation()
    text = "SELECT o.amount, c.tier FROM orders o JOIN customers c ON o.customer = c.name"
    (reply,) = talk.subscribe(1, "orders", sql(text))
    assert reply == Subscribed(1, "_key", ["_key", "amount", "tier"])
    talk.batch("orders", orders((1, "ada", 5.0), (2, "bob", 20.0)))
    assert talk.push() == []  # customers not held yet: not servable
    talk.batch("customers", {"name": ["ada"], "tier": [1]})
    talk.push()
    assert [row["tier"] for row in talk.views[1].values()] == [1]
    talk.batch("customers", {"name": ["ada", "bob"], "tier": [2, 3]})
    (push,) = talk.push()
    assert isinstance(push, Push)
    assert sorted((r["amount"], r["tier"]) for r in talk.views[1].values()) == [(5.0, 2), (20.0, 3)]


def test_identical_queries_share_one_evaluation() -> None:
    talk = Conversation()
    for sub in (1, 2, 3):
        talk.subscribe(sub, "orders", sql("SELECT * FROM orders WHERE customer = 'ada'"))
    talk.batch("orders", orders((1, "ada", 5.0)))
    assert len(talk.push()) == 3
    stats = talk.core.stats()
    assert (stats["sql_evaluations"], stats["bodies_shared"]) == (1, 2)


def test_a_topic_filter_gets_the_matching_retained_messages() -> None:
    talk = Conversation()
    (reply,) = talk.subscribe(1, "sensors", topic("a/+/c"))
    assert reply == Subscribed(1, "topic", ["topic", "value"])
    talk.subscribe(2, "sensors", topic("$share/g/a/#"))
    assert talk.core.upstream.views("sensors") == [topic("a/+/c"), topic("a/#")]
    talk.batch("sensors", {"topic": ["a/b/c", "a/x/c", "a/b/d", "z/b/c"], "value": [1, 2, 3, 4]})
    talk.push()
    assert sorted(talk.views[1]) == ["a/b/c", "a/x/c"]
    assert sorted(talk.views[2]) == ["a/b/c", "a/b/d", "a/x/c"]
    talk.batch("sensors", {"topic": ["a/q/c"], "value": [5.0]}, deletes=["a/b/c"])
    talk.push()
    assert sorted(talk.views[1]) == ["a/q/c", "a/x/c"]


def test_an_object_path_view_gets_its_objects_and_attributes() -> None:
    talk = Conversation()
    (reply,) = talk.subscribe(1, "objects", path("/cars/.all?f=state"))
    assert reply == Subscribed(1, "path", ["path", "state"])
    (prim,) = talk.core.upstream.views("objects")
    assert prim == path("/cars/.all")  # whole objects upstream
    talk.subscribe(2, "objects", path("/cars/.all?f=state=on"))
    talk.batch(
        "objects", {"path": ["/cars/c1", "/cars/c2", "/cars/c2/door"], "state": ["on", "off", "x"]}
    )
    talk.push()
    assert sorted(talk.views[1]) == ["/cars/c1", "/cars/c2"]
    assert sorted(talk.views[2]) == ["/cars/c1"]
    talk.batch("objects", {"path": ["/cars/c2"], "state": ["on"]})
    talk.push()
    assert sorted(talk.views[2]) == ["/cars/c1", "/cars/c2"]


@pytest.mark.parametrize(
    ("dataset", "view", "transform", "code", "message"),
    [
        ("orders", sql("SELECT * FROM nope"), None, "invalid_view", "unknown table 'nope'"),
        ("orders", sql("SELECT zz FROM orders"), None, "invalid_view", '"zz" not found'),
        ("orders", sql("SELECT * FROM customers"), None, "invalid_view", "does not read dataset"),
        ("orders", topic("a/b"), None, "invalid_view", "takes SQL queries"),
        ("sensors", Box((0, 0), (1, 1)), None, "invalid_view", "takes MQTT topic filters"),
        ("objects", topic("a"), None, "invalid_view", "takes object paths"),
        (
            "orders",
            sql("SELECT * FROM orders"),
            Transform(columns=["amount"]),
            "invalid_transform",
            "SELECT list",
        ),
        ("sensors", topic("a"), Transform(relative_to="a"), "invalid_transform", "no coordinates"),
    ],
)
def test_bad_subscriptions_get_an_error_and_others_go_on(
    dataset: str, view: object, transform: Transform | None, code: str, message: str
) -> None:
    talk = Conversation()
    talk.subscribe(1, "sensors", topic("a/#"))
    (error,) = talk.subscribe(2, dataset, view, transform=transform)
    assert isinstance(error, Error) and (error.code, error.ref) == (code, 2)
    assert message in error.message
    talk.batch("sensors", {"topic": ["a/b"], "value": [1.0]})
    (push,) = talk.push()
    assert isinstance(push, Push) and push.sub == 1


def test_a_query_failing_on_the_rows_ends_only_its_subscription() -> None:
    talk = Conversation()
    talk.subscribe(1, "orders", sql("SELECT CAST(customer AS INTEGER) AS n FROM orders"))
    talk.subscribe(2, "orders", sql("SELECT * FROM orders"))
    talk.batch("orders", orders((1, "ada", 5.0)))
    frames = talk.push()
    (error,) = [f for f in frames if isinstance(f, Error)]
    assert (error.code, error.ref) == ("invalid_view", 1)
    assert [f.sub for f in frames if isinstance(f, Push)] == [2]  # type: ignore[attr-defined]
    assert len(talk.core.downstream) == 1


def test_a_query_past_the_time_limit_ends_only_its_subscription() -> None:
    talk = Conversation(query_timeout=0.2)
    endless = "SELECT a.amount FROM orders a JOIN orders b ON a.amount < b.amount"
    talk.subscribe(1, "orders", sql(endless))  # 450 million pairs of 30,000 orders
    talk.subscribe(2, "orders", sql("SELECT * FROM orders WHERE order_id < 3"))
    talk.batch("orders", orders(*((n, "ada", float(n)) for n in range(30_000))))
    frames = talk.push()
    (error,) = [f for f in frames if isinstance(f, Error)]
    assert (error.code, error.ref) == ("invalid_view", 1)
    assert "ran longer than 0.2 s on the relay and was stopped" in error.message
    assert [f.sub for f in frames if isinstance(f, Push)] == [2]  # type: ignore[attr-defined]
    assert sorted(talk.views[2]) == [0, 1, 2]
    assert len(talk.core.downstream) == 1


def test_a_connection_past_its_sql_share_is_put_off_while_others_are_served() -> None:
    talk = Conversation(sql_share=1e-6, sql_burst=1e-9)  # any query overdraws it for > 1 s
    talk.subscribe(1, "orders", sql("SELECT * FROM orders WHERE amount > 10"))
    talk.subscribe(2, "sensors", topic("a/#"))  # the same connection's topic view
    talk.batch("orders", orders((1, "ada", 20.0)))
    talk.batch("sensors", {"topic": ["a/1"], "value": [1.0]})
    assert sorted(f.sub for f in talk.push() if isinstance(f, Push)) == [1, 2]  # type: ignore[attr-defined]
    talk.subscribe(3, "orders", sql("SELECT * FROM orders WHERE amount > 5"), client=2)
    talk.batch("orders", orders((2, "bob", 30.0)))
    talk.batch("sensors", {"topic": ["a/2"], "value": [2.0]})
    # Client 1 spent its SQL time: its SQL view waits; its topic view and client 2 do not.
    assert sorted(f.sub for f in talk.push() if isinstance(f, Push)) == [2, 3]  # type: ignore[attr-defined]
    assert talk.core.stats()["sql_pushes_put_off"] == 1
    put_off = talk.core.downstream.get((CLIENT, 1))
    assert put_off is not None and put_off.phase is Phase.PUT_OFF
    paid_back = talk.core.next_wakeup(talk.now)
    assert paid_back is not None and paid_back > talk.now + 1.0
    talk.now = paid_back - 1.0  # ``push`` adds a second
    assert [f.sub for f in talk.push() if isinstance(f, Push)] == [1]  # type: ignore[attr-defined]
    assert sorted(talk.views[1]) == [1, 2]  # the newest rows: nothing of them was lost
    assert put_off.phase is Phase.LIVE


def test_an_every_sql_view_past_its_share_is_put_off_then_gets_every_seq() -> None:
    talk = Conversation(sql_share=1e-6, sql_burst=1e-9)  # any query overdraws it for > 1 s
    query = sql("SELECT order_id, amount FROM orders WHERE amount > 10")
    talk.subscribe(1, "orders", query, mode="every")
    talk.batch("orders", orders((1, "ada", 20.0)))
    (first,) = talk.push()
    assert isinstance(first, Push) and first.full and first.seq == 0
    for seq in (1, 2, 3):
        talk.batch("orders", orders((seq + 1, "bob", 30.0 + seq)))
        assert talk.push() == []  # put off: its connection spent its SQL time
    assert talk.core.stats()["sql_pushes_put_off"] == 1  # then it waits on its timer
    seqs = []
    while len(seqs) < 3:
        paid_back = talk.core.next_wakeup(talk.now)
        assert paid_back is not None
        talk.now = max(talk.now, paid_back - 1.0)  # ``push`` adds a second
        seqs += [f.seq for f in talk.push() if isinstance(f, Push | NoUpdate)]  # type: ignore[union-attr]
    assert seqs == [1, 2, 3]  # every seq, in order, none lost while it waited
    assert sorted(talk.views[1]) == [1, 2, 3, 4]


def test_unneeded_primitives_are_released_and_their_rows_pruned() -> None:
    talk = Conversation()
    talk.subscribe(1, "sensors", topic("a/#"))
    talk.subscribe(2, "sensors", topic("b/#"))
    talk.batch("sensors", {"topic": ["a/1", "b/1"], "value": [1.0, 2.0]})
    talk.push()
    talk.take(talk.core.on_unsubscribe(CLIENT, Unsubscribe(2)))
    sends = talk.core.housekeeping(100.0)
    (release,) = [s.frame for s in sends]
    assert isinstance(release, Release) and release.prim == 2
    talk.batch("sensors")
    talk.push()
    assert talk.core.datasets["sensors"].table.keys.tolist() == ["a/1"]


def test_unneeded_is_answered_anew_only_when_primitives_or_needs_change(monkeypatch) -> None:
    answered: list[int] = []
    answer = release.unneeded

    def counted(prims, needs):
        answered.append(len(prims))
        return answer(prims, needs)

    monkeypatch.setattr("fanout.relay.kinds.keyed.release.unneeded", counted)
    kinds = Conversation().core.parts.kinds
    sensors, objects = kinds["sensors"], kinds["objects"]
    assert isinstance(sensors, KeyedKind) and isinstance(objects, KeyedKind)
    wide, narrow = Primitive(1, "s", topic("a/#"), ready=True), Primitive(2, "s", topic("a/1"))
    needs = [topic("a/1")]
    assert sensors.unneeded([narrow, wide], needs) == [narrow]  # not ready: of no use
    assert sensors.unneeded([wide, narrow], needs) == [narrow]
    assert answered == [2]
    narrow.ready = True
    assert sensors.unneeded([wide, narrow], needs) == [wide]  # the oldest goes first
    assert sensors.unneeded([wide, narrow], [*needs, topic("a/2")]) == [narrow]
    assert objects.unneeded([wide, narrow], [*needs, topic("a/2")]) == [narrow]  # per dataset
    assert answered == [2, 2, 2, 2]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("SELECT o.amount FROM orders o JOIN customers c ON o.customer = c.name", "several"),
        ("SELECT DISTINCT customer FROM orders", "DISTINCT"),
        ("SELECT * FROM orders ORDER BY amount LIMIT 3", "limits"),
        ("SELECT DISTINCT ON (customer) * FROM orders ORDER BY customer, amount", "DISTINCT"),
        ("SELECT * FROM orders OFFSET 2", "limits"),
    ],
)
def test_mode_every_refuses_sql_views_that_do_not_decide_row_by_row(text, reason) -> None:
    (error,) = Conversation().subscribe(1, "orders", sql(text), mode="every")
    assert isinstance(error, Error) and error.code == "invalid_view"
    assert reason in error.message and "mode 'latest'" in error.message


def test_mode_every_serves_topics_paths_and_row_by_row_sql() -> None:
    talk = Conversation()
    query = sql("SELECT order_id, amount * 2 AS doubled FROM orders WHERE customer = 'ada'")
    replies = [
        talk.subscribe(1, "orders", query, mode="every"),
        talk.subscribe(2, "sensors", topic("a/#"), mode="every"),
        talk.subscribe(3, "objects", path("/cars/.all"), mode="every"),
    ]
    assert all(isinstance(reply, Subscribed) for (reply,) in replies)


# -- the delta sequence of a keyed view against a brute-force oracle ---------------------------

TOPICS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map("/".join)
CHANGES = st.lists(
    st.tuples(st.dictionaries(TOPICS, st.integers(0, 9), max_size=5), st.sets(TOPICS, max_size=3)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(CHANGES, st.sampled_from(["a/+", "#", "a/#", "+/b/+", "c"]), st.integers(0, 9))
def test_applying_every_push_reproduces_the_oracle_after_each_epoch(
    changes: list[tuple[dict[str, int], set[str]]], text: str, threshold: int
) -> None:
    talk = Conversation()
    talk.subscribe(1, "sensors", topic(text))
    talk.subscribe(3, "orders", sql(f"SELECT * FROM orders WHERE amount >= {threshold}"))
    retained: dict[str, int] = {}
    ids: dict[str, int] = {}  # orders keyed by a number per topic
    for upserts, deletes in changes:
        deletes -= set(upserts)
        retained.update(upserts)
        for gone in deletes:
            retained.pop(gone, None)
        talk.batch("sensors", {"topic": list(upserts), "value": list(upserts.values())}, deletes)
        rows = [(ids.setdefault(t, len(ids)), t, float(v)) for t, v in upserts.items()]
        talk.batch("orders", orders(*rows), [ids.setdefault(t, len(ids)) for t in deletes])
        talk.push()
        want = {t: {"topic": t, "value": float(v)} for t, v in retained.items() if matches(text, t)}
        assert talk.views.get(1, {}) == want
        held = {row["customer"]: row["amount"] for row in talk.views.get(3, {}).values()}
        assert held == {t: float(v) for t, v in retained.items() if v >= threshold}
