"""SQL views on the live path (relay/kinds/sqllens.py), sans I/O: a relay's core with a SQL
dataset in DuckDB, writes forwarded and passed on, the publisher's answers and batches played
by a brute-force model of its log and state."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import Send
from fanout.relay.data.tables import TableStore
from fanout.testing.relaycore import ready_core, take
from fanout.views.sql import parse as sql
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Batch,
    DatasetInfo,
    Error,
    Publish,
    Push,
    Subscribe,
    Written,
)

ORDERS = DatasetInfo(
    "orders", "id", {"id": "<i8", "region": "str", "amount": "<f8"}, "sql", ["id"], ["amount"]
)
CLIENT = 1
#: One DuckDB for every test here (opening one costs a tenth of a second): each relay's catalog
#: re-creates its table empty.
STORE = TableStore()
#: The views subscribed, each with the brute-force oracle of its rows over the publisher's
#: state (key -> (region, amount), amount None: NULL), and whether it takes live writes.
BIG = "SELECT * FROM orders WHERE amount > 5"
EU_DOUBLED = "SELECT id, amount * 2 AS doubled FROM orders WHERE region = 'eu'"
TOP = "SELECT * FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 2"

Order = tuple[str, float | None]


def big(state: dict[int, Order]) -> dict[int, dict[str, Any]]:
    return {
        k: {"id": k, "region": r, "amount": a}
        for k, (r, a) in state.items()
        if a is not None and a > 5
    }


def eu_doubled(state: dict[int, Order]) -> dict[int, dict[str, Any]]:
    return {
        k: {"id": k, "doubled": None if a is None else a * 2}
        for k, (r, a) in state.items()
        if r == "eu"
    }


def top(state: dict[int, Order]) -> dict[int, dict[str, Any]]:
    def rank(item: tuple[int, Order]) -> tuple[bool, float, int]:
        key, (_, amount) = item
        return (amount is None, -(amount or 0.0), key)

    chosen = sorted(state.items(), key=rank)[:2]
    return {k: {"id": k, "region": r, "amount": a} for k, (r, a) in chosen}


def columns(rows: dict[int, Order]) -> Any:
    keys = list(rows)
    amounts = [rows[k][1] for k in keys]
    return encode_columns(
        {
            "id": np.array(keys, dtype=np.int64),
            "region": np.array([rows[k][0] for k in keys], dtype=object),
            "amount": np.ma.MaskedArray(
                [0.0 if a is None else a for a in amounts], mask=[a is None for a in amounts]
            ),
        }
    )


def key_columns(keys: list[int]) -> Any:
    return encode_columns({"id": np.array(keys, dtype=np.int64)})


def records(section: Any) -> dict[int, dict[str, Any]]:
    """A push section's rows by key, NULL as None."""
    decoded = decode_columns(section)
    if not decoded:
        return {}
    lists = {
        name: [
            None if masked else value
            for value, masked in zip(
                np.ma.getdata(values).tolist(), np.ma.getmaskarray(values).tolist(), strict=True
            )
        ]
        for name, values in decoded.items()
    }
    names = list(lists)
    rows = [dict(zip(names, row, strict=True)) for row in zip(*lists.values(), strict=True)]
    return {row["id"]: row for row in rows}


