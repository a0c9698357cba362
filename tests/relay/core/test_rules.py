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
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, Send
from fanout.relay.core.rules import effective, restrict, topic_meet
from fanout.testing import strategies as fs
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
    Curious,
    DatasetInfo,
    Error,
    Knowledge,
    Push,
    Resume,
    Subscribe,
)

# -- regions ----------------------------------------------------------------------------------


def boxes() -> st.SearchStrategy[Box]:
    return fs.grid_boxes(12)


def in_box(box: Box, x: float, y: float) -> bool:
    return box.lo[0] <= x <= box.hi[0] and box.lo[1] <= y <= box.hi[1]


def in_region(region: Any, x: float, y: float) -> bool:
    members = region.members if isinstance(region, RegionUnion) else (region,)
    return any(in_box(m, x, y) for m in members)


POINTS = [(x / 2, y / 2) for x in range(-1, 27) for y in range(-1, 27)]


@given(st.lists(boxes(), min_size=1, max_size=2), st.lists(boxes(), min_size=1, max_size=3))
def test_a_box_view_is_clipped_to_box_rules_exactly(
    view_boxes: list[Box], rule_boxes: list[Box]
) -> None:
    view = view_boxes[0] if len(view_boxes) == 1 else RegionUnion(tuple(view_boxes))
    rules = {"agents": [str(b) for b in rule_boxes]}
    wanted = {p for p in POINTS if in_region(view, *p) and any(in_box(b, *p) for b in rule_boxes)}
    try:
        served = effective(view, "agents", "region", rules)
    except Unauthorized as refused:
        assert refused.code == "forbidden"
        assert not wanted, "refused although the view meets the rules"
        return
    assert {p for p in POINTS if in_region(served, *p)} == wanted


def discs() -> st.SearchStrategy[Sphere]:
    return fs.grid_discs(12, 8)


def in_disc(disc: Sphere, x: float, y: float) -> bool:
    (cx, cy), r = disc.center, disc.radius
    return (x - cx) ** 2 + (y - cy) ** 2 <= r * r


def inside(shape: Any, x: float, y: float) -> bool:
    """The oracle: plain comparisons, a union's members, an intersection's parts."""
    if isinstance(shape, RegionUnion):
        return any(inside(member, x, y) for member in shape.members)
    if isinstance(shape, Intersection):
        return all(inside(part, x, y) for part in shape.parts)
    return in_disc(shape, x, y) if isinstance(shape, Sphere) else in_box(shape, x, y)


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


# -- served by the relay's core ---------------------------------------------------------------

SPACE = {"agents": "space"}
grid_points = st.tuples(st.integers(-1, 9).map(float), st.integers(-1, 9).map(float))
changes = st.dictionaries(
    st.integers(1, 40), st.none() | grid_points | grid_points, min_size=4, max_size=20
)


@st.composite
def wide_boxes(draw: st.DrawFn) -> Box:
    """Boxes a few units wide, so that views, rules and rows meet often."""
    x0, y0 = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    return Box((x0, y0), (x0 + draw(st.integers(2, 5)), y0 + draw(st.integers(2, 5))))


@st.composite
def wide_discs(draw: st.DrawFn) -> Sphere:
    """Discs a few units wide, as rules: a view meets them partly, so it is served their
    intersection."""
    return Sphere((draw(st.integers(0, 8)), draw(st.integers(0, 8))), draw(st.integers(1, 4)))


class Upstream:
    """A brute-force publisher: the truth, a log by seq, snapshots of what is acquired."""

    def __init__(self) -> None:
        self.truth: dict[int, tuple[float, float]] = {}
        self.seq = -1
        self.log: dict[int, tuple[dict, list[int]]] = {}
        self.fresh: list[int] = []

    def take(self, sends: list[Send]) -> list[Knowledge]:
        answers = []
        for send in sends:
            match send.frame:
                case Acquire(prim=prim) if send.to == UPSTREAM:
                    self.fresh.append(prim)
                case Curious() as ask if send.to == UPSTREAM:
                    for seq in range(ask.first, ask.last + 1):
                        upserts, deletes = self.log[seq]
                        answers.append(
                            Knowledge(
                                ask.req,
                                "agents",
                                1,
                                seq,
                                10 * seq,
                                float(seq),
                                encode_columns(columns(upserts)),
                                encode_columns({"id": np.array(deletes, np.int64)}),
                            )
                        )
        return answers

    def step(self, change: dict[int, tuple[float, float] | None]) -> Batch:
        self.seq += 1
        upserts = {k: p for k, p in change.items() if p is not None}
        deletes = sorted(k for k, p in change.items() if p is None and k in self.truth)
        self.truth.update(upserts)
        for key in deletes:
            del self.truth[key]
        self.log[self.seq] = (upserts, deletes)
        snapshots, self.fresh = self.fresh, []
        sent = dict(self.truth) if snapshots else upserts  # a snapshot: everything, as a superset
        return Batch(
            "agents",
            1,
            self.seq,
            10 * self.seq,
            float(self.seq),
            encode_columns(columns(sent)),
            encode_columns({"id": np.array(deletes, np.int64)}),
            snapshots,
        )


