"""The sharing benchmark's set-up (testing/sharing.py)."""

from __future__ import annotations

import numpy as np

from fanout.testing.sharing import POINTS, VIEW_SIDE, WORLD, Views


def test_views_crowd_around_their_points_and_are_drawn_the_same_each_time() -> None:
    views = Views.draw(400)
    assert views.lo.shape == views.hi.shape == (400, 2)
    assert ((views.point >= 0) & (views.point < POINTS)).all()
    side = views.hi - views.lo
    assert (side >= VIEW_SIDE / 2 - 1e-9).all() and (side <= VIEW_SIDE + 1e-9).all()
    assert ((views.lo >= 0) & (views.hi <= WORLD)).all()
    again = Views.draw(400)
    assert np.array_equal(views.lo, again.lo)
    assert views.box(0) == [views.lo[0].tolist(), views.hi[0].tolist()]
