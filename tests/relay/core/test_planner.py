"""Coverage planning: tiles and margins, and releasing what is no longer needed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.relay.core.planner import (
    WIDENINGS,
    Policy,
    grown,
    tile_side,
    tiles,
    to_acquire,
    unneeded,
    velocity,
)
from fanout.relay.core.upstream import Primitive
from fanout.views import Box, Sphere, covers
from fanout.views.topic import parse as topic


def test_a_covered_view_needs_nothing() -> None:
    held = [Box((0, 0), (100, 100))]
    assert to_acquire(held, Box((10, 10), (20, 20)), Policy()) == []


def test_tiles_cover_the_grown_view_and_skip_tiles_already_held() -> None:
    view = Box((100, 100), (150, 150))
    side = tile_side(view)
    assert side == 128.0
    first = to_acquire([], view, Policy())
    assert covers(first, grown(view, Policy()))
    assert all(t.hi[0] - t.lo[0] == side for t in first)
    # a neighbour's view in the same tiles needs nothing more
    assert to_acquire(first, Box((110, 120), (160, 170)), Policy()) == []
    # a view half in new tiles gets only the new ones
    more = to_acquire(first, Box((240, 100), (290, 150)), Policy())
    assert more
    assert not set(more) & set(first)


def test_margin_policy_takes_the_view_plus_margin() -> None:
    view = Sphere((50, 50), 10)
    assert to_acquire([], view, Policy(widen="margin", margin=0.5)) == [Box((30, 30), (70, 70))]


def test_a_long_thin_view_gets_one_primitive_not_huge_tiles() -> None:
    view = Box((0, 0), (10, 10000))
    acquired = to_acquire([], view, Policy())
    assert acquired == [Box((-5, -5000), (15, 15000))]


def test_a_flat_view_still_gets_a_primitive() -> None:
    view = Box((5, 5), (5, 5))
    acquired = to_acquire([], view, Policy())
    assert acquired
    assert covers(acquired, view)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-1, 2), st.integers(-1, 2)), max_size=16),
    st.tuples(st.floats(-300, 300), st.floats(-300, 300)),
    st.tuples(st.floats(1, 150), st.floats(1, 150)),
)
@example(cells=[(0, 0)], corner=(0.0, -5e-324), size=(1.0, 1.0))  # lo / side underflows to -0.0
def test_a_view_whose_own_tiles_are_held_needs_nothing_and_is_covered(cells, corner, size) -> None:  # type: ignore[no-untyped-def]
    """The quick test ``to_acquire`` makes first (every tile of the view's own grid that it
    touches is held) agrees with the coverage algebra: it never skips a view left uncovered,
    and a view it passes is covered."""
    view = Box(corner, (corner[0] + size[0], corner[1] + size[1]))
    side = tile_side(view)
    i0, j0 = (math.floor(c / side) for c in corner)  # held tiles near the view's own
    held = [
        Box(((i0 + i) * side, (j0 + j) * side), ((i0 + i + 1) * side, (j0 + j + 1) * side))
        for i, j in cells
    ]
    needed = to_acquire(held, view, Policy())
    assert covers(held + needed, view)
    if set(tiles(view, side)) <= set(held):
        assert needed == []
    if not needed:
        assert covers(held, view)


FLOATS = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(FLOATS, FLOATS), min_size=2, max_size=2),
    st.sampled_from(["tiles", "margin", "enclose", "exact", "fit"]),
    st.lists(st.tuples(FLOATS, FLOATS), min_size=2, max_size=2),
)
@example(corners=[(-1e308, 1e308), (-1e308, 1e308)], widen="tiles", other=[(0.0, 1.0), (0.0, 1.0)])
@example(corners=[(1e308, 1e308), (-5.0, 5.0)], widen="tiles", other=[(0.0, 1.0), (0.0, 1.0)])
def test_any_finite_box_gets_primitives_that_cover_it(corners, widen, other) -> None:  # type: ignore[no-untyped-def]
    """Whatever finite box is asked for — the largest floats included, where tiles and margins
    would overflow — the primitives acquired cover it, with or without another one held."""
    view = Box(*zip(*(sorted(axis) for axis in corners), strict=True))
    held = [Box(*zip(*(sorted(axis) for axis in other), strict=True))]
    policy = Policy(widen=widen, overshoot=0.75 if widen == "enclose" else 0.0)
    for before in ([], held):
        assert covers(before + to_acquire(before, view, policy), view)


def test_a_view_too_large_to_tile_has_no_tile_side() -> None:
    assert tile_side(Box((-1e308, 0.0), (1e308, 1.0))) is None
    assert tile_side(Box((0.0, 0.0), (1e300, 1.0))) == 2.0**998


def test_tiles_enumerates_the_grid_cells_a_box_touches() -> None:
    assert tiles(Box((-1, 0), (1, 0.5)), 1.0) == [
        Box((-1, 0), (0, 1)),
        Box((0, 0), (1, 1)),
        Box((1, 0), (2, 1)),
    ]


def test_tiles_of_a_box_starting_a_hair_below_a_grid_line_include_the_tile_below() -> None:
    # -5e-324 / 2.0 underflows to -0.0, whose floor is tile 0; the box starts below it
    assert tiles(Box((0.0, -5e-324), (1.0, 1.0)), 2.0) == [
        Box((0.0, -2.0), (2.0, 0.0)),
        Box((0.0, 0.0), (2.0, 2.0)),
    ]


def test_unneeded_releases_primitives_no_view_depends_on() -> None:
    old = Primitive(1, "agents", Box((0, 0), (10, 10)), ready=True)
    new = Primitive(2, "agents", Box((20, 0), (30, 10)), ready=True)
    wide = Primitive(3, "agents", Box((0, 0), (30, 10)), ready=True)
    assert unneeded([old, new], [Box((21, 1), (22, 2))]) == [old]
    # the wide one covers everything, so the older small ones go
    assert unneeded([old, new, wide], [Box((1, 1), (2, 2)), Box((21, 1), (22, 2))]) == [old, new]


def brute_unneeded(prims: list[Primitive], views: list[Box]) -> list[Primitive]:
    """``unneeded``'s rule, every pair tested: oldest first, a primitive goes when each view
    meeting it stays covered by the other ready primitives left; one a view meets and no
    other left ready primitive overlaps (interiors) is kept without asking coverage."""

    def meet(a: Box, b: Box, interior: bool) -> bool:
        if interior:
            return all(a.lo[i] < b.hi[i] and b.lo[i] < a.hi[i] for i in range(2))
        return all(a.lo[i] <= b.hi[i] and b.lo[i] <= a.hi[i] for i in range(2))

    left = [p for p in prims if p.ready]
    gone: list[Primitive] = []
    for prim in sorted(prims, key=lambda p: p.prim):
        box = prim.view
        assert isinstance(box, Box)
        near = [v for v in views if meet(v, box, False)]
        rest = [p for p in left if p is not prim]
        if near and not any(meet(p.view, box, True) for p in rest):  # type: ignore[arg-type]
            continue
        if all(covers([p.view for p in rest], v) for v in near):
            gone.append(prim)
            left = rest
    return gone


small_box = st.builds(
    lambda x, y, w, h: Box((float(x), float(y)), (float(x + w), float(y + h))),
    st.integers(0, 12),
    st.integers(0, 12),
    st.integers(1, 6),
    st.integers(1, 6),
)


@settings(max_examples=200, deadline=None)
@given(
    held=st.lists(st.tuples(small_box, st.booleans()), max_size=10),
    views=st.lists(small_box, max_size=8),
)
def test_unneeded_lets_go_of_what_every_pair_tested_says(
    held: list[tuple[Box, bool]], views: list[Box]
) -> None:
    prims = [Primitive(i, "agents", box, ready=ready) for i, (box, ready) in enumerate(held)]
    found = unneeded(prims[::-1], views)
    assert [p.prim for p in found] == [p.prim for p in brute_unneeded(prims, views)]


def test_a_primitive_is_kept_while_its_replacement_is_not_ready() -> None:
    old = Primitive(1, "agents", Box((0, 0), (10, 10)), ready=True)
    pending = Primitive(2, "agents", Box((0, 0), (10, 10)), ready=False)
    assert unneeded([old, pending], [Box((1, 1), (2, 2))]) == [pending]


def test_bad_policies_are_refused() -> None:
    with pytest.raises(InvalidView, match="widen='grid'"):
        Policy(widen="grid")  # type: ignore[arg-type]
    with pytest.raises(InvalidView, match="margin"):
        Policy(margin=-1)


def test_exact_policy_takes_only_what_is_not_held() -> None:
    held = [Box((0, 0), (50, 100))]
    view = Box((40, 10), (80, 20))
    acquired = to_acquire(held, view, Policy(widen="exact"))
    assert covers([*held, *acquired], view)
    assert sum(a.measure() for a in acquired) == pytest.approx(30 * 10)  # nothing more
    assert to_acquire([], Sphere((5, 5), 2), Policy(widen="exact")) == [Sphere((5, 5), 2)]


def test_enclose_policy_merges_the_view_with_the_held_primitives_it_meets() -> None:
    held = [Box((0, 0), (10, 10)), Box((500, 500), (510, 510))]
    view = Box((12, 0), (20, 8))
    (box,) = to_acquire(held, view, Policy(widen="enclose", margin=0.25))
    assert box == Box((0, -2), (22, 10))  # the grown view and the near box; not the far one
    assert to_acquire([], view, Policy(widen="enclose", margin=0)) == [view]


def test_an_overshoot_pushes_each_side_the_enclosure_must_grow_further_out() -> None:
    held = [Box((0, 0), (10, 10))]
    view = Box((8, -2), (14, 6))  # beyond the held box by 4 at the right, 2 at the bottom
    policy = Policy(widen="enclose", margin=0, overshoot=0.5)
    assert to_acquire(held, view, policy) == [Box((0, -3), (16, 10))]
    assert to_acquire([], view, policy) == [view]  # nothing to grow from
    assert to_acquire(held, Box((2, 2), (5, 5)), policy) == []  # covered
    with pytest.raises(InvalidView, match="overshoot"):
        Policy(widen="enclose", overshoot=-0.5)
    with pytest.raises(InvalidView, match="overshoot is for enclose widening, not tiles"):
        Policy(overshoot=0.5)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-10, 10), st.integers(-10, 10)), min_size=1, max_size=40),
    st.sampled_from([0.0, 0.25, 1.0]),
)
def test_an_enclosure_grows_by_one_plus_overshoot_times_what_each_side_needs(
    offsets, overshoot
) -> None:
    """Oracle: views arriving one by one around a point (each meets the held box), each side of
    the one held box moving out by exactly ``1 + overshoot`` times what the new view sticks
    out, never in."""
    policy = Policy(widen="enclose", margin=0, overshoot=overshoot, grace=0)
    held: list[Box] = []
    for dx, dy in offsets:
        view = Box((float(dx), float(dy)), (dx + 20.0, dy + 20.0))
        new = to_acquire(held, view, policy)
        if held and new:
            (old,), (box,) = held, new
            for axis in range(2):
                below = max(old.lo[axis] - view.lo[axis], 0.0)
                above = max(view.hi[axis] - old.hi[axis], 0.0)
                assert box.lo[axis] == old.lo[axis] - (1 + overshoot) * below
                assert box.hi[axis] == old.hi[axis] + (1 + overshoot) * above
        held = new or held  # the enclosed box is released (grace 0)
        assert covers(held, view)


def test_a_growing_cluster_of_views_is_re_acquired_less_often_with_an_overshoot() -> None:
    """Spectators gathering around a point: 200 views, each side 16-32 and off the point by
    at most a quarter side. With an overshoot the one enclosure grows fewer times."""
    rng = np.random.default_rng(7)
    side = rng.uniform(16, 32, 200)
    centre = rng.uniform(-0.25, 0.25, (200, 2)) * side[:, None]

    def growths(overshoot: float) -> int:
        policy = Policy(widen="enclose", margin=0, overshoot=overshoot)
        held: list[Box] = []
        count = 0
        for (cx, cy), s in zip(centre.tolist(), side.tolist(), strict=True):
            view = Box((cx - s / 2, cy - s / 2), (cx + s / 2, cy + s / 2))
            new = to_acquire(held, view, policy)
            count += bool(new)
            held = new or held
            assert covers(held, view)
        return count

    assert growths(0.5) < growths(0.0)


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(InvalidView, match="tiles, margin, exact, enclose, fit"):
        Policy(widen="nearest")  # type: ignore[arg-type]


boxes = st.builds(
    lambda x, y, w, h: Box((x, y), (x + w, y + h)),
    st.integers(0, 90).map(float),
    st.integers(0, 90).map(float),
    st.integers(1, 30).map(float),
    st.integers(1, 30).map(float),
)


def test_velocity_is_the_centre_move_over_the_time_between_view_changes() -> None:
    before, after = Box((0, 0), (10, 10)), Box((4, -2), (14, 8))
    assert velocity(before, after, 2.0) == (2.0, -1.0)
    assert velocity(before, after, 0.0) is None  # no time passed
    assert velocity(before, Box((500, 0), (510, 10)), 1.0) is None  # a jump, not motion
    assert velocity(before, Box((0, 0, 0), (1, 1, 1)), 1.0) is None  # other dimensions
    assert velocity(Sphere((0, 0), 5), Sphere((3, 4), 5), 1.0) == (3.0, 4.0)


def test_a_lead_grows_the_view_ahead_of_its_motion_only() -> None:
    view = Box((100, 100), (110, 110))
    policy = Policy(widen="margin", margin=0.1, lead=2.0)
    assert grown(view, policy, (5.0, -3.0)) == Box((99, 93), (121, 111))
    assert grown(view, policy) == grown(view, Policy(widen="margin", margin=0.1))
    assert grown(view, Policy(widen="margin", margin=0.1), (5.0, -3.0)) == Box((99, 99), (111, 111))
    with pytest.raises(InvalidView, match="lead"):
        Policy(lead=-1)


@pytest.mark.parametrize("widen", ["margin", "tiles", "enclose"])
def test_a_steadily_moving_view_acquires_less_often_with_a_lead(widen: str) -> None:
    """A view moving 4 units/s, re-subscribed every second for a minute: with 3 s of lead it
    leaves what was acquired for it less often, and is always covered."""

    def acquisitions(lead: float) -> int:
        policy = Policy(widen=widen, margin=0.2, lead=lead)  # type: ignore[arg-type]
        held: list[Box] = []
        count, before = 0, None
        for second in range(60):
            view = Box((4.0 * second, 0), (4.0 * second + 20, 20))
            moving = None if before is None else velocity(before, view, 1.0)
            new = to_acquire(held, view, policy, moving)
            count += bool(new)
            held += new
            assert covers(held, view)
            before = view
        return count

    assert acquisitions(lead=3.0) < acquisitions(lead=0.0)


def test_exact_widening_takes_no_lead() -> None:
    view = Box((0, 0), (10, 10))
    assert to_acquire([], view, Policy(widen="exact", lead=5.0), (3.0, 0.0)) == [view]


@settings(max_examples=150, deadline=None)
@given(st.lists(boxes, max_size=6), boxes, st.sampled_from(WIDENINGS), st.sampled_from([0.0, 0.5]))
def test_every_policy_covers_the_view_with_what_is_held(held, view, widen, overshoot) -> None:
    """Oracle: after acquiring, held + acquired cover the view (checked on a grid of points)."""
    policy = Policy(widen=widen, overshoot=overshoot if widen == "enclose" else 0.0)
    acquired = to_acquire(held, view, policy)
    assert covers([*held, *acquired], view)
    xs, ys = np.meshgrid(
        np.linspace(view.lo[0], view.hi[0], 7), np.linspace(view.lo[1], view.hi[1], 7)
    )
    inside = np.zeros(xs.size, dtype=bool)
    for region in [*held, *acquired]:
        inside |= region.match(xs.ravel(), ys.ravel())
    assert inside.all()


# -- fit: one primitive fitted to the cluster of views -------------------------------------------


def _meets(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Closed boxes (x0, y0, x1, y1) meet: the oracle's own test, plain comparisons."""
    return a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]


