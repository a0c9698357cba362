"""Routing views to relays by area: stable, consistent when relays come and go, spread evenly."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.client import rank
from fanout.client.routing import area
from fanout.errors import InvalidView
from fanout.views import Box, Relative, Sphere, parse

RELAYS = [f"ws://relay-{i}:7701" for i in range(6)]


def test_views_of_one_area_meet_at_one_relay() -> None:
    a, b = Box((10, 10), (40, 40)), Sphere((30, 20), 5)  # centres in the same 256-cell
    assert area(a) == area(b) == "cell:0,0"
    assert rank(RELAYS, a) == rank(RELAYS, b)
    assert sorted(rank(RELAYS, a)) == sorted(RELAYS)  # a ranking of every relay, once
    assert rank([*RELAYS, RELAYS[0]], a) == rank(RELAYS, a)
    # the grid's side sets what counts as one area
    assert area(Box((300, 0), (310, 10))) == "cell:1,0"
    assert area(Box((300, 0), (310, 10)), side=1000) == "cell:0,0"


def test_views_with_no_place_meet_by_their_text_and_relative_ones_by_their_entity() -> None:
    query = "SELECT * FROM agents WHERE kind = 3"
    assert rank(RELAYS, parse(query, "sql")) == rank(RELAYS, parse(query, "sql"))
    assert area(parse("fleet/+/speed", "topic")) == "view:fleet/+/speed"
    near = Relative(42, Sphere((0, 0), 50))
    assert area(near) == area(Relative(42, Box((-5, -5), (5, 5)))) == "entity:42"


def test_views_with_one_key_meet_at_one_relay_wherever_they_lie() -> None:
    near, far = Box((250, 250), (260, 260)), Box((9000, 0), (9010, 10))
    assert rank(RELAYS, near, key="goal-3") == rank(RELAYS, far, key="goal-3")
    firsts = {rank(RELAYS, near, key=f"goal-{i}")[0] for i in range(60)}
    assert firsts == set(RELAYS)  # different keys spread over the relays
    assert rank(RELAYS, near, key=None) == rank(RELAYS, near)


def test_views_near_the_largest_floats_have_an_area() -> None:
    # 8e307 / 0.1 is beyond the floats: its cell is "inf", as an overflowing centre's is
    assert area(Box((8e307, 0.0), (8e307, 1.0)), side=0.1) == "cell:inf,5"
    assert area(Box((1.7e308, 0.0), (1.7e308, 1.0))) == area(Box((1.6e308, 0.0), (1.7e308, 1.0)))


def test_bad_routing_input_is_refused() -> None:
    with pytest.raises(InvalidView, match="no relays"):
        rank([], Box((0, 0), (1, 1)))
    with pytest.raises(InvalidView, match="positive"):
        rank(RELAYS, Box((0, 0), (1, 1)), side=0)
    with pytest.raises(InvalidView, match="key must not be empty"):
        rank(RELAYS, Box((0, 0), (1, 1)), key="")


@settings(max_examples=200, deadline=None)
@given(
    x=st.floats(-1e6, 1e6),
    y=st.floats(-1e6, 1e6),
    relays=st.lists(st.sampled_from(RELAYS), min_size=2, unique=True),
    gone=st.integers(0, 5),
)
def test_removing_a_relay_moves_only_the_areas_it_held(
    x: float, y: float, relays: list[str], gone: int
) -> None:
    """Oracle: the ranking without one relay is the full ranking with that relay left out."""
    view = Box((x, y), (x + 10, y + 10))
    lost = relays[gone % len(relays)]
    rest = [relay for relay in relays if relay != lost]
    assert rank(rest, view) == [relay for relay in rank(relays, view) if relay != lost]


def test_areas_spread_evenly_over_the_relays() -> None:
    rng = np.random.default_rng(3)
    firsts = collections.Counter(
        rank(RELAYS[:4], Box((x, y), (x + 1, y + 1)))[0]
        for x, y in rng.uniform(0, 256 * 64, (4000, 2))
    )
    assert set(firsts) == set(RELAYS[:4])
    assert max(firsts.values()) < 1.2 * min(firsts.values())
