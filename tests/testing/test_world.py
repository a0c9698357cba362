"""The relay benchmarks' world (testing/world.py)."""

from __future__ import annotations

import numpy as np

from fanout.testing.world import MOVE_EVERY, VIEW_SIDE, WORLD, Coverage, Entities, routes
from fanout.views import Box


def test_entities_move_and_stay_inside_the_world() -> None:
    entities = Entities(500, seed=1)
    before = entities.xy.copy()
    for _ in range(50):
        entities.step(10.0)
    assert not np.array_equal(before, entities.xy)
    assert ((entities.xy >= 0) & (entities.xy <= WORLD)).all()


def test_subscribers_of_a_group_share_a_route_and_views_stay_in_the_world() -> None:
    everyone = routes(6, group=3, seed=4)
    assert everyone[0] is everyone[2] and everyone[3] is everyone[5]
    assert everyone[0] is not everyone[3]
    route = everyone[0]
    for step in range(0, 500, 7):
        box = route.box(step)
        assert box.lo[0] >= 0 and box.hi[0] <= WORLD
        assert np.isclose(box.hi[0] - box.lo[0], VIEW_SIDE)
    assert route.step(route.offset + 3 * MOVE_EVERY) == 3


def test_coverage_holds_the_entities_inside_the_primitives() -> None:
    coverage = Coverage()
    coverage.add(1, Box((0, 0), (64, 64)))  # on the raster
    coverage.add(2, Box((100.5, 100.5), (101.5, 101.5)))  # off it: matched exactly
    xy = np.array([[10.0, 101.0, 500.0], [10.0, 101.0, 500.0]])
    assert coverage.inside(xy).tolist() == [True, True, False]
    assert coverage.inside(xy, prims=[2]).tolist() == [False, True, False]
    coverage.remove(1)
    coverage.remove(2)
    assert not coverage.inside(xy).any()
