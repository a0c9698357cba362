"""The map of responsibility (``cluster.responsibility``) against brute force.

The oracles are written here from what the map promises, not from how it computes: an owner is
a live member; the owner among all members stays the owner among any subset that still holds it
(checked over every such subset); a join moves parts only to the joiner, a leave only away from
the leaver; a region view's cell is found by walking the grid's lines.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fanout.cluster.redirects import moved as moved_subscription
from fanout.cluster.redirects import redirect
from fanout.cluster.responsibility import (
    BUCKETS,
    TOPIC_DEPTH,
    Assignment,
    NoLiveRelay,
    ResponsibilityMap,
    moved,
    part_of,
    taken_from,
)
from fanout.views import Box, Relative, Sphere
from fanout.views.objects import ObjectPath
from fanout.views.topic import TopicFilter, matches
from fanout.wire.messages import Subscribe

names = st.text(alphabet="abcdefgh-0123456789", min_size=1, max_size=8)
member_sets = st.sets(names, min_size=1, max_size=6)
parts = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=40, unique=True)


def members(names: set[str] | frozenset[str]) -> ResponsibilityMap:
    return ResponsibilityMap({name: f"ws://{name}:1" for name in names})


@given(member_sets, parts)
def test_every_part_has_exactly_one_live_owner_that_any_subset_holding_it_agrees_on(
    live: set[str], some: list[str]
) -> None:
    whole = members(live)
    for part in some:
        owner = whole.owner(part)
        assert owner.name in live and owner.url == f"ws://{owner.name}:1"
        others = sorted(live - {owner.name})
        for size in range(len(others) + 1):
            for subset in itertools.combinations(others, size):
                assert members({owner.name, *subset}).owner(part).name == owner.name


@given(member_sets, names, parts)
def test_a_join_moves_parts_only_to_the_joiner_and_a_leave_only_from_the_leaver(
    live: set[str], joiner: str, some: list[str]
) -> None:
    before, after = members(live - {joiner}), members(live | {joiner})
    if not before.members:
        return
    for part in moved(before, after, some):
        assert after.owner(part).name == joiner
    for part in moved(after, before, some):
        assert after.owner(part).name == joiner  # the leaver held it
    for part in set(some) - set(moved(before, after, some)):
        assert before.owner(part).name == after.owner(part).name


@settings(max_examples=20)
@given(st.sets(names, min_size=2, max_size=6))
def test_parts_spread_over_the_members_like_a_hash(live: set[str]) -> None:
    grid = members(live)
    count = 3000
    owners = [grid.owner(f"agents/cell:{i},{j}").name for i in range(60) for j in range(50)]
    share = {name: owners.count(name) / count for name in live}
    # 3,000 parts: a member's share is within a third of 1/n by far (binomial, sd ~ 1/sqrt(3000n))
    assert all(abs(s - 1 / len(live)) < 1 / (3 * len(live)) for s in share.values()), share


def test_an_empty_map_names_nobody() -> None:
    with pytest.raises(NoLiveRelay):
        members(set()).owner("agents/cell:0,0")


coordinate = st.floats(-1e6, 1e6, allow_nan=False)
sizes = st.floats(0, 1e4, allow_nan=False)


def exact_cell(centre: float, side: float) -> Fraction:
    """The exact quotient centre / side (rationals: no rounding)."""
    return Fraction(centre) / Fraction(side)


@given(coordinate, coordinate, sizes, sizes, st.sampled_from([1.0, 100.0, 256.0, 1000.0, 0.3]))
def test_a_box_belongs_to_the_cell_holding_its_centre(
    x: float, y: float, w: float, h: float, side: float
) -> None:
    box = Box((x, y), (x + w, y + h))
    bounds = box.bounds()
    centres = [(lo + hi) / 2 for lo, hi in zip(bounds.lo, bounds.hi, strict=True)]
    cells = part_of("agents", box, side).removeprefix("agents/cell:").split(",")
    for centre, cell in zip(centres, cells, strict=True):
        quotient = exact_cell(centre, side)
        # The floor of the exact quotient, except where the float division rounds a quotient
        # a hair below a grid line onto it (every relay rounds alike, so they still agree).
        near_a_line = abs(quotient - round(quotient)) <= abs(quotient) * Fraction(1, 2**50)
        assert int(cell) == math.floor(quotient) or near_a_line, (centre, side, cell)


def test_views_of_one_place_share_a_part_and_other_views_hash_into_buckets() -> None:
    near = [Box((10, 10), (50, 50)), Sphere((30, 30), 15), Box((0, 0), (60, 60))]
    assert len({part_of("agents", view) for view in near}) == 1
    assert part_of("agents", Box((300, 10), (340, 50))) != part_of("agents", near[0])
    assert part_of("other", near[0]) != part_of("agents", near[0])
    follow = [Relative(7, Sphere((0, 0), 10)), Relative(7, Box((-5, -5), (5, 5)))]
    assert len({part_of("agents", view) for view in follow}) == 1
    subtree = [TopicFilter("plant/+/temp"), TopicFilter("plant/#"), TopicFilter("$share/g/plant")]
    assert {part_of("sensors", f) for f in subtree} == {"sensors/topic:plant"}
    assert part_of("sensors", TopicFilter("plant/3/temp")) == "sensors/topic:plant/3"
    bucket = part_of("sensors", TopicFilter("+/3/temp"))
    assert bucket.startswith("sensors/bucket:")
    assert 0 <= int(bucket.rsplit(":", 1)[1]) < BUCKETS
    assert bucket == part_of("sensors", TopicFilter("+/3/temp"))
    media = [ObjectPath("/pps/media/.all"), ObjectPath("/pps/media/song?delta")]
    assert {part_of("pps", path) for path in media} == {"pps/dir:/pps/media"}
    with pytest.raises(ValueError, match="side"):
        part_of("agents", near[0], side=0)


def test_a_new_subscription_is_redirected_to_its_owner_and_nothing_else_is() -> None:
    grid = members({"a", "b", "c"})
    box = Box((10, 10), (50, 50))
    owner = grid.owner_of("agents", box)
    other = next(name for name in "abc" if name != owner.name)
    request = Subscribe(4, "agents", box)
    answer = redirect(grid, other, request, held=False)
    assert answer is not None
    assert (answer.code, answer.ref, answer.location) == ("redirect", 4, owner.url)
    assert owner.name in answer.message
    assert redirect(grid, owner.name, request, held=False) is None
    assert redirect(grid, other, request, held=True) is None  # a view change stays
    stay = Subscribe(4, "agents", box, stay=True)
    assert redirect(grid, other, stay, held=False) is None
    assert redirect(members(set()), other, request, held=False) is None


filter_levels = st.lists(st.sampled_from(["a", "b", "", "+"]), min_size=1, max_size=5)


@given(filter_levels, st.booleans(), st.sampled_from(["x", "y"]), st.sampled_from(["x", "y"]))
def test_a_topic_filter_belongs_to_the_subtree_every_topic_it_matches_lies_in(
    levels: list[str], multilevel: bool, fill: str, other: str
) -> None:
    """The part names the longest prefix (at most ``TOPIC_DEPTH`` levels) that every topic the
    filter matches starts with: two topics it matches, its wildcards filled differently, share
    that prefix, and one level more (within the depth) they need not."""
    text = "/".join([*levels, "#"] if multilevel else levels)
    assume(text != "")  # MQTT refuses an empty filter
    view = TopicFilter(text)
    part = part_of("d", view)
    one = "/".join(fill if level == "+" else level for level in levels)
    two = "/".join(other if level == "+" else level for level in levels)
    deeper = [f"{one}/{fill}/z", f"{two}/{other}"] if multilevel else [one, two]
    topics = [t for t in deeper if matches(text, t)]
    assert topics, (text, deeper)
    if levels[0] == "+":
        assert part.startswith("d/bucket:")
        return
    assert part_of("d", TopicFilter(f"$share/g/{text}")) == part  # a share group: its subtree
    prefix = part.removeprefix("d/topic:").split("/")
    assert 1 <= len(prefix) <= TOPIC_DEPTH
    for topic in topics:
        assert topic.split("/")[: len(prefix)] == prefix
    if len(prefix) < TOPIC_DEPTH and len(levels) > len(prefix) and fill != other:
        # the next level is a wildcard: topics differ there, so the prefix could not be longer
        assert levels[len(prefix)] == "+"


# -- standbys and assignments (split and merge on load) -------------------------------------


@given(member_sets, st.data(), parts)
def test_an_assigned_part_belongs_to_its_live_assignee_and_a_standby_owns_nothing_else(
    live: set[str], data: st.DataObject, some: list[str]
) -> None:
    standby = data.draw(st.sets(st.sampled_from(sorted(live))), label="standby")
    dead = data.draw(st.sets(names.filter(lambda n: n not in live), max_size=2), label="dead")
    assignees = st.sampled_from(sorted(live | dead))
    assigned = {
        part: Assignment(data.draw(assignees), data.draw(assignees))
        for part in data.draw(st.lists(st.sampled_from(some), unique=True), label="assigned")
    }
    table = ResponsibilityMap(
        {name: f"ws://{name}:1" for name in live}, standby=frozenset(standby), assigned=assigned
    )
    # Without assignments, ownership is the plain map's over the members that are no standby
    # (all of them if every one is).
    owning = members(live - standby or live)
    for part in some:
        held = assigned.get(part)
        expected = held.member if held and held.member in live else owning.owner(part).name
        assert table.owner(part).name == expected
        assert table.owner(part).url == f"ws://{expected}:1"
    for name in live:
        assert table.received(name) == sorted(p for p, a in assigned.items() if a.member == name)
    busy = {a.member for a in assigned.values()}
    assert table.idle_standbys() == sorted(standby - busy)


@given(member_sets, st.data(), parts)
def test_held_subscriptions_move_exactly_when_an_assignment_takes_their_part_from_the_relay(
    live: set[str], data: st.DataObject, some: list[str]
) -> None:
    target = data.draw(st.sampled_from(sorted(live)), label="target")
    before = ResponsibilityMap({name: f"ws://{name}:1" for name in live})
    handed = data.draw(st.lists(st.sampled_from(some), unique=True), label="handed")
    split = {part: Assignment(target, before.owner(part).name) for part in handed}
    after = ResponsibilityMap(before.members, assigned=split)
    for me in live:
        for part in some:
            taken = before.owner(part).name == me and part in split and target != me
            assert taken_from(before, after, me, part) is taken
            # a merge is the same move backwards: the target hands the part back
            back = part in split and target == me and before.owner(part).name != me
            assert taken_from(after, before, me, part) is back


@given(member_sets, parts)
def test_a_relay_joining_takes_exactly_the_parts_it_wins_and_one_leaving_takes_none(
    live: set[str], some: list[str]
) -> None:
    """Oracle: each plain map's owner, compared by hand (the owners themselves are checked
    above)."""

    def winner(names: set[str], part: str) -> str:
        return members(names).owner(part).name

    before = members(live)
    joined = members(live | {"zz-new"})
    for me in live:
        for part in some:
            wins = winner(live | {"zz-new"}, part) == "zz-new"
            assert taken_from(before, joined, me, part) is (winner(live, part) == me and wins)
    gone = min(live)
    left = members(live - {gone})
    for me in live - {gone}:
        assert not any(taken_from(before, left, me, part) for part in some)
    # A relay reading a map without itself (its lease lapsed while alive) gives nothing away.
    assert not any(taken_from(before, left, gone, part) for part in some)


def test_a_held_subscription_whose_cell_was_handed_over_gets_a_redirect_to_its_new_relay() -> None:
    before = members({"a", "b"})
    box = Box((10, 10), (20, 20))
    part = part_of("agents", box)
    giver = before.owner(part).name
    target = "c"
    after = ResponsibilityMap(
        {**before.members, "c": "ws://c:1"},
        standby=frozenset({"c"}),
        assigned={part: Assignment(target, giver)},
    )
    assert moved_subscription(after, after, giver, dataset="agents", view=box, sub=7) is None
    plain = ResponsibilityMap({**before.members, "c": "ws://c:1"}, standby=frozenset({"c"}))
    answer = moved_subscription(plain, after, giver, dataset="agents", view=box, sub=7)
    assert answer is not None and answer.code == "redirect"
    assert (answer.ref, answer.location) == (7, "ws://c:1")
    assert part in answer.message
    # the other relay, and the target itself, keep what they hold
    other = ({"a", "b"} - {giver}).pop()
    assert moved_subscription(plain, after, other, dataset="agents", view=box, sub=7) is None
    assert moved_subscription(plain, after, "c", dataset="agents", view=box, sub=7) is None
    # a new subscription of the cell is redirected to the target from now on
    request = Subscribe(1, "agents", box)
    assert redirect(after, giver, request, held=False).location == "ws://c:1"  # type: ignore[union-attr]
    assert redirect(after, "c", request, held=False) is None
