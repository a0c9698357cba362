"""Access rules: the effective view is the view intersected with the rules, checked against
independent brute-force oracles (plain comparisons for boxes and discs, a recursive MQTT
matcher for topics, SQLite over tables filtered first for SQL, joins included)."""

from __future__ import annotations

import itertools
import sqlite3
from typing import Any

import duckdb
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fanout.errors import Unauthorized
from fanout.relay.core.languages.topic import topic_meet
from fanout.relay.core.planner import Policy
from fanout.relay.core.rules import RulesPart, effective, restrict
from fanout.testing import strategies as fs
from fanout.testing.oracle import grid_points, in_box, inside
from fanout.testing.relaycore import ready_core
from fanout.views import Box
from fanout.views.anyof import AnyOf
from fanout.views.objects import ObjectPath
from fanout.views.region import Intersection, RegionUnion, Relative, Sphere
from fanout.views.sql import Sql
from fanout.views.text import parse
from fanout.views.topic import TopicFilter
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    DatasetInfo,
    Error,
    Push,
    Subscribe,
)

# -- regions ----------------------------------------------------------------------------------


def boxes() -> st.SearchStrategy[Box]:
    return fs.grid_boxes(12)


POINTS = grid_points(12)


@given(st.lists(boxes(), min_size=1, max_size=2), st.lists(boxes(), min_size=1, max_size=3))
def test_a_box_view_is_clipped_to_box_rules_exactly(
    view_boxes: list[Box], rule_boxes: list[Box]
) -> None:
    view = view_boxes[0] if len(view_boxes) == 1 else RegionUnion(tuple(view_boxes))
    rules = {"agents": [str(b) for b in rule_boxes]}
    wanted = {p for p in POINTS if inside(view, *p) and any(in_box(b, *p) for b in rule_boxes)}
    try:
        served = effective(view, "agents", "region", rules)
    except Unauthorized as refused:
        assert refused.code == "forbidden"
        assert not wanted, "refused although the view meets the rules"
        return
    assert {p for p in POINTS if inside(served, *p)} == wanted


def discs() -> st.SearchStrategy[Sphere]:
    return fs.grid_discs(12, 8)


shapes = st.one_of(boxes(), discs())


@settings(max_examples=300)
@example(Box((0, 0), (12, 12)), [Sphere((6, 6), 4)])
@example(Sphere((6, 6), 5), [Box((0, 0), (6, 6)), Sphere((12, 12), 6)])
@given(
    st.one_of(shapes, st.lists(shapes, min_size=2, max_size=3).map(tuple).map(RegionUnion)),
    st.lists(shapes, min_size=1, max_size=3),
)
def test_a_region_view_is_served_exactly_inside_its_rules(view: Any, rule_shapes: list) -> None:
    """Boxes, discs and unions of them against box and disc rules: a point is served iff it is
    in the view and in some rule; a refusal only when no point is."""
    rules = {"agents": [str(shape) for shape in rule_shapes]}
    wanted = {
        p for p in POINTS if inside(view, *p) and any(inside(rule, *p) for rule in rule_shapes)
    }
    try:
        served = effective(view, "agents", "region", rules)
    except Unauthorized as refused:
        assert refused.code == "forbidden"
        assert not wanted, "refused although the view meets the rules"
        return
    assert {p for p in POINTS if inside(served, *p)} == wanted
    assert parse(str(served), "region") == served  # explain shows it, and it reads back


def test_region_refusals_say_why() -> None:
    rules = {"agents": ["box:0,0,10,10"]}
    cases = [
        (Box((20, 20), (30, 30)), "agents", "lies outside your rules"),
        (Sphere((50, 50), 20), "agents", "lies outside your rules"),
        (Relative(4, Sphere((0, 0), 1)), "agents", "relative to an entity"),
        (Box((0, 0), (1, 1)), "ships", "grants no rows of dataset 'ships'"),
    ]
    for view, dataset, says in cases:
        with pytest.raises(Unauthorized, match=says) as refused:
            effective(view, dataset, "region", rules)
        assert refused.value.code == "forbidden"
    with pytest.raises(Unauthorized, match="rule 2 on 'agents' is not a valid region view"):
        effective(Box((0, 0), (1, 1)), "agents", "region", {"agents": ["box:0,0,1,1", "box:9"]})
    assert effective(Box((0, 0), (1, 1)), "agents", "region", None) == Box((0, 0), (1, 1))
    with pytest.raises(Unauthorized, match="rule 1 on 'agents' is not an absolute region"):
        effective(Box((0, 0), (1, 1)), "agents", "region", {"agents": ["rel:4:box:0,0,1,1"]})
    both = {"agents": ["box:0,0,5,5&sphere:0,0,5", "box:4,4,9,9"]}
    with pytest.raises(Unauthorized, match="one of them an intersection"):
        effective(Sphere((4, 4), 3), "agents", "region", both)
    assert effective(Sphere((4, 4), 3), "agents", "region", {"agents": both["agents"][:1]}) == (
        Intersection((Sphere((4, 4), 3), Box((0, 0), (5, 5)), Sphere((0, 0), 5)))
    )


