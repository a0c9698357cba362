"""What a relay acquires upstream for the views it serves, in whole conversations
(relay/core/relaycore.py with relay/core/planner.py): each widening, enclosures, fits, views ahead
of their motion, and views anywhere in the floats."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.relay.core.conversations import (
    CLIENT,
    batch,
    frames,
    keys,
    pushes,
    relay,
    rows,
    subscribe,
)

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM
from fanout.views import Box, Sphere
from fanout.views.region import RegionUnion, Sector
from fanout.wire.messages import Acquire, Push, Subscribe


@pytest.mark.parametrize("widen", ["tiles", "margin", "enclose", "exact", "fit"])
@pytest.mark.parametrize(
    "view",
    [
        Box((-1e308, -1e308), (1e308, 1e308)),  # everything, as far as floats go
        Box((-1.7e308, 0.0), (1.7e308, 1.0)),  # its extent overflows
        Box((0.0, 0.0), (1e300, 1e300)),
        Box((1e308, 1e308), (1e308, 1e308)),  # a point where no tile can be computed
    ],
)
def test_a_view_near_the_largest_floats_is_acquired_as_it_is_and_served(
    view: Box, widen: str
) -> None:
    policy = Policy(widen=widen, grace=0.0, overshoot=0.75 if widen == "enclose" else 0.0)
    core = relay(policy)
    acquires = subscribe(core, view)
    assert acquires
    core.on_batch(
        batch(
            0,
            rows(k1=(1.0, 0.5), k2=(1e308, 1e308), k3=(-5.0, -5.0)),
            snapshots=[a.prim for a in acquires],
        )
    )
    (push,) = pushes(core)
    assert isinstance(push, Push)
    inside = [
        k
        for k, (x, y) in {1: (1.0, 0.5), 2: (1e308, 1e308), 3: (-5.0, -5.0)}.items()
        if view.lo[0] <= x <= view.hi[0] and view.lo[1] <= y <= view.hi[1]
    ]
    assert keys(push.entered) == inside


ANY = st.floats(allow_nan=False, allow_infinity=False)
RADIUS = st.floats(0, 1.7e308)


@st.composite
def any_region(draw: st.DrawFn) -> object:
    """A region anywhere in the floats, of any size."""

    def one(kind: str) -> object:
        if kind == "box":
            xs, ys = sorted([draw(ANY), draw(ANY)]), sorted([draw(ANY), draw(ANY)])
            return Box((xs[0], ys[0]), (xs[1], ys[1]))
        centre = (draw(ANY), draw(ANY))
        if kind == "sphere":
            return Sphere(centre, draw(RADIUS))
        return Sector(centre, draw(RADIUS), draw(st.floats(-7, 7)), draw(st.floats(0.01, 3.14)))

    kind = draw(st.sampled_from(["box", "sphere", "sector", "union"]))
    if kind == "union":
        return RegionUnion([one(draw(st.sampled_from(["box", "sphere", "sector"]))) for _ in "ab"])
    return one(kind)


FOUND_RADIUS = 1591981113813695.0  # found by the property test below


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_region(), min_size=1, max_size=3), st.sampled_from(["tiles", "exact"]))
@example([Sphere((0.0, 0.0), 1.3407807929942597e154)], "exact")  # its square overflowed: raised
@example([Sphere((0.0, 8.988465674311579e307), 8.98846567431158e307)], "tiles")  # bounds: inf
@example([Box((-1.7e308, -1.7e308), (1.7e308, 1.7e308))], "tiles")  # cells never shrank
@example(  # the residual, once held, did not cover the union: never served
    [
        Box((0, 0), (0, 0)),
        RegionUnion((Sector((0, 0), FOUND_RADIUS, 6.25, 1.09375), Sphere((0, 0), FOUND_RADIUS))),
    ],
    "exact",
)
def test_regions_anywhere_in_the_floats_are_served_without_failing(views, widen) -> None:  # type: ignore[no-untyped-def]
    """Subscribing, taking a batch (rows near the largest floats too), pushing and housekeeping
    with views of any size anywhere: whatever the relay decides, nothing raises (a raise in the
    pump would stop it for every subscriber)."""
    core = relay(Policy(widen=widen, grace=0.0))
    prims = [a.prim for number, view in enumerate(views, 1) for a in subscribe(core, view, number)]
    points = rows(k1=(0.0, 0.0), k2=(1e308, 1e308), k3=(-1e308, -1e308), k4=(1.7e308, 5.0))
    core.on_batch(batch(0, points, snapshots=prims))
    served = {push.sub: push for push in pushes(core) if isinstance(push, Push)}
    assert sorted(served) == list(range(1, len(views) + 1))
    xs, ys = np.array(points["x"]), np.array(points["y"])
    for number, view in enumerate(views, 1):
        with np.errstate(over="ignore", invalid="ignore"):
            inside = np.array(points["id"])[view.match(xs, ys)]
        assert keys(served[number].entered) == sorted(inside.tolist())
    core.housekeeping(1000.0)


@pytest.mark.parametrize("widen", ["tiles", "margin", "exact", "enclose", "fit"])
def test_every_widening_serves_a_second_view_beside_the_first(widen: str) -> None:
    core = relay(Policy(widen=widen, grace=0.0))  # type: ignore[arg-type]
    first = subscribe(core, Box((0, 0), (10, 10)), sub=1)
    truth = rows(k1=(5, 5), k2=(15, 5), k3=(40, 40))
    core.on_batch(batch(0, truth, snapshots=[a.prim for a in first]))
    pushes(core, now=1.0)
    second = subscribe(core, Box((8, 0), (18, 10)), sub=2)  # half covered by the first
    core.on_batch(batch(1, truth, snapshots=[a.prim for a in second]))
    served = {p.sub: p for p in pushes(core, now=2.0)}  # type: ignore[union-attr]
    assert keys(served[2].entered) == [2]  # type: ignore[union-attr]
    assert served[2].full  # type: ignore[union-attr]


def test_an_enclosure_overshoots_and_the_first_is_released_once_enclosed() -> None:
    core = relay(Policy(widen="enclose", margin=0.0, overshoot=1.0, grace=0.0))
    (first,) = subscribe(core, Box((0, 0), (10, 10)), sub=1)
    core.on_batch(batch(0, rows(k1=(5, 5), k2=(18, 5)), snapshots=[first.prim]))
    (grown,) = subscribe(core, Box((5, 0), (15, 10)), sub=2)
    assert grown.view == Box((0, 0), (20, 10))  # 5 beyond the first, pushed out 5 more
    assert subscribe(core, Box((12, 2), (19, 8)), sub=3) == []  # the overshoot already holds it
    core.on_batch(batch(1, rows(k1=(5, 5), k2=(18, 5)), snapshots=[grown.prim]))
    core.end_epoch()
    released = frames(core.housekeeping(now=50.0), UPSTREAM)
    assert [r.prim for r in released] == [first.prim]  # type: ignore[attr-defined]
    assert core.stats()["primitives_acquired"] == 2
    assert core.stats()["primitives"] == 1


def test_fit_refits_to_the_views_the_relay_serves_and_releases_what_it_replaced() -> None:
    """The relay hands ``fit`` the views it serves: the second view's primitive is fitted to
    both views, not to the first primitive's guess, which is released once the refit is
    ready."""
    core = relay(Policy(widen="fit", margin=0.5, grace=0.0))
    (first,) = subscribe(core, Box((0, 0), (10, 10)), sub=1)
    assert first.view == Box((-5, -5), (15, 15))  # alone: stretched by half its side
    core.on_batch(batch(0, rows(k1=(5, 5), k2=(20, 5)), snapshots=[first.prim]))
    (refit,) = subscribe(core, Box((12, 0), (22, 10)), sub=2)
    # both views span x 0..22, y 0..10; two views: stretched by at most half a side, 5
    assert refit.view == Box((-5, -5), (27, 15))
    core.on_batch(batch(1, rows(k1=(5, 5), k2=(20, 5)), snapshots=[refit.prim]))
    core.end_epoch()
    released = frames(core.housekeeping(now=50.0), UPSTREAM)
    assert [r.prim for r in released] == [first.prim]  # type: ignore[attr-defined]
    served = {p.sub: p for p in pushes(core, now=60.0)}  # type: ignore[union-attr]
    assert keys(served[2].entered) == [2]  # type: ignore[union-attr]


def test_a_moving_view_is_acquired_ahead_of_its_motion() -> None:
    core = relay(Policy(widen="margin", margin=0.0, lead=2.0))
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10))), now=0.0)
    moved = core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((20, 0), (30, 10))), now=1.0)
    (acquire,) = frames(moved, UPSTREAM)
    assert isinstance(acquire, Acquire)
    assert acquire.view == Box((20, 0), (70, 10))  # 20 units/s, 2 s ahead, on the side it goes
    # undated view changes (no clock) estimate nothing
    core.on_subscribe(CLIENT, Subscribe(2, "agents", Box((500, 0), (510, 10))))
    undated = core.on_subscribe(CLIENT, Subscribe(2, "agents", Box((520, 0), (530, 10))))
    assert [f.view for f in frames(undated, UPSTREAM)] == [Box((520, 0), (530, 10))]  # type: ignore[attr-defined]
