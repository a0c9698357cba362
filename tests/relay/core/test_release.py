"""Releasing SQL, topic and path primitives: the same answer as asking the coverage algebra
about every need without every primitive (the naive oracle), and ``meets`` of each kind against
brute force."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.release import meets, near, probes, registered, unneeded
from fanout.relay.core.upstream import Primitive
from fanout.views import View, covers
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql, SqlBox
from fanout.views.topic import TopicFilter, matches


def naive(prims: Sequence[Primitive], needs: Sequence[View]) -> list[Primitive]:
    """Every need checked against every other ready primitive, for every primitive."""
    alive = sorted(prims, key=lambda p: p.prim)
    gone: list[Primitive] = []
    for prim in list(alive):
        others = [p.view for p in alive if p is not prim and p.ready]
        if all(others and covers(others, need) for need in needs):
            gone.append(prim)
            alive.remove(prim)
    return gone


LEVELS = ["a", "b", "", "$s"]
filters = st.builds(
    lambda levels, hash_: "/".join([*levels[:-1], "#"] if hash_ else levels) or "+",
    st.lists(st.sampled_from([*LEVELS, "+"]), min_size=1, max_size=3),
    st.booleans(),
).map(TopicFilter)
shared = st.tuples(st.sampled_from(["g", "h"]), filters).map(
    lambda pair: TopicFilter(f"$share/{pair[0]}/{pair[1].filter}")
)
OBJECTS = ["/d/a", "/d/b", "/d/e/a", "/e/a", "/top"]
paths = st.sampled_from([*OBJECTS, "/d/.all", "/d/e/.all", "/.all", "/d/a?f=x>1"]).map(ObjectPath)
bounds = st.tuples(st.integers(0, 10), st.integers(0, 4), st.sampled_from(["BETWEEN", ">", "<"]))


def sql_box(parts: tuple[int, int, str], column: str = "v") -> SqlBox:
    low, width, op = parts
    where = {
        "BETWEEN": f"{column} BETWEEN {low} AND {low + width}",
        ">": f"{column} > {low}",
        "<": f"{column} < {low}",
    }[op]
    return Sql(f"SELECT * FROM t WHERE {where} OR w = {low}").primitives()[0]


sql_boxes = st.builds(sql_box, bounds)
views = st.one_of(  # the primitives of one dataset: all of one kind
    st.lists(filters, max_size=7), st.lists(paths, max_size=7), st.lists(sql_boxes, max_size=6)
)


@settings(max_examples=300, deadline=None)
@given(
    held=views,
    ready=st.lists(st.booleans(), min_size=7, max_size=7),
    picks=st.lists(st.integers(0, 6), max_size=5),
    extra=st.one_of(filters, shared, paths, sql_boxes),
)
def test_the_same_primitives_go_as_the_naive_answer(
    held: list[View], ready: list[bool], picks: list[int], extra: View
) -> None:
    prim_views = held
    prims = [
        Primitive(number, "d", view, ready=ready[number]) for number, view in enumerate(prim_views)
    ]
    # Needs: some held views themselves (a need and its primitive), plus one of any kind.
    needs = [prim_views[at % len(prim_views)] for at in picks] if prim_views else []
    needs.append(extra)
    assert unneeded(prims, needs) == naive(prims, needs)
    assert unneeded(prims, needs[:-1]) == naive(prims, needs[:-1])


def test_a_moved_view_lets_go_of_what_it_held_and_a_wide_filter_takes_over() -> None:
    old = Primitive(1, "d", TopicFilter("site/1/dev/7"), ready=True)
    wide = Primitive(2, "d", TopicFilter("site/1/#"), ready=True)
    new = Primitive(3, "d", TopicFilter("site/2/dev/7"), ready=True)
    pending = Primitive(4, "d", TopicFilter("site/3/dev/7"), ready=False)
    needs: list[View] = [TopicFilter("site/1/dev/8"), TopicFilter("site/2/dev/7")]
    assert unneeded([old, wide, new, pending], needs) == [old, pending]
    # A need no ready primitive covers yet: every primitive may be part of it, all stay.
    assert unneeded([old, wide, new, pending], [*needs, TopicFilter("site/3/dev/7")]) == []
    assert unneeded([wide], [TopicFilter("site/1/x")]) == []  # the last one stays


# -- meets, against brute force ----------------------------------------------------------------


def witness_topics(a: TopicFilter, b: TopicFilter) -> list[str]:
    """Every topic up to one level deeper than either filter, over the levels they name."""
    names = {level for level in (*a.levels, *b.levels) if level not in ("+", "#")}
    alphabet = sorted(names | {"z", "$z"})
    depth = max(len(a.levels), len(b.levels)) + 1
    topics = []
    for length in range(1, depth + 1):
        for levels in itertools.product(alphabet, repeat=length):
            topic = "/".join(levels)
            if topic:
                topics.append(topic)
    return topics


@settings(max_examples=300, deadline=None)
@given(st.one_of(filters, shared), st.one_of(filters, shared))
def test_topic_filters_meet_iff_some_topic_matches_both(a: TopicFilter, b: TopicFilter) -> None:
    expected = any(
        matches(a.topic_filter, topic) and matches(b.topic_filter, topic)
        for topic in witness_topics(a, b)
    )
    assert meets(a, b) is expected
    assert meets(b, a) is expected
    if expected:  # a held b is found by a's probes
        assert set(probes(a) or []) & set(registered(b) or [])


@given(paths, paths)
def test_object_paths_meet_iff_some_object_is_in_both_scopes(a: ObjectPath, b: ObjectPath) -> None:
    objects = [*OBJECTS, "/d/z", "/z"]
    expected = any(a.in_scope([o])[0] and b.in_scope([o])[0] for o in objects)
    assert meets(a, b) is expected
    if expected:
        assert set(probes(a) or []) & set(registered(b) or [])


@given(sql_boxes, sql_boxes)
def test_sql_primitives_meet_iff_some_row_is_in_both(a: SqlBox, b: SqlBox) -> None:
    # Integer bounds: any two intervals that meet share an integer or a half-integer.
    grid = [k / 2 for k in range(-2, 32)] + [None]
    rows = pa.table(
        {
            "v": pa.array([v for v in grid for _ in grid], pa.float64()),
            "w": pa.array([w for _ in grid for w in grid], pa.float64()),
        }
    )
    expected = bool((a.match(rows) & b.match(rows)).any())
    assert meets(a, b) is expected
    other_table = Sql("SELECT * FROM u WHERE v > 0").primitives()[0]
    assert not meets(a, other_table)


def test_views_of_other_kinds_never_meet_and_unknown_pairs_do() -> None:
    assert not meets(TopicFilter("a"), ObjectPath("/a"))
    query = Sql("SELECT * FROM t WHERE v > 3")
    assert meets(query, query.primitives()[0])  # not known: taken to meet
    assert probes(query) is None and registered(query) is None  # found among every primitive


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(filters, shared, paths, sql_boxes), max_size=8),
    st.lists(st.one_of(filters, paths, sql_boxes), max_size=5),
)
def test_near_are_the_views_meeting_any_other(views: list[View], others: list[View]) -> None:
    expected = [view for view in views if any(meets(view, other) for other in others)]
    assert near(views, others) == expected


# One column, so that SQL primitives' hulls on it tell them apart (and NULL-letting ones not).
one_column = st.builds(
    lambda low, width, form: Sql(
        "SELECT * FROM t WHERE " + form.format(low=low, high=low + width, other=low + 2 * width + 1)
    ).primitives()[0],
    st.integers(0, 20),
    st.integers(0, 4),
    st.sampled_from(
        [
            "v BETWEEN {low} AND {high}",
            "v > {low}",
            "v < {low}",
            "v IN ({low}, {other})",
            "v IS NULL OR v = {low}",
            "v = {low} OR w = {high}",
            "(v BETWEEN {low} AND {high}) OR (v BETWEEN {other} AND {other} + 1)",
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(one_column, max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
    st.lists(one_column, max_size=5),
)
def test_sql_primitives_told_apart_by_one_column_go_as_the_naive_answer(
    held: list[View], ready: list[bool], needs: list[View]
) -> None:
    prims = [Primitive(n, "d", view, ready=ready[n]) for n, view in enumerate(held)]
    assert unneeded(prims, needs) == naive(prims, needs)
    assert near(needs, held) == [v for v in needs if any(meets(v, h) for h in held)]