def _fit_oracle(
    held: list[Box], view: Box, views: list[Box], most: float
) -> tuple[tuple[float, float, float, float], set[tuple[float, float, float, float]]]:
    """Brute force of ``fit``: the views meeting the view or a held box meeting it, their
    bounds by plain min/max, each side moved out by min(extent / (n - 1), most * view's).

    Returns:
        The box as (x0, y0, x1, y1), and the views it was fitted to.
    """
    flat = [(b.lo[0], b.lo[1], b.hi[0], b.hi[1]) for b in (view, *views)]
    mine = flat[0]
    near = [mine] + [
        (b.lo[0], b.lo[1], b.hi[0], b.hi[1])
        for b in held
        if _meets((b.lo[0], b.lo[1], b.hi[0], b.hi[1]), mine)
    ]
    members = {box for box in flat if any(_meets(box, other) for other in near)}
    lo = [min(box[axis] for box in members) for axis in (0, 1)]
    hi = [max(box[axis + 2] for box in members) for axis in (0, 1)]
    n = len(members)
    out = []
    for axis in (0, 1):
        step = min((hi[axis] - lo[axis]) / max(n - 1, 1), most * (mine[axis + 2] - mine[axis]))
        out.append((lo[axis] - step, hi[axis] + step))
    return (out[0][0], out[1][0], out[0][1], out[1][1]), members


