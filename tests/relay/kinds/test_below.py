"""What each dataset kind answers for relays below (``DatasetKind.primitive``, ``holds``,
``contents``; ``tiers`` asks): which primitives a relay below may acquire, and which rows a
primitive holds, in a change and in the relay's state.

Each kind is checked against a brute-force oracle written here, row by row: coordinates compared
with a box's bounds, MQTT filters matched level by level, object paths split at their last
``/``, a SQL bound compared in Python with NULL selecting nothing — what the publisher's matching
would select.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import RelayCore
from fanout.testing import oracle
from fanout.testing.catalog import AGENTS, sensors
from fanout.testing.relaycore import ready_core
from fanout.views import Box, View
from fanout.views.entity import Entity
from fanout.views.objects import ObjectPath
from fanout.views.objects import parse as path
from fanout.views.sql import SqlBox
from fanout.views.sql import parse as sql
from fanout.views.topic import TopicFilter
from fanout.views.topic import parse as topic
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Batch, DatasetInfo

SENSORS = sensors()
CARS = DatasetInfo("cars", "path", {"path": "str", "rpm": "<i8"}, "path", ["path"])
PPS = DatasetInfo(
    "pps", "cell", {"cell": "str", "object": "str", "attr": "str"}, "objects", ["object"]
)
ORDERS = DatasetInfo(
    "orders",
    "order_id",
    {"order_id": "<i8", "amount": "<f8", "customer": "str"},
    "sql",
    ["amount", "customer"],
    nullable=["amount"],
)


def relay(info: DatasetInfo, rows: dict[str, Any]) -> RelayCore:
    """A relay holding ``rows`` of dataset ``info`` in its active state."""
    core = ready_core(info, policy=Policy(grace=0.0))
    core.on_batch(Batch(info.name, 1, 0, 0, 0.0, encode_columns(rows), encode_columns({})))
    core.end_epoch()
    return core


def check(info: DatasetInfo, rows: dict[str, Any], prims: list[View], oracle: Callable) -> None:
    """``holds`` and ``contents`` (active and a given table) select what ``oracle(row)`` says
    for some primitive."""
    core = relay(info, rows)
    kind = core.parts.kinds[info.name]
    held = [kind.primitive(view) for view in prims]
    names = list(rows)
    table = [dict(zip(names, values, strict=True)) for values in zip(*rows.values(), strict=True)]
    want = sorted(row[info.key] for row in table if any(oracle(view, row) for view in held))
    state = core.datasets[info.name].table
    mask = kind.holds(held, state.columns)
    assert sorted(state.keys[mask].tolist()) == want
    assert sorted(kind.contents(held)[info.key].tolist()) == want
    assert sorted(kind.contents(held, state)[info.key].tolist()) == want


coordinate = st.integers(0, 20).map(float)


@st.composite
def boxes(draw: st.DrawFn) -> Box:
    x, y = draw(coordinate), draw(coordinate)
    return Box((x, y), (x + draw(st.integers(0, 10)), y + draw(st.integers(0, 10))))


def in_box(view: View, row: dict[str, Any]) -> bool:
    """Inside the box, coordinate by coordinate; an entity: that key's row."""
    if isinstance(view, Entity):
        return bool(row["id"] == view.key)
    assert isinstance(view, Box)
    return view.lo[0] <= row["x"] <= view.hi[0] and view.lo[1] <= row["y"] <= view.hi[1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(coordinate, coordinate), max_size=20),
    st.lists(boxes() | st.integers(0, 25).map(Entity), max_size=3),
)
def test_a_region_holds_the_rows_inside_it_and_an_entity_its_row(
    points: list[tuple[float, float]], prims: list[View]
) -> None:
    rows = {
        "id": np.arange(len(points), dtype=np.int64),
        "x": np.array([p[0] for p in points]),
        "y": np.array([p[1] for p in points]),
    }
    check(AGENTS, rows, list(prims), in_box)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(coordinate, coordinate), min_size=8, max_size=40),
    st.lists(st.lists(boxes() | st.integers(0, 45).map(Entity), max_size=20), max_size=4),
)
def test_one_holder_answers_each_relay_below_as_holds_would(
    points: list[tuple[float, float]], relays: list[list[View]]
) -> None:
    """``holder``: a batch's rows prepared once (sorted by x for unions of 8 or more regions),
    then asked of several relays' primitives, each answer the brute-force one."""
    rows = {
        "id": np.arange(len(points), dtype=np.int64),
        "x": np.array([p[0] for p in points]),
        "y": np.array([p[1] for p in points]),
    }
    core = relay(AGENTS, rows)
    kind = core.parts.kinds[AGENTS.name]
    holds = kind.holder(rows)
    table = [{"id": i, "x": x, "y": y} for i, (x, y) in enumerate(points)]
    for prims in relays:
        held = [kind.primitive(view) for view in prims]
        want = [any(in_box(view, row) for view in held) for row in table]
        assert holds(held).tolist() == want


