"""Membership of 2-D regions by plain comparisons (testing/oracle.py)."""

from __future__ import annotations

import pytest

from fanout.testing.oracle import grid_points, inside
from fanout.views import Box, Sphere
from fanout.views.region import Intersection, RegionUnion


def test_shapes_hold_their_edges() -> None:
    assert inside(Box((0, 0), (2, 2)), 2.0, 0.0)
    assert not inside(Box((0, 0), (2, 2)), 2.5, 0.0)
    assert inside(Sphere((0, 0), 2), 0.0, 2.0)
    assert not inside(Sphere((0, 0), 2), 1.5, 1.5)


def test_a_union_is_any_member_and_an_intersection_every_part() -> None:
    a, b = Box((0, 0), (2, 2)), Box((1, 1), (3, 3))
    assert inside(RegionUnion((a, b)), 2.5, 2.5)
    assert inside(Intersection((a, b)), 1.5, 1.5)
    assert not inside(Intersection((a, b)), 0.5, 0.5)
    with pytest.raises(TypeError):
        inside("not a region", 0.0, 0.0)


def test_the_grid_reaches_half_a_unit_past_the_shapes() -> None:
    points = grid_points(2)
    assert (min(points), max(points)) == ((-0.5, -0.5), (3.0, 3.0))
    assert len(points) == 8 * 8