class Talk:
    """A relay serving ``orders``, its subscribers' views as the client library keeps them,
    and the publisher played by a brute-force model: its log, its state, what it sent."""

    def __init__(self) -> None:
        self.core = ready_core(ORDERS, policy=Policy(grace=0.0), engine=STORE)
        self.live = self.core.serving.live
        self.snapshots: list[int] = []
        self.seq = -1
        self.now = 0.0
        self.views: dict[int, dict[int, dict[str, Any]]] = {}
        self.log: list[tuple[int, Order | None]] = []
        self.state: dict[int, Order] = {}
        self.sent: dict[int, Order] = {}
        self.waiting: list[tuple[int, dict[int, Order | None]]] = []
        self.ids = 0

    def subscribe(self, sub: int, text: str, **options: Any) -> None:
        request = Subscribe(sub, "orders", sql(text), rate=1000.0, **options)
        self.take(self.core.on_subscribe(CLIENT, request))

    def take(self, sends: list[Send]) -> list[Push]:
        return take(sends, self.snapshots, self.apply)

    def apply(self, push: Push) -> None:
        """As the client library does; a delta never enters a held key nor updates or removes
        one not held, and a push that is not provisional never updates a row to what it is."""
        rows = self.views.setdefault(push.sub, {})
        if push.full:
            rows.clear()
        for gone in records(push.left):
            assert gone in rows, (push.sub, gone, rows)
            del rows[gone]
        for section, held in ((push.entered, False), (push.updated, True)):
            sent = records(section)
            assert all((k in rows) == held for k in sent), (push.sub, sent, rows)
            if held and not push.provisional:
                assert all(rows[k] != v for k, v in sent.items()), ("twice", push.sub, sent)
            rows.update(sent)

    def round(self) -> None:
        self.now += 1.0
        self.take(self.core.pushes(self.now, lambda client: True))

    def write(self, rows: dict[int, Order | None]) -> None:
        self.ids += 1
        self.waiting.append((-self.ids, rows))
        upserts = {k: v for k, v in rows.items() if v is not None}
        deletes = [k for k, v in rows.items() if v is None]
        request = Publish(7, "orders", columns(upserts), key_columns(deletes))
        self.take(self.live.write(request, -self.ids, self.now))

    def elsewhere(self, rows: dict[int, Order | None]) -> None:
        """A write through another relay: logged, then passed on."""
        first = len(self.log) + 1
        self.log += rows.items()
        upserts = {k: v for k, v in rows.items() if v is not None}
        deletes = [k for k, v in rows.items() if v is None]
        frame = Written("orders", first, len(self.log), columns(upserts), key_columns(deletes))
        self.take(self.live.from_elsewhere(frame, self.now))

    def answer(self, accept: bool) -> None:
        upstream, rows = self.waiting.pop(0)
        if accept:
            self.log += rows.items()
            self.take(self.live.accepted(upstream, len(self.log)))
        else:
            self.take(self.live.refused(upstream))

    def micro_batch(self) -> None:
        for key, value in self.log:
            self.state.pop(key, None)
            if value is not None:
                self.state[key] = value
        upserts = {k: v for k, v in self.state.items() if self.sent.get(k) != v}
        deletes = [k for k in self.sent if k not in self.state]
        self.sent = dict(self.state)
        self.seq += 1
        frame = Batch(
            "orders",
            1,
            self.seq,
            len(self.log),
            0.0,
            columns(upserts),
            key_columns(deletes),
            self.snapshots,
        )
        self.snapshots = []
        self.take(self.core.on_batch(frame))


def started() -> Talk:
    talk = Talk()
    talk.subscribe(1, BIG)
    talk.subscribe(2, EU_DOUBLED)
    talk.subscribe(3, BIG, confirmed=True)
    talk.subscribe(4, TOP)
    talk.subscribe(5, BIG)  # the same view as 1: the write's query run once for both
    talk.log += [(1, ("eu", 7.0)), (2, ("us", 1.0))]
    talk.micro_batch()
    talk.round()
    return talk


def test_a_write_reaches_a_query_at_once_as_the_query_shows_it() -> None:
    talk = started()
    assert talk.views[2] == {1: {"id": 1, "doubled": 14.0}}
    talk.write({2: ("eu", 9.0), 3: ("us", None)})
    assert talk.views[1] == big({1: ("eu", 7.0), 2: ("eu", 9.0), 3: ("us", None)})
    assert talk.views[2] == {1: {"id": 1, "doubled": 14.0}, 2: {"id": 2, "doubled": 18.0}}
    assert talk.views[3] == big({1: ("eu", 7.0)})  # confirmed rows only
    assert talk.views[4] == top({1: ("eu", 7.0), 2: ("us", 1.0)})  # not row by row: confirmed


