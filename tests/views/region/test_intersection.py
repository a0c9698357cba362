"""Intersections of regions: what a view under access rules is served as (``relay.core.rules``).

Checked against plain comparisons on a grid of points (the oracle), not against ``match``: the
points an intersection matches, its bounds, its text and wire forms, and that coverage of one
never says True wrongly.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.testing import strategies as fs
from fanout.testing.oracle import grid_points, inside
from fanout.views import View, covers, residual
from fanout.views.region import Box, Intersection, RegionUnion, Sphere
from fanout.views.text import parse

GRID = grid_points(10)
XS = np.array([p[0] for p in GRID])
YS = np.array([p[1] for p in GRID])


def discs() -> st.SearchStrategy[Sphere]:
    return fs.grid_discs(10, 6)


shapes = st.one_of(fs.grid_boxes(10), discs())
parts = st.one_of(shapes, st.lists(shapes, min_size=2, max_size=3).map(tuple).map(RegionUnion))


@settings(max_examples=200, deadline=None)
@given(st.lists(parts, min_size=2, max_size=3))
def test_an_intersection_matches_the_points_in_every_part(members: list) -> None:
    try:
        meet = Intersection(tuple(members))
    except InvalidView as exc:
        assert "empty" in str(exc)
        assert not any(all(inside(m, x, y) for m in members) for x, y in GRID)
        return
    expected = [all(inside(m, x, y) for m in members) for x, y in GRID]
    assert meet.match(XS, YS).tolist() == expected
    bounds = meet.bounds()
    assert all(inside(bounds, x, y) for (x, y), e in zip(GRID, expected, strict=True) if e)
    assert parse(str(meet), "region") == meet
    wire = msgspec.msgpack.encode(meet)
    assert msgspec.msgpack.decode(wire, type=View) == meet


@settings(max_examples=200, deadline=None)
@given(st.lists(fs.grid_boxes(10), max_size=3), st.lists(shapes, min_size=2, max_size=2))
def test_coverage_of_an_intersection_is_never_true_wrongly(held: list, members: list) -> None:
    try:
        meet = Intersection(tuple(members))
    except InvalidView:
        return
    points = [(x, y) for x, y in GRID if inside(meet, x, y)]
    if covers(held, meet):
        assert all(any(inside(box, x, y) for box in held) for x, y in points)
    more = residual(held, meet)
    assert all(isinstance(piece, Box) for piece in more), "the publisher is asked for boxes"
    assert covers([*held, *more], meet)


def test_intersections_flatten_and_refuse_what_is_not_one() -> None:
    a, b, c = Box((0, 0), (4, 4)), Sphere((0, 0), 3), Box((1, 1), (9, 9))
    assert Intersection((Intersection((a, b)), c)) == Intersection((a, b, c))
    assert str(Intersection((RegionUnion((a, c)), b))) == "box:0,0,4,4|box:1,1,9,9&sphere:0,0,3"
    with pytest.raises(InvalidView, match="at least two"):
        Intersection((a,))
    with pytest.raises(InvalidView, match="is empty"):
        Intersection((a, Box((5, 5), (6, 6))))
    with pytest.raises(InvalidView, match="part 1 is 3-D"):
        Intersection((a, Sphere((0, 0, 0), 1)))
    with pytest.raises(InvalidView, match="region 'box:0,0,1,1&'"):
        parse("box:0,0,1,1&", "region")
    assert Intersection((a, b)).grow(1.0) == Intersection((a.grow(1.0), b.grow(1.0)))
    assert Intersection((a, b)).translate((1, 1)) == Intersection(
        (a.translate((1, 1)), b.translate((1, 1)))
    )
