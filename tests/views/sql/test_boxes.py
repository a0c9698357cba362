"""The box algebra under SQL views (value sets and boxes) against a brute-force oracle."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.views.sql.boxes import Box, box_subtract, box_within, hull, simplify, subtract
from fanout.views.sql.values import (
    EVERYTHING,
    NOT_NULL,
    ONLY_NULL,
    Interval,
    ValueSet,
    compare,
    complement,
    intersect,
    points,
    union,
    within,
)

# Bounds are whole numbers; samples add the half-way points, so every gap and endpoint is probed.
BOUNDS = list(range(-2, 3))
SAMPLES: list[float | None] = [None, -math.inf, *(b / 2 for b in range(-5, 6)), math.inf]


def contains(values: ValueSet, x: float | None) -> bool:
    """Brute-force membership of one value (None: NULL) in a value set."""
    if x is None:
        return values.null
    return any(_in_interval(interval, x) for interval in values.intervals)


def _in_interval(interval: Interval, x: float) -> bool:
    low, high = interval.low, interval.high
    above = low is None or (x >= low if interval.low_closed else x > low)  # type: ignore[operator]
    below = high is None or (x <= high if interval.high_closed else x < high)  # type: ignore[operator]
    return above and below


def in_box(box: Mapping[str, ValueSet], point: Mapping[str, float | None]) -> bool:
    return all(contains(values, point[column]) for column, values in box.items())


def in_union(boxes: Sequence[Mapping[str, ValueSet]], point: Mapping[str, float | None]) -> bool:
    return any(in_box(box, point) for box in boxes)


@st.composite
def intervals(draw: st.DrawFn) -> Interval:
    low = draw(st.none() | st.sampled_from(BOUNDS))
    high = draw(st.none() | st.sampled_from(BOUNDS))
    return Interval(
        low,
        high,
        low is not None and draw(st.booleans()),
        high is not None and draw(st.booleans()),
    )


@st.composite
def value_sets(draw: st.DrawFn) -> ValueSet:
    chosen = draw(st.lists(intervals(), max_size=3))
    return ValueSet("num", tuple(chosen), draw(st.booleans()))


@st.composite
def boxes(draw: st.DrawFn) -> dict[str, ValueSet]:
    columns = draw(st.lists(st.sampled_from("xy"), unique=True, max_size=2))
    return {column: draw(value_sets()) for column in columns}


ORACLE = settings(deadline=None)  # brute force over a grid: slow machines must not flake
FEWER = settings(deadline=None, max_examples=50)
GRID = [{"x": x, "y": y} for x in SAMPLES for y in SAMPLES]


@given(value_sets(), value_sets())
@ORACLE
def test_value_set_operations_agree_with_membership(a: ValueSet, b: ValueSet) -> None:
    for x in SAMPLES:
        assert contains(intersect(a, b), x) == (contains(a, x) and contains(b, x))
        assert contains(union(a, b), x) == (contains(a, x) or contains(b, x))
        assert contains(complement(a), x) == (not contains(a, x))
    # within is exact: sample points cover every region between the whole-number bounds
    assert within(a, b) == all(contains(b, x) for x in SAMPLES if contains(a, x))


@given(value_sets())
@ORACLE
def test_value_sets_are_canonical(a: ValueSet) -> None:
    rebuilt = ValueSet(a.domain, tuple(reversed(a.intervals)) + a.intervals, a.null)
    assert rebuilt == a
    assert hash(rebuilt) == hash(a)
    assert complement(complement(a)) == a
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(a), type=ValueSet) == a
    assert msgspec.json.decode(msgspec.json.encode(a), type=ValueSet) == a


@given(st.lists(boxes(), max_size=4), st.lists(boxes(), max_size=4))
@ORACLE
def test_subtract_is_exact(
    wanted: list[dict[str, ValueSet]], held: list[dict[str, ValueSet]]
) -> None:
    left = subtract(wanted, held)
    for point in GRID:
        expected = in_union(wanted, point) and not in_union(held, point)
        assert in_union(left, point) == expected


@given(boxes(), boxes())
@FEWER
def test_box_subtract_gives_disjoint_pieces(a: dict[str, ValueSet], b: dict[str, ValueSet]) -> None:
    pieces = box_subtract(a, b)
    for point in GRID:
        inside = [in_box(piece, point) for piece in pieces]
        assert sum(inside) <= 1
        assert any(inside) == (in_box(a, point) and not in_box(b, point))


@given(st.lists(boxes(), min_size=1, max_size=5))
@ORACLE
def test_simplify_keeps_the_union_and_hull_holds_it(union_of: list[dict[str, ValueSet]]) -> None:
    simpler = simplify(union_of)
    bound = hull(union_of)
    assert len(simpler) <= len(union_of)
    for point in GRID:
        assert in_union(simpler, point) == in_union(union_of, point)
        if in_union(union_of, point):
            assert in_box(bound, point)


@given(boxes(), boxes())
@FEWER
def test_box_within_agrees_with_membership(a: dict[str, ValueSet], b: dict[str, ValueSet]) -> None:
    inside = all(in_box(b, point) for point in GRID if in_box(a, point))
    nonempty = any(in_box(a, point) for point in GRID)
    if nonempty:
        assert box_within(a, b) == inside


def test_comparisons_follow_three_valued_logic() -> None:
    below = compare("<", "num", 5)
    assert not below.null and not complement(below).without_null().null
    assert contains(compare("<>", "num", 3), 2) and not contains(compare("<>", "num", 3), 3)
    assert not contains(compare("<>", "num", 3), None)
    assert complement(ONLY_NULL) == NOT_NULL
    assert EVERYTHING.is_everything() and not NOT_NULL.is_everything()


def test_booleans_are_a_two_value_domain() -> None:
    true = points("bool", [True])
    assert compare("<>", "bool", True) == points("bool", [False])
    assert union(true, points("bool", [False])) == NOT_NULL
    assert complement(true) == ValueSet("bool", (Interval(False, False, True, True),), null=True)


def test_incomparable_domains_cover_nothing() -> None:
    numbers = {"x": compare("<", "num", 5)}
    strings = {"x": compare("<", "str", "m")}
    assert not box_within(numbers, strings)
    assert box_subtract(numbers, strings) == [numbers]
    with pytest.raises(ValueError, match="cannot combine"):
        intersect(numbers["x"], strings["x"])


def test_boxes_are_canonical_and_travel() -> None:
    box = Box((("Y", ONLY_NULL), ("x", compare("<", "num", 1)), ("z", EVERYTHING)))
    assert [column for column, _ in box.ranges] == ["x", "y"]
    assert Box.of(box.as_map()) == box
    assert msgspec.json.decode(msgspec.json.encode(box), type=Box) == box
    assert Box((("x", ValueSet("num")),)).is_empty()


@pytest.mark.parametrize(
    ("domain", "value", "message"),
    [
        ("num", "a", "not a value of the 'num' domain"),
        ("num", math.nan, "not a value of the 'num' domain"),
        ("num", True, "not a value of the 'num' domain"),
        ("str", 1, "not a value of the 'str' domain"),
        ("date", 10**9, "not a value of the 'date' domain"),
        ("any", 1, "not a value of the 'any' domain"),
        ("money", 1, "unknown value domain"),
    ],
)
def test_malformed_value_sets_are_invalid_views(domain: str, value: object, message: str) -> None:
    with pytest.raises(InvalidView, match=message):
        ValueSet(domain, (Interval(value, None, True, False),))  # type: ignore[arg-type]


def test_a_box_cannot_constrain_a_column_twice() -> None:
    with pytest.raises(InvalidView, match="constrains a column twice"):
        Box((("x", NOT_NULL.without_null()), ("X", ONLY_NULL)))