@settings(max_examples=300, deadline=None)
@given(
    st.lists(boxes, max_size=5),
    boxes,
    st.lists(boxes, max_size=12),
    st.sampled_from([0.0, 0.075, 0.5]),
)
def test_fit_is_the_stretched_bounding_box_of_the_views_it_joins(held, view, views, most) -> None:  # type: ignore[no-untyped-def]
    """Oracle: brute force over the views and held boxes; the primitive covers every view it
    was fitted to, the view among them."""
    acquired = to_acquire(held, view, Policy(widen="fit", margin=most), views=views)
    if covers(held, view):
        assert acquired == []
        return
    (box,) = acquired
    (x0, y0, x1, y1), members = _fit_oracle(held, view, views, most)
    assert box.lo == pytest.approx((x0, y0)) and box.hi == pytest.approx((x1, y1))
    for a0, b0, a1, b1 in members:
        assert covers([box], Box((a0, b0), (a1, b1)))


def test_fit_takes_views_of_other_kinds_and_dimensions_as_nothing() -> None:
    view = Box((0, 0), (10, 10))
    others = [Box((0, 0, 0), (5, 5, 5)), topic("a/#"), Sphere((5, 5), 2)]
    # the sphere meets the view: two views, stretch min(extent / 1, 0.5 * 10) = 5
    assert to_acquire([], view, Policy(widen="fit", margin=0.5), views=others) == [
        Box((-5, -5), (15, 15))
    ]