def test_a_view_against_a_curved_rule_is_their_intersection() -> None:
    served = effective(Box((0, 0), (10, 10)), "agents", "region", {"agents": ["sphere:0,0,5"]})
    assert served == Intersection((Box((0, 0), (10, 10)), Sphere((0, 0), 5)))
    assert str(served) == "box:0,0,10,10&sphere:0,0,5"
    assert served.bounds() == Box((0, 0), (5, 5))


# -- topics -----------------------------------------------------------------------------------

LEVELS = ["a", "b", "$s"]
TOPICS = ["/".join(t) for n in range(1, 4) for t in itertools.product(LEVELS, repeat=n)]


def matches(levels: list[str], topic: list[str]) -> bool:
    """MQTT 4.7, by recursion: the oracle (not fanout's matcher)."""
    if not levels:
        return not topic
    head, rest = levels[0], levels[1:]
    if head == "#":
        return True
    if not topic:
        return False
    if head == "+" or head == topic[0]:
        return matches(rest, topic[1:])
    return False


def match(filter_: str, topic: str) -> bool:
    levels, parts = filter_.split("/"), topic.split("/")
    if parts[0].startswith("$") and levels[0] in ("+", "#"):
        return False
    return matches(levels, parts)


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.sampled_from(["a", "b", "$s", "+"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


@given(filters(), filters())
def test_topic_meets_match_exactly_the_topics_both_filters_match(a: str, b: str) -> None:
    meet = topic_meet(a, b)
    both = {t for t in TOPICS if match(a, t) and match(b, t)}
    got = set() if meet is None else {t for t in TOPICS if match(meet, t)}
    assert got == both


def served_filters(served: object) -> list[str]:
    if isinstance(served, AnyOf):
        return [member.filter for member in served.views]  # type: ignore[union-attr]
    assert isinstance(served, TopicFilter)
    return [served.filter]


@settings(max_examples=300)
@example("+/b", ["a/#", "b/#"])
@example("#", ["a/+", "a/b", "b"])
@given(filters(), st.lists(filters(), min_size=1, max_size=3))
def test_a_topic_view_is_served_exactly_inside_its_rules(view: str, rules: list[str]) -> None:
    """A topic is served iff the view and some rule match it; a refusal only when none is."""
    wanted = {t for t in TOPICS if match(view, t) and any(match(rule, t) for rule in rules)}
    try:
        served = effective(TopicFilter(view), "t", "topic", {"t": rules})
    except Unauthorized as refused:
        assert refused.code == "forbidden"
        assert not wanted, "refused although the filter meets the rules"
        return
    got = {t for t in TOPICS if any(match(f, t) for f in served_filters(served))}
    assert got == wanted


def test_a_filter_meeting_several_rules_is_served_any_of_the_meets() -> None:
    rules = {"t": ["plant/1/#", "plant/2/#"]}
    served = effective(TopicFilter("plant/+/temp"), "t", "topic", rules)
    assert served == AnyOf((TopicFilter("plant/1/temp"), TopicFilter("plant/2/temp")))
    assert str(served) == "plant/1/temp | plant/2/temp"
    shared = effective(TopicFilter("$share/g/plant/+/temp"), "t", "topic", rules)
    assert served_filters(shared) == ["$share/g/plant/1/temp", "$share/g/plant/2/temp"]
    wider = effective(TopicFilter("plant/+/temp"), "t", "topic", {"t": ["plant/1/#", "plant/#"]})
    assert wider == TopicFilter("plant/+/temp"), "a meet another holds adds nothing"


def test_a_shared_topic_view_keeps_its_group() -> None:
    served = effective(TopicFilter("$share/g/plant/+/temp"), "t", "topic", {"t": ["plant/1/#"]})
    assert served == TopicFilter("$share/g/plant/1/temp")


# -- SQL --------------------------------------------------------------------------------------

TENANTS = st.sampled_from(["a", "b", None])
ORDERS = st.lists(
    st.tuples(st.integers(0, 5), TENANTS, st.integers(0, 9)), max_size=8, unique_by=lambda r: r[0]
)
USERS = st.lists(
    st.tuples(st.integers(0, 5), TENANTS, st.sampled_from(["x", "y"])),
    max_size=6,
    unique_by=lambda r: r[0],
)
CONDITIONS = {
    "orders": ["tenant = 'a'", "amount > 4", "tenant = 'b' OR amount < 2", "id IN (1, 2, 3)"],
    "users": ["tenant = 'a'", "name = 'x'", "id >= 2 AND tenant IS NOT NULL"],
}
QUERIES = [
    "SELECT * FROM orders",
    "SELECT id, amount FROM orders WHERE amount >= 3",
    "SELECT DISTINCT tenant FROM orders",
    "SELECT o.id, u.name FROM orders o JOIN users u ON o.id = u.id",
    "SELECT o.id, u.name FROM orders AS o LEFT JOIN users AS u ON o.id = u.id WHERE o.amount > 1",
    "SELECT o.id, u.id AS uid FROM orders o, users u WHERE o.tenant = u.tenant",
    "SELECT u.name, o.amount FROM users u LEFT JOIN orders o ON o.tenant = u.tenant",
]


def rows_of(connection: Any, query: str) -> list[tuple]:
    return sorted(connection.execute(query).fetchall(), key=repr)


@settings(max_examples=60)
@given(
    ORDERS,
    USERS,
    st.sampled_from(QUERIES),
    st.lists(st.sampled_from(CONDITIONS["orders"]), min_size=1, max_size=2),
    st.lists(st.sampled_from(CONDITIONS["users"]), min_size=1, max_size=2),
)
def test_a_sql_view_reads_its_tables_restricted_to_their_rules_joins_included(
    orders: list, users: list, query: str, order_rules: list[str], user_rules: list[str]
) -> None:
    rules = {"orders": order_rules, "users": user_rules}
    served = effective(Sql(query), "orders", "sql", rules)
    relay = duckdb.connect()
    oracle = sqlite3.connect(":memory:")
    for name, columns, rows in (
        ("orders", "id INTEGER, tenant TEXT, amount INTEGER", orders),
        ("users", "id INTEGER, tenant TEXT, name TEXT", users),
    ):
        relay.execute(f"CREATE TABLE {name} ({columns})")
        oracle.execute(f"CREATE TABLE all_{name} ({columns})")
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            relay.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
            oracle.executemany(f"INSERT INTO all_{name} VALUES ({marks})", rows)
        granted = " OR ".join(f"({c})" for c in rules[name])
        oracle.execute(f"CREATE TABLE {name} AS SELECT * FROM all_{name} WHERE {granted}")
    assert rows_of(relay, str(served)) == rows_of(oracle, query)


def test_sql_refusals_say_why() -> None:
    rules = {"orders": ["tenant = 'a'"]}
    cases = [
        ("SELECT * FROM users", "grants no rows of dataset 'users'"),
        ("SELECT o.id FROM orders o JOIN users u ON o.id = u.id", "no rows of dataset 'users'"),
        ("SELECT o.id FROM orders o RIGHT JOIN orders p ON o.id = p.id", "RIGHT joins"),
    ]
    for query, says in cases:
        with pytest.raises(Unauthorized, match=says):
            effective(Sql(query), "orders", "sql", rules)
    for bad in ["tenant = ", "SELECT * FROM users WHERE id = 1", "SELECT * FROM orders LIMIT 1"]:
        with pytest.raises(Unauthorized, match="rule 1 on 'orders' is not a valid sql view"):
            effective(Sql("SELECT * FROM orders"), "orders", "sql", {"orders": [bad]})


def test_a_whole_select_rule_and_a_rule_without_where_grant_as_their_condition() -> None:
    whole = effective(
        Sql("SELECT * FROM orders"),
        "orders",
        "sql",
        {"orders": ["SELECT * FROM orders WHERE id = 1"]},
    )
    assert str(whole) == str(Sql("SELECT * FROM orders WHERE ((orders.id = 1))"))
    everything = effective(
        Sql("SELECT * FROM orders"), "orders", "sql", {"orders": ["SELECT * FROM orders"]}
    )
    assert everything == Sql("SELECT * FROM orders")


PATHS = ["/cars/c1", "/cars/c2", "/cars/c3", "/boats/b1", "/cars/sub/c1"]
path_views = st.sampled_from(
    ["/cars/.all", "/cars/c1", "/cars/c2", "/boats/.all", "/cars/sub/.all"]
)


def in_path(view: str, path: str) -> bool:
    """The oracle: an object names itself, ``.all`` the objects directly in its directory."""
    if view.endswith("/.all"):
        directory = view[: -len(".all")]
        return path.startswith(directory) and "/" not in path[len(directory) :]
    return path == view


@settings(max_examples=200)
@given(path_views, st.lists(path_views, min_size=1, max_size=3), st.sampled_from(["", "?delta"]))
def test_an_object_path_is_narrowed_exactly_to_its_rules(
    view: str, rules: list[str], options: str
) -> None:
    """An object is served iff the view and some rule hold it; the view's options are kept."""
    wanted = {p for p in PATHS if in_path(view, p) and any(in_path(rule, p) for rule in rules)}
    try:
        served = effective(parse(view + options, "path"), "cars", "path", {"cars": rules})
    except Unauthorized as refused:
        assert refused.code == "forbidden"
        assert not wanted
        return
    paths = served.views if isinstance(served, AnyOf) else (served,)
    assert all(isinstance(p, ObjectPath) and p.delta == bool(options) for p in paths)
    got = {p for p in PATHS if any(in_path(v.object_path, p) for v in paths)}  # type: ignore[union-attr]
    assert got == wanted


def test_an_objects_dataset_serves_a_directory_narrowed_to_the_objects_its_rules_name() -> None:
    """Rules on an ``objects`` dataset (PPS cells): ``/c/.all`` under rules naming ``/c/1``
    and ``/c/2`` is served their cells, none of ``/c/3``'s."""
    from fanout.views.objects.store import SCHEMA, ObjectStore
    from fanout.views.objects.text import SetAttribute, Value

    wire = {"string": "str", "int": "<i4", "boolean": "|b1"}
    pps = DatasetInfo("pps", "cell", {c: wire[t] for c, t in SCHEMA.items()}, "objects", ["object"])
    store = ObjectStore()
    for name in ("1", "2", "3"):
        store.write(f"/c/{name}", [SetAttribute("rpm", Value("n", name + "00"))])
    rows = [cell.row() for cell in store]
    core = ready_core(pps, policy=Policy(grace=0.0))
    request = Subscribe(1, "pps", parse("/c/.all", "path"), rate=1000.0)
    request = restrict(request, {"pps": ["/c/1", "/c/2"]}, {"pps": "objects"})
    sends = core.on_subscribe(1, request)
    assert not [s.message() for s in sends if isinstance(s.message(), Error)]
    prims = [s.message().prim for s in sends if isinstance(s.message(), Acquire)]  # type: ignore[attr-defined]
    assert prims
    columns = {c: np.array([row[c] for row in rows], dtype=object) for c in SCHEMA}
    columns["cell"] = columns["cell"].astype(str)
    core.on_batch(Batch("pps", 1, 0, 1, 0.0, encode_columns(columns), encode_columns({}), prims))
    pushes = [s.message() for s in core.pushes(1.0, lambda client: True)]
    (push,) = [frame for frame in pushes if isinstance(frame, Push)]
    objects = set(decode_columns(push.entered)["object"].tolist())
    assert objects == {"/c/1", "/c/2"}


def test_object_path_narrowing_and_its_refusals() -> None:
    rules = {"cars": ["/cars/c1", "/cars/c2"]}
    assert effective(parse("/cars/c1?delta", "path"), "cars", "path", rules) == parse(
        "/cars/c1?delta", "path"
    )
    assert str(effective(parse("/cars/.all?delta", "path"), "cars", "path", rules)) == (
        "/cars/c1?delta | /cars/c2?delta"
    )
    with pytest.raises(Unauthorized, match="meets none of your rules"):
        effective(parse("/cars/c3", "path"), "cars", "path", rules)
    with pytest.raises(Unauthorized, match=r"rule 1 on 'cars' selects attributes or values \(f=\)"):
        effective(parse("/cars/.all", "path"), "cars", "path", {"cars": ["/cars/.all?f=speed"]})
    with pytest.raises(Unauthorized, match="which its options do not fit"):
        effective(parse("/cars/.all?deltadir", "path"), "cars", "path", rules)
    either = AnyOf((parse("/cars/c1", "path"), parse("/cars/c3", "path")))  # type: ignore[arg-type]
    assert effective(either, "cars", "path", rules) == parse("/cars/c1", "path")


def test_a_language_naming_datasets_without_rules_across_them_is_refused() -> None:
    """The shared default of ``RulesPart.across``: a clear ``forbidden``, never a crash."""
    with pytest.raises(Unauthorized, match="reads several datasets") as refused:
        RulesPart().across(Box((0, 0), (1, 1)), {})
    assert refused.value.code == "forbidden"