LEVELS = (
    st.lists(st.sampled_from(["a", "b", "", "$s"]), min_size=1, max_size=3)
    .map("/".join)
    .filter(bool)  # "" is no topic name
)
FILTERS = st.sampled_from(["a/+", "a/#", "#", "+/b", "a/b", "+", "$s/#", "+/+/+", "$share/g/a/#"])


def filter_matches(view: View, row: dict[str, Any]) -> bool:
    """MQTT 3.1.1 section 4.7, level by level."""
    assert isinstance(view, TopicFilter)
    text, name = view.topic_filter, row["topic"]
    assert not text.startswith("$share/")  # the primitive is the filter without its group
    if text[0] in "+#" and name.startswith("$"):
        return False
    return oracle.filter_matches(text, name)


@settings(max_examples=60, deadline=None)
@given(st.lists(LEVELS, max_size=12, unique=True), st.lists(FILTERS, max_size=3))
def test_a_topic_filter_holds_the_topics_it_matches(names: list[str], filters: list[str]) -> None:
    rows = {"topic": np.array(names, dtype=object), "value": np.ones(len(names))}
    check(SENSORS, rows, [topic(text) for text in filters], filter_matches)


DIRS = st.sampled_from(["/c", "/c/2", "/t"])
NAMES = st.sampled_from(["1", "2", "door"])
PATHS = st.tuples(DIRS, NAMES).map("/".join)
OPENS = st.one_of(
    st.tuples(DIRS, st.just(".all")).map("/".join),
    PATHS,
    st.tuples(PATHS, st.sampled_from(["?delta", "?f=rpm>4", "?delta,f=rpm"])).map("".join),
)


def in_scope(view: View, row: dict[str, Any], column: str) -> bool:
    """Options are dropped upstream; ``dir/.all`` holds the objects directly in ``dir``."""
    assert isinstance(view, ObjectPath)
    directory, _, name = row[column].rpartition("/")
    wanted_dir, _, wanted = view.object_path.rpartition("/")
    assert "?" not in wanted  # the primitive holds whole objects
    return directory == wanted_dir and wanted in (".all", name)


@settings(max_examples=60, deadline=None)
@given(st.lists(PATHS, max_size=12, unique=True), st.lists(OPENS, max_size=3))
def test_an_object_path_holds_the_objects_in_its_scope(names: list[str], opens: list[str]) -> None:
    rows = {"path": np.array(names, dtype=object), "rpm": np.arange(len(names), dtype=np.int64)}
    check(CARS, rows, [path(text) for text in opens], lambda v, r: in_scope(v, r, "path"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(PATHS, NAMES), max_size=12, unique=True), st.lists(OPENS, max_size=3))
def test_an_objects_path_holds_every_cell_of_the_objects_in_its_scope(
    cells: list[tuple[str, str]], opens: list[str]
) -> None:
    rows = {
        "cell": np.array([f"{o}?{a}" for o, a in cells], dtype=object),
        "object": np.array([o for o, _ in cells], dtype=object),
        "attr": np.array([a for _, a in cells], dtype=object),
    }
    check(PPS, rows, [path(text) for text in opens], lambda v, r: in_scope(v, r, "object"))


AMOUNTS = st.one_of(st.none(), st.integers(0, 9).map(float))
BOUNDS = st.sampled_from(
    ["amount > 4", "amount <= 2", "customer = 'ada'", "amount IS NULL", "amount > 3 OR amount < 1"]
)