def test_fit_refits_a_cluster_and_forgets_a_first_guess_that_went_too_far() -> None:
    """A first view alone is stretched by the margin; once the cluster has grown, the refit is
    the cluster's bounding box stretched by its extent over n - 1, tighter than the guess
    where the views did not go."""
    policy = Policy(widen="fit", margin=0.5)
    first = Box((0, 0), (10, 10))
    (guess,) = to_acquire([], first, policy, views=[first])
    assert guess == Box((-5, -5), (15, 15))
    views = [first] + [Box((float(x), 0.0), (x + 10.0, 10.0)) for x in range(1, 11)]
    (refit,) = to_acquire([guess], views[-1], policy, views=views)
    # 11 views over x in [0, 20], y in [0, 10]: stretched by 20 / 10 and 10 / 10
    assert refit == Box((-2, -1), (22, 11))
    assert refit.lo[1] > guess.lo[1] and refit.hi[1] < guess.hi[1]


def test_a_growing_cluster_costs_fit_little_more_than_its_union() -> None:
    """Spectators gathering around a point (bench/sharing.py's views): what fit holds once all
    200 have come is within 20% of their bounding box's area, while after the first 20 it
    already holds at least 85% of what it holds at the end (enclose with an overshoot: less)."""
    rng = np.random.default_rng(11)
    side = rng.uniform(16, 32, 200)
    centre = rng.uniform(-0.25, 0.25, (200, 2)) * side[:, None]
    views = [
        Box((cx - s / 2, cy - s / 2), (cx + s / 2, cy + s / 2))
        for (cx, cy), s in zip(centre.tolist(), side.tolist(), strict=True)
    ]
    policy = Policy(widen="fit", margin=0.075, grace=0)
    held: list[Box] = []
    areas = []
    for count, view in enumerate(views, 1):
        new = to_acquire(held, view, policy, views=views[:count])
        held = new or held  # each refit replaces the one box (grace 0)
        assert covers(held, view)
        areas.append(held[0].measure())
    (box,) = held
    union = Box(
        (min(v.lo[0] for v in views), min(v.lo[1] for v in views)),
        (max(v.hi[0] for v in views), max(v.hi[1] for v in views)),
    )
    assert box.measure() <= 1.2 * union.measure()
    assert areas[19] >= 0.85 * areas[-1]