def columns(rows: dict[int, tuple[float, float]]) -> dict[str, np.ndarray]:
    keys = sorted(rows)
    return {
        "id": np.array(keys, np.int64),
        "x": np.array([rows[k][0] for k in keys], np.float64),
        "y": np.array([rows[k][1] for k in keys], np.float64),
    }


DENSE = [
    ("tick", {k: (float(k % 9), float(k // 9)) for k in range(1, 60)}),
    ("move", Box((1, 1), (5, 5))),
    ("resume", None),
    ("tick", {k: (float(k // 9), float(k % 9)) for k in range(1, 60, 2)}),
    ("tick", dict.fromkeys(range(1, 60, 3))),
]


@settings(max_examples=120, deadline=None)
@example([Box((0, 0), (4, 4)), Box((3, 3), (7, 6))], Box((2, 1), (8, 8)), "latest", DENSE)
@example([Box((0, 0), (4, 4)), Box((3, 3), (7, 6))], Box((2, 1), (8, 8)), "every", DENSE)
@example([Sphere((4, 4), 3)], Box((2, 1), (8, 8)), "latest", DENSE)
@example([Sphere((4, 4), 3), Box((6, 0), (9, 3))], Box((2, 1), (8, 8)), "every", DENSE)
@given(
    st.lists(st.one_of(wide_boxes(), wide_discs()), min_size=1, max_size=3),
    wide_boxes(),
    st.sampled_from(["latest", "every"]),
    st.lists(
        st.one_of(
            st.tuples(st.just("tick"), changes),
            st.tuples(st.just("tick"), changes),
            st.tuples(st.just("move"), wide_boxes()),
            st.tuples(st.just("resume"), st.none()),
        ),
        min_size=2,
        max_size=12,
    ),
)
def test_no_row_outside_the_rules_reaches_a_subscriber(
    rule_shapes: list[Box | Sphere], view: Box, mode: str, script: list
) -> None:
    """Every mode, view changes (latest) and resumes (every): each row pushed lies inside the
    rules (boxes and discs), and after every push of mode latest the subscriber holds exactly
    the truth inside its view and its rules (plain comparisons)."""
    rules = {"agents": [str(shape) for shape in rule_shapes]}
    core = ready_core(policy=Policy(widen="margin", grace=0.0))
    upstream = Upstream()
    held: dict[int, tuple[float, float]] = {}
    current = view

    def granted(x: float, y: float) -> bool:
        return any(inside(shape, x, y) for shape in rule_shapes)

    def subscribe(asked: Box, resume: Resume | None = None) -> bool:
        request = Subscribe(1, "agents", asked, rate=1000.0, mode=mode, resume=resume)  # type: ignore[arg-type]
        try:
            request = restrict(request, rules, SPACE)  # as the relay's shell does
        except Unauthorized:
            assert not any(in_box(asked, *p) and granted(*p) for p in POINTS)
            return False
        upstream.take(core.on_subscribe(1, request))
        return True

    def serve(now: float) -> None:
        for _ in range(50):
            sends = core.pushes(now, lambda client: True)
            for answer in upstream.take(sends):
                core.on_knowledge(answer)
            mine = [s.message() for s in sends if s.to == 1]
            for frame in mine:
                if isinstance(frame, Push):
                    if frame.full:
                        held.clear()
                    for key in decode_columns(frame.left).get("id", np.empty(0)).tolist():
                        held.pop(key, None)
                    for part in (frame.entered, frame.updated):
                        rows = decode_columns(part)
                        for k, x, y in zip(
                            *(rows.get(c, []) for c in ("id", "x", "y")), strict=True
                        ):
                            assert granted(x, y), f"row {k} at {(x, y)} is outside the rules"
                            held[int(k)] = (float(x), float(y))
                    if mode == "latest":
                        expected = {
                            k: p
                            for k, p in upstream.truth.items()
                            if in_box(current, *p) and granted(*p)
                        }
                        assert held == expected
            if not sends:
                return

    if not subscribe(view):
        return
    now = 1.0
    core.on_batch(upstream.step({}))
    serve(now)
    for action, argument in script:
        now += 1.0
        if action == "tick":
            upstream.take(core.on_batch(upstream.step(argument)))
        elif action == "move" and mode == "latest":
            if subscribe(argument):
                current = argument
            core.on_batch(upstream.step({}))  # the snapshots of what the move acquired
        elif action == "resume" and mode == "every":
            core.on_disconnect(1)
            keys = np.array(sorted(held), np.int64)
            seq = upstream.seq
            token = Resume(1, seq, encode_columns({"id": keys}))
            subscribe(view, token)
            core.on_batch(upstream.step({}))
        serve(now)
    assert all(granted(*p) for p in held.values())
