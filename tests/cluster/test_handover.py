"""Warm handovers' pure part (``fanout.cluster.handover``): which map a giver ends its held
subscriptions by while the relay it handed parts to warms them, and what that relay warms;
and assignments as the registry stores them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.cluster import handover
from fanout.cluster.redirects import moved
from fanout.cluster.responsibility import Assignment, ResponsibilityMap, part_of
from fanout.relay.core.scheduler import Scheduler
from fanout.views import Box, Sphere, View, parse_region
from fanout.views.topic import TopicFilter

NAMES = ["a", "b", "c", "d"]
PARTS = [f"agents/cell:{i},{j}" for i in range(3) for j in range(3)]

assignments = st.builds(
    Assignment,
    st.sampled_from(NAMES),
    st.sampled_from(NAMES),
    st.booleans(),
    st.sampled_from(["", "box:0,0,10,10"]),
)
maps = st.builds(
    lambda live, assigned: ResponsibilityMap(
        {name: f"ws://{name}:1" for name in live},
        assigned={part: held for part, held in assigned.items() if held.member in live},
    ),
    st.sets(st.sampled_from(NAMES), min_size=1),
    st.dictionaries(st.sampled_from(PARTS), assignments),
)


@given(
    maps,
    maps,
    st.sampled_from(NAMES),
    st.floats(0, 100),
    st.dictionaries(st.sampled_from(PARTS), st.floats(0, 100)),
)
def test_a_giver_serves_a_part_it_handed_over_until_it_is_ready_or_the_wait_is_over(
    after: ResponsibilityMap,
    before: ResponsibilityMap,
    me: str,
    now: float,
    since: dict[str, float],
) -> None:
    """Oracle: each part's rule 1, by hand."""
    table, waiting = handover.served(after, before, me, now, since, wait=10.0)
    assert (table.members, table.standby, table.side) == (after.members, after.standby, after.side)
    for part in set(after.assigned) | set(before.assigned):
        held = after.assigned.get(part)
        handed = (
            held is not None
            and held.giver == me
            and held.member != me
            and not held.ready
            and held.member in after.members
        )
        assert (part in waiting) is handed
        if not handed:
            assert table.assigned.get(part) == after.assigned.get(part)
            continue
        assert waiting[part] == since.get(part, now)
        kept = now - since.get(part, now) < 10.0
        expected = before.assigned.get(part) if kept else held
        assert table.assigned.get(part) == expected


def test_held_subscriptions_move_when_the_member_is_ready_or_the_wait_is_over() -> None:
    box = Box((10.0, 10.0), (20.0, 20.0))
    part = part_of("agents", box)
    members = {"a": "ws://a:1", "s": "ws://s:1"}
    plain = ResponsibilityMap(members, standby=frozenset({"s"}))
    waiting = ResponsibilityMap(
        members, standby=plain.standby, assigned={part: Assignment("s", "a", False, "box:0,0,1,1")}
    )
    ready = ResponsibilityMap(
        members, standby=plain.standby, assigned={part: Assignment("s", "a", True, "")}
    )

    def ends(before: ResponsibilityMap, after: ResponsibilityMap) -> bool:
        return moved(before, after, "a", dataset="agents", view=box, sub=1) is not None

    served, since = handover.served(waiting, plain, "a", 0.0, {})
    assert since == {part: 0.0} and not ends(plain, served)
    later, since = handover.served(waiting, served, "a", 5.0, since)
    assert not ends(served, later)
    # ready: its subscriptions end now, and nothing waits any more
    done, left = handover.served(ready, later, "a", 6.0, since)
    assert ends(later, done) and left == {}
    # never said ready: they end once the wait is over
    over, _ = handover.served(waiting, later, "a", handover.WAIT, since)
    assert ends(later, over)


def test_a_part_warms_the_bounding_box_of_its_region_views_and_other_parts_nothing() -> None:
    boxes: list[View] = [Box((10.0, 10.0), (30.0, 20.0)), Box((15.0, 5.0), (25.0, 40.0))]
    sphere = Sphere((700.0, 700.0), 10.0)
    topic = TopicFilter("sensors/#")
    held = [("agents", view) for view in [*boxes, sphere]] + [("topics", topic)]
    cell, far = part_of("agents", boxes[0]), part_of("agents", sphere)
    warm = handover.warm(held, [cell, part_of("topics", topic)], 256.0)
    assert warm == {cell: "box:10,5,30,40"}
    assert parse_region(warm[cell]) == Box((10.0, 5.0), (30.0, 40.0))
    assert handover.warm(held, [far], 256.0) == {far: "box:690,690,710,710"}