def where(text: str, row: dict[str, Any]) -> bool:
    """The bounds above, in Python: a comparison with NULL selects nothing."""
    amount, customer = row["amount"], row["customer"]
    known = amount is not None and not (isinstance(amount, float) and np.isnan(amount))
    return {
        "amount > 4": known and amount > 4,
        "amount <= 2": known and amount <= 2,
        "customer = 'ada'": customer == "ada",
        "amount IS NULL": not known,
        "amount > 3 OR amount < 1": known and (amount > 3 or amount < 1),
    }[text]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(AMOUNTS, st.sampled_from(["ada", "bob"])), max_size=12),
    st.lists(BOUNDS, max_size=3),
)
def test_a_sql_primitive_holds_the_rows_its_where_clause_bounds(
    orders: list[tuple[float | None, str]], bounds: list[str]
) -> None:
    amounts = np.ma.MaskedArray(
        [a if a is not None else 0.0 for a, _ in orders], mask=[a is None for a, _ in orders]
    )
    rows = {
        "order_id": np.arange(len(orders), dtype=np.int64),
        "amount": amounts,
        "customer": np.array([c for _, c in orders], dtype=object),
    }
    queries = {sql(f"SELECT * FROM orders WHERE {text}"): text for text in bounds}
    core = relay(ORDERS, rows)
    kind = core.parts.kinds["orders"]
    held = [kind.primitive(query) for query in queries]
    assert all(isinstance(prim, SqlBox) and prim.columns is None for prim in held)
    want = sorted(
        key
        for key, (amount, customer) in enumerate(orders)
        if any(where(text, {"amount": amount, "customer": customer}) for text in queries.values())
    )
    state = core.datasets["orders"].table
    assert sorted(state.keys[kind.holds(held, state.columns)].tolist()) == want
    assert sorted(kind.contents(held)["order_id"].tolist()) == want


@pytest.mark.parametrize(
    ("info", "view", "words"),
    [
        (AGENTS, Entity("five"), "'five' is no key of 'agents'"),
        (AGENTS, Box((0, 0, 0), (1, 1, 1)), "2-D, not 3-D"),
        (AGENTS, topic("a/b"), "takes regions, not TopicFilter"),
        (SENSORS, path("/c/1"), "takes MQTT topic filters, not ObjectPath"),
        (CARS, Box((0, 0), (1, 1)), "takes object paths, not Box"),
        (PPS, topic("a"), "takes object paths, not TopicFilter"),
        (ORDERS, topic("a"), "takes SQL views, not TopicFilter"),
        (ORDERS, SqlBox("customers"), "of table 'customers', not 'orders'"),
        (ORDERS, sql("SELECT * FROM orders WHERE colour = 'red'"), "no column(s) colour"),
        (ORDERS, sql("SELECT * FROM orders WHERE customer > 5"), "does not fit table 'orders'"),
    ],
)
def test_a_primitive_a_kind_does_not_serve_is_refused_naming_why(
    info: DatasetInfo, view: View, words: str
) -> None:
    core = ready_core(info, policy=Policy())
    with pytest.raises(InvalidView) as refused:
        core.parts.kinds[info.name].primitive(view)
    assert words in str(refused.value)


def test_a_filter_is_held_without_its_group_and_a_path_without_its_options() -> None:
    core = ready_core(SENSORS, CARS, policy=Policy())
    assert core.parts.kinds["sensors"].primitive(topic("$share/g/a/+")) == topic("a/+")
    assert core.parts.kinds["cars"].primitive(path("/c/.all?delta,f=rpm>4")) == path("/c/.all")


TICKETS = DatasetInfo(
    "tickets", "id", {"id": "<i8", "fare": "decimal(8,2)", "scan": "bytes"}, "sql", ["fare"]
)


def test_a_primitive_bounding_a_decimal_column_fits_it_and_holds_its_rows() -> None:
    """A relay below asks for decimals compared with numbers (as the publisher takes them);
    the relay's table holds them as ``Decimal`` objects, not strings."""
    fares = [Decimal("99.99"), Decimal("100.00"), Decimal("100.01"), Decimal("250.50")]
    rows = {
        "id": np.arange(len(fares), dtype=np.int64),
        "fare": np.array(fares, dtype=object),
        "scan": np.array([b"", b"\x00", b"ab", b"z"], dtype=object),
    }
    core = relay(TICKETS, rows)
    kind = core.parts.kinds["tickets"]
    held = kind.primitive(sql("SELECT * FROM tickets WHERE fare > 100 AND scan IS NOT NULL"))
    state = core.datasets["tickets"].table
    want = [key for key, fare in enumerate(fares) if fare > 100]
    assert sorted(state.keys[kind.holds([held], state.columns)].tolist()) == want
    with pytest.raises(InvalidView, match="does not fit table 'tickets'"):
        kind.primitive(sql("SELECT * FROM tickets WHERE fare > 'cheap'"))
