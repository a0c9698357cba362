"""The sweep over boxes (``relay.data.boxes``) against every pair tested one by one: the same
boxes meet, with or without their borders, in any chunking, some far wider than others."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data import boxes as module
from fanout.relay.data.boxes import Boxes
from fanout.views.region import Box

bound = st.one_of(st.integers(-10, 10).map(float), st.sampled_from([-1.7e308, 1.7e308]))


@st.composite
def box(draw: st.DrawFn, dims: int) -> Box:
    lo = [draw(bound) for _ in range(dims)]
    width = draw(st.one_of(st.integers(0, 8).map(float), st.just(40.0)))  # one far wider
    sizes = [width, *(draw(st.integers(0, 8).map(float)) for _ in range(dims - 1))]
    return Box(tuple(lo), tuple(a + b for a, b in zip(lo, sizes, strict=True)))


def meet(a: Box, b: Box, interior: bool) -> bool:
    if interior:
        return all(a.lo[i] < b.hi[i] and b.lo[i] < a.hi[i] for i in range(a.dims))
    return all(a.lo[i] <= b.hi[i] and b.lo[i] <= a.hi[i] for i in range(a.dims))


@st.composite
def two_sets(draw: st.DrawFn) -> tuple[list[Box], list[Box]]:
    dims = draw(st.integers(2, 3))
    return draw(st.lists(box(dims), max_size=12)), draw(st.lists(box(dims), max_size=12))


@settings(max_examples=400, deadline=None)
@given(sets=two_sets(), interior=st.booleans(), chunk=st.integers(1, 40))
def test_the_pairs_that_meet_are_those_every_pair_tested_says(
    sets: tuple[list[Box], list[Box]], interior: bool, chunk: int
) -> None:
    mine, theirs = sets
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "CHUNK", chunk)
        ours, others = Boxes(mine), Boxes(theirs)
        found = {
            (int(ours.order[i]), int(others.order[j]))
            for a, b in ours.pairs(others, interior=interior)
            for i, j in zip(a, b, strict=True)
        }
        touched = ours.any_meeting(others).tolist()
    truth = {
        (i, j) for i, a in enumerate(mine) for j, b in enumerate(theirs) if meet(a, b, interior)
    }
    assert found == truth
    assert touched == [any(meet(a, b, False) for a in mine) for b in theirs]
    for j, b in enumerate(theirs):
        assert ours.meeting(b, interior=interior).tolist() == sorted(i for i, k in truth if k == j)