@given(assignments)
def test_an_assignment_reads_back_as_stored_and_an_older_relays_is_ready(
    held: Assignment,
) -> None:
    assert Assignment.parse(held.stored()) == held
    assert Assignment.parse(f"{held.member}\n{held.giver}") == Assignment(held.member, held.giver)


@given(maps, st.sampled_from(NAMES), st.dictionaries(st.sampled_from(PARTS), st.floats(0, 9)))
def test_a_handover_under_way_is_each_unready_assignment_to_or_from_the_relay(
    table: ResponsibilityMap, me: str, since: dict[str, float]
) -> None:
    found = handover.unready(table, me, 10.0, since)
    for part, held in table.assigned.items():
        mine = me in {held.member, held.giver}
        assert (part in found) is (mine and not held.ready)
    assert all(found[part] == since.get(part, 10.0) for part in found)
    assert set(found) <= set(table.assigned)


stamps = st.none() | st.tuples(st.integers(0, 3), st.integers(-1, 20))


@given(stamps, stamps, st.floats(0, 10))
def test_a_moving_subscription_ends_once_sent_the_last_seq_or_after_the_align_wait(
    sent: tuple[int, int] | None, last: tuple[int, int] | None, waited: float
) -> None:
    """Rule 5 against its statement: an ``every`` subscription behind the giver's last seq
    waits for it, for ``ALIGN`` s at most; anything else moves at once."""
    behind = (
        sent is not None
        and last is not None
        and (sent[0] < last[0] or (sent[0] == last[0] and sent[1] < last[1]))
    )
    assert handover.due(sent, last, waited) == (not behind or waited >= handover.ALIGN)


@given(
    st.lists(
        st.tuples(st.integers(-50, 50), st.floats(0, 60), st.booleans()), min_size=1, max_size=30
    )
)
def test_moving_subscriptions_are_served_before_those_that_stay(
    subscriptions: list[tuple[int, float, bool]],
) -> None:
    """Rule 5's ``FIRST``, through the relay's real scheduler: subscriptions (priority, when
    woken, moving) all due; each moving one given ``FIRST`` levels more comes out before every
    one that stays, whatever their priorities (-50..50) and waits (up to a minute)."""
    scheduler = Scheduler()
    for sid, (priority, woken, _) in sorted(enumerate(subscriptions), key=lambda s: s[1][1]):
        scheduler.add(sid, priority, rate=10.0)
        scheduler.settle(woken)
    for sid, (priority, _, moving) in enumerate(subscriptions):
        if moving:
            scheduler.reprioritise(sid, priority + handover.FIRST)
    scheduler.settle(60.0)
    order = scheduler.pop_many(len(subscriptions))
    assert sorted(order) == list(range(len(subscriptions)))
    kinds = [subscriptions[sid][2] for sid in order]
    assert kinds == sorted(kinds, reverse=True)  # every moving one first


#: Views of a few parts: boxes and spheres (which warm) and a topic filter (which does not).
held_views = st.lists(
    st.tuples(
        st.sampled_from(["agents", "topics"]),
        st.one_of(
            st.builds(
                lambda x, y, w, h: Box((x, y), (x + w, y + h)),
                st.floats(0, 700),
                st.floats(0, 700),
                st.floats(1, 60),
                st.floats(1, 60),
            ),
            st.builds(lambda x, r: Sphere((x, x), r), st.floats(0, 700), st.floats(1, 30)),
            st.sampled_from([TopicFilter("plant/#"), TopicFilter("yard/+/temp")]),
        ),
    ),
    max_size=12,
)


@given(held_views, st.lists(st.integers(0, 2), max_size=12))
def test_what_workers_warm_together_is_what_one_process_holding_their_views_warms(
    held: list[tuple[str, View]], placed: list[int]
) -> None:
    """Oracle: rule 2 over every view at once (``warm``), whichever of three workers holds
    each view; each worker tells its parts and its own ``warm`` of them."""
    workers: list[list[tuple[str, View]]] = [[], [], []]
    for i, subscription in enumerate(held):
        workers[placed[i] if i < len(placed) else 0].append(subscription)
    parts = {part_of(dataset, view, 256.0) for dataset, view in held}
    told = []
    for own in workers:
        weights = {part_of(dataset, view, 256.0): 1.0 for dataset, view in own}
        told.append((weights, handover.warm(own, weights, 256.0)))
    assert handover.merged_warm(told, parts) == handover.warm(held, parts, 256.0)