def test_a_refused_write_is_undone_and_a_confirmed_one_not_sent_again() -> None:
    talk = started()
    talk.write({1: ("eu", 2.0)})  # leaves BIG, stays in EU_DOUBLED with a new value
    talk.write({2: ("eu", 8.0)})
    assert 1 not in talk.views[1] and talk.views[2][1]["doubled"] == 4.0
    talk.answer(False)
    assert talk.views[1][1]["amount"] == 7.0 and talk.views[2][1]["doubled"] == 14.0
    talk.answer(True)
    talk.micro_batch()
    talk.round()
    assert talk.views[1] == talk.views[3] == big(talk.state)
    counters = talk.live.writes.counters
    assert (counters.refused, counters.confirmed) == (1, 1)
    assert counters.corrected >= 2 and counters.deduplicated >= 1


def test_a_query_that_reads_the_clock_or_limits_rows_takes_the_confirmed_path_alone() -> None:
    talk = started()
    talk.subscribe(6, "SELECT * FROM orders WHERE amount > 5 LIMIT 1")
    talk.subscribe(7, "SELECT * FROM orders WHERE amount > 5 AND now() > TIMESTAMP '2000-01-01'")
    talk.round()
    talk.write({1: ("eu", 9.0)})
    assert talk.views[1][1]["amount"] == talk.views[5][1]["amount"] == 9.0
    assert talk.views[6][1]["amount"] == talk.views[7][1]["amount"] == 7.0


def test_a_query_that_fails_on_a_written_row_shows_nothing_and_fails_by_the_confirmed_path() -> (
    None
):
    talk = Talk()
    talk.subscribe(1, "SELECT * FROM orders WHERE CAST(region AS INTEGER) > 0")
    talk.log.append((1, ("5", 7.0)))
    talk.micro_batch()
    talk.round()
    assert talk.views[1] == {1: {"id": 1, "region": "5", "amount": 7.0}}
    talk.write({2: ("eu", 7.0)})  # not a number: the query fails on it, nothing is shown
    assert talk.views[1] == {1: {"id": 1, "region": "5", "amount": 7.0}}
    talk.answer(True)
    talk.micro_batch()
    errors = [s.message() for s in talk.core.pushes(talk.now + 1, lambda client: True)]
    assert any(isinstance(frame, Error) and frame.code == "invalid_view" for frame in errors)


values = st.one_of(
    st.none(), st.tuples(st.sampled_from(["eu", "us"]), st.sampled_from([None, 1.0, 7.0]))
)
writes = st.dictionaries(st.integers(1, 3), values, min_size=1)
events = st.one_of(
    st.tuples(st.just("write"), writes),
    st.tuples(st.just("answer"), st.booleans()),
    st.tuples(st.just("elsewhere"), writes),
    st.tuples(st.just("override"), st.integers(1, 3), values),
    st.tuples(st.just("batch")),
    st.tuples(st.just("round")),
    st.tuples(st.just("late")),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(events, max_size=20))
def test_latest_sql_views_converge_to_the_publishers_state(script: list[Any]) -> None:
    """Live writes (the relay's own and others' passed on), refusals, overrides, deadlines and
    micro-batches in any order: once everything is answered and carried, every SQL view is
    its query over the publisher's state, and no delta was inconsistent on the way."""
    talk = started()
    for event in script:
        match event:
            case ("write", dict() as rows):
                talk.write(rows)
            case ("answer", bool() as accept) if talk.waiting:
                talk.answer(accept)
            case ("elsewhere", dict() as rows):
                talk.elsewhere(rows)
            case ("override", int() as key, value):
                talk.log.append((key, value))
            case ("batch",):
                talk.micro_batch()
            case ("round",):
                talk.round()
            case ("late",):
                talk.now += 60.0
                talk.take(talk.live.expire(talk.now))
    while talk.waiting:
        talk.answer(True)
    talk.micro_batch()
    talk.round()
    assert talk.views[1] == talk.views[3] == talk.views[5] == big(talk.state)
    assert talk.views[2] == eu_doubled(talk.state)
    assert talk.views[4] == top(talk.state)
    assert len(talk.live.writes) == 0
