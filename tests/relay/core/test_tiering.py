"""Priority from the data (relay/core/tiering.py): rate tiers by distance from a view's focus, and
priorities derived from the rows, in whole conversations with a relay's core, sans I/O.

The oracle is brute force: it keeps, for every entity, the tick it last changed and the tick of
the row the subscriber holds, and recomputes each push from the truth and the tiers' rule (an
entity farther than ``beyond`` goes on pushes whose number ``every`` divides; entering and
leaving go at once) without the relay's held keys, stale sets or spatial index.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.relay.core.test_relative import Point, Publisher

from fanout.relay.core import tiering
from fanout.relay.core.relaycore import Send
from fanout.relay.core.scheduler import Scheduler
from fanout.testing.relaycore import frames_to, ready_core
from fanout.views import Box, Sphere
from fanout.views.kinds import View
from fanout.views.region import Relative
from fanout.wire.columns import decode_columns
from fanout.wire.messages import Error, NoUpdate, Push, Subscribe, Subscribed
from fanout.wire.options import Relevance, Tier, Transduce

WORLD = Box((-50, -50), (150, 150))  # held by a warm-up subscription: every view is covered


class Talk:
    """A relay core, the brute-force publisher above it, and subscribers on clients 1, 2, ..."""

    def __init__(self, truth: dict[int, Point]) -> None:
        self.core = ready_core()
        self.publisher = Publisher(truth)
        self.now = 0.0
        self.changed = dict.fromkeys(truth, -1)  # key -> the seq it last changed at
        self.subscribe(99, WORLD)  # holds the whole world: coverage is never in the way
        self.step()

    def subscribe(self, client: int, view: View, relevance: Relevance | None = None) -> list[Send]:
        request = Subscribe(1, "agents", view, rate=1000.0, relevance=relevance)
        sends = self.core.on_subscribe(client, request)
        self.publisher.take(sends)
        return sends

    def step(self, moves: dict[int, Point | None] | None = None) -> list[Send]:
        """One publisher tick, then one round of pushes."""
        batch = self.publisher.tick(moves)
        for key in moves or {}:
            self.changed[key] = batch.seq
        self.core.on_batch(batch)
        self.now += 1.0
        sends = self.core.pushes(self.now, lambda client: True)
        self.publisher.take(sends)
        return sends

    def region(self, view: View) -> Box | Sphere:
        if isinstance(view, Relative):
            return view.resolve(self.publisher.truth[view.entity])  # type: ignore[index,return-value]
        return view  # type: ignore[return-value]

    def within(self, view: View) -> dict[int, Point]:
        region = self.region(view)
        return {
            k: p
            for k, p in self.publisher.truth.items()
            if region.match(np.array([p[0]]), np.array([p[1]]))[0]
        }


def keys_of(columns: object) -> set[int]:
    return {int(k) for k in decode_columns(columns).get("id", [])}  # type: ignore[arg-type]


def apply(copy: dict[int, tuple[Point, int]], push: Push) -> None:
    """Apply a push to a subscriber's copy: key -> (position, the seq its row is as of)."""
    if push.full:
        copy.clear()
    for part in (push.entered, push.updated):
        columns = decode_columns(part)
        for key, x, y in zip(*(columns.get(name, []) for name in ("id", "x", "y")), strict=True):
            copy[int(key)] = ((float(x), float(y)), push.seq)
    for key in keys_of(push.left):
        del copy[key]


def tier(distance: float, tiers: list[Tier]) -> int:
    return sum(distance > t.beyond for t in tiers)


def due(distance: float, tiers: list[Tier], turn: int) -> bool:
    found = tier(distance, tiers)
    return found == 0 or turn % tiers[found - 1].every == 0


coordinate = st.floats(-20, 120, allow_nan=False).map(lambda v: round(v, 3))
point = st.tuples(coordinate, coordinate)
tier_lists = st.lists(
    st.tuples(st.floats(2, 90), st.integers(1, 5)), min_size=1, max_size=3, unique_by=lambda t: t[0]
).map(lambda ts: [Tier(b, e) for b, e in sorted(ts)])
views = st.one_of(
    st.just(Box((0, 0), (100, 100))),
    st.builds(lambda x, y, r: Sphere((x, y), r), coordinate, coordinate, st.floats(10, 80)),
    st.builds(lambda r: Relative(0, Sphere((0, 0), r)), st.floats(10, 60)),
)
ticks = st.lists(
    st.dictionaries(st.integers(0, 25), st.one_of(st.none(), point), max_size=8),
    min_size=1,
    max_size=14,
)


@settings(max_examples=80, deadline=None)
@given(views, tier_lists, st.none() | point, ticks, st.integers(0, 2**32 - 1))
def test_each_push_carries_what_a_brute_force_recomputation_says(
    view: View, tiers: list[Tier], focus: Point | None, moves: list, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    truth = {k: (float(x), float(y)) for k, (x, y) in enumerate(rng.uniform(-20, 120, (20, 2)))}
    if isinstance(view, Relative) and focus is not None:
        focus = (focus[0] / 10, focus[1] / 10)  # relative to the entity
    talk = Talk(truth)
    relevance = Relevance(tiers=tiers, focus=None if focus is None else list(focus))
    assert isinstance(talk.subscribe(1, view, relevance)[0].frame, Subscribed)
    copy: dict[int, tuple[Point, int]] = {}
    turn = -1
    period = math.lcm(*(t.every for t in tiers))
    for tick in [{}, *moves]:
        lives = isinstance(view, Relative)  # the followed entity lives
        sends = talk.step({k: v for k, v in tick.items() if k != 0 or not lives})
        mine = [f for f in frames_to(sends, 1) if isinstance(f, Push | NoUpdate | Error)]
        if turn < 0 and not mine:
            continue  # not yet covered
        (frame,) = mine  # one cut per round: its rate allows it, and a new state woke it
        assert not isinstance(frame, Error)
        turn += 1
        inside = talk.within(view)
        if isinstance(view, Relative):
            x, y = talk.publisher.truth[0]
            centre = (x, y) if focus is None else (x + focus[0], y + focus[1])
        else:
            centre = focus or tiering.centre(view)
        # The oracle: what this push must carry.
        entered = set(inside) - set(copy)
        left = set(copy) - set(inside)
        updated = {
            k
            for k in set(inside) & set(copy)
            if copy[k][1] < talk.changed[k] and due(math.dist(inside[k], centre), tiers, turn)
        }
        if isinstance(frame, NoUpdate):
            assert (entered, updated, left) == (set(), set(), set())
            continue
        if frame.full:
            assert turn == 0 and entered == set(inside)
        else:
            assert keys_of(frame.entered) == entered
            assert keys_of(frame.left) == left
            assert keys_of(frame.updated) == updated
        apply(copy, frame)
        assert set(copy) == set(inside)  # the keys are always the view's
        for key in updated | entered:
            assert copy[key][0] == inside[key]
        if turn % period == 0:  # every tier was due: the copy is the plain view
            assert {k: p for k, (p, _) in copy.items()} == inside


def test_far_entities_go_every_third_push_and_near_ones_every_push() -> None:
    truth = {0: (50.0, 50.0), 1: (52.0, 50.0), 2: (90.0, 50.0)}
    talk = Talk(truth)
    talk.subscribe(1, Box((0, 0), (100, 100)), Relevance(tiers=[Tier(10, 3)]))
    talk.step()
    carried = []
    for step in range(1, 7):
        sends = talk.step({1: (52.0, 50.0 + step), 2: (90.0, 50.0 + step)})
        (push,) = frames_to(sends, 1)
        assert isinstance(push, Push)
        carried.append(keys_of(push.updated))
    assert carried == [{1}, {1}, {1, 2}, {1}, {1}, {1, 2}]


def test_a_far_entity_held_back_goes_on_its_tier_even_when_the_data_stop() -> None:
    talk = Talk({0: (50.0, 50.0), 2: (90.0, 50.0)})
    talk.subscribe(1, Box((0, 0), (100, 100)), Relevance(tiers=[Tier(10, 4)]))
    talk.step()
    (held_back,) = frames_to(talk.step({2: (91.0, 50.0)}), 1)  # turn 1: held back
    assert isinstance(held_back, NoUpdate)
    flushed = set()
    for _ in range(4):  # no new state: the relay cuts it again at its rate
        talk.now += 1.0
        for frame in frames_to(talk.core.pushes(talk.now, lambda client: True), 1):
            assert isinstance(frame, Push)
            flushed |= keys_of(frame.updated)
    assert flushed == {2}


def test_entering_and_leaving_are_never_delayed_by_a_tier() -> None:
    talk = Talk({0: (50.0, 50.0), 1: (95.0, 95.0)})
    talk.subscribe(1, Box((0, 0), (100, 100)), Relevance(tiers=[Tier(5, 1000)]))
    talk.step()
    (push,) = frames_to(talk.step({1: (120.0, 120.0), 2: (99.0, 1.0)}), 1)
    assert isinstance(push, Push)
    assert (keys_of(push.left), keys_of(push.entered)) == ({1}, {2})


@given(st.lists(point, min_size=1, max_size=30), tier_lists, point, st.integers(0, 60))
def test_tiers_and_due_match_the_rule_one_by_one(
    points: list[Point], tiers: list[Tier], focus: Point, turn: int
) -> None:
    relevance = Relevance(tiers=tiers)
    distances = np.array([math.dist(p, focus) for p in points])
    found = tiering.due(tiering.tier_of(distances, relevance), relevance, turn)
    assert found.tolist() == [due(d, tiers, turn) for d in distances]


def test_refused_where_it_cannot_apply() -> None:
    core = ready_core()

    def refused(request: Subscribe) -> str:
        (send,) = core.on_subscribe(1, request)
        assert isinstance(send.frame, Error) and send.frame.code == "invalid_view"
        return send.frame.message

    box = Box((0, 0), (10, 10))
    every = Subscribe(1, "agents", box, mode="every", relevance=Relevance(tiers=[Tier(1, 2)]))
    assert "mode 'latest'" in refused(every)
    down = Relevance(tiers=[Tier(5, 2), Tier(3, 4)])
    assert "increasing" in refused(Subscribe(2, "agents", box, relevance=down))
    never = Relevance(tiers=[Tier(5, 0)])
    assert "every" in refused(Subscribe(3, "agents", box, relevance=never))
    flat = Relevance(focus=[1.0, 2.0, 3.0])
    assert "focus" in refused(Subscribe(4, "agents", box, relevance=flat))
    window = Transduce("window", {"query": "SELECT count(*) AS n FROM history", "key": "n"})
    both = Subscribe(5, "agents", box, relevance=Relevance(tiers=[Tier(1, 2)]), transduce=window)
    assert "transduce" in refused(both)


# -- priority derived from the rows ------------------------------------------------------------

boxes = st.builds(
    lambda x, y, w: Box((x, y), (x + w, y + w)), coordinate, coordinate, st.floats(5, 60)
)


def oracle_priority(
    talk: Talk, view: Box, how: str, given_priority: int, last_seq: int | None
) -> float:
    inside = talk.within(view)
    if how == "given":
        return float(given_priority)
    if how == "changes":
        count = sum(1 for k in inside if last_seq is None or talk.changed[k] > last_seq)
        return given_priority + math.log2(1 + count)
    if not inside:
        return float(given_priority)
    centre = tiering.centre(view)
    nearest = min(math.dist(p, centre) for p in inside.values())
    reach = math.dist(view.lo, centre)
    return given_priority + tiering.NEAREST * max(0.0, 1 - nearest / reach)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(boxes, st.sampled_from(["given", "changes", "nearest"]), st.integers(-3, 3)),
        min_size=2,
        max_size=6,
    ),
    ticks,
    st.integers(0, 2**32 - 1),
)
def test_due_pushes_go_in_the_order_of_their_priorities_from_the_rows(
    subscriptions: list, moves: list, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    truth = {k: (float(x), float(y)) for k, (x, y) in enumerate(rng.uniform(-20, 120, (26, 2)))}
    talk = Talk(truth)
    for client, (view, how, given_priority) in enumerate(subscriptions, start=1):
        relevance = Relevance(priority_from=how)
        request = Subscribe(
            1, "agents", view, rate=1000.0, priority=given_priority, relevance=relevance
        )
        talk.publisher.take(talk.core.on_subscribe(client, request))
    last_seq = None
    for tick in [{}, *moves]:
        sends = talk.step(tick)  # the priorities are of the state this round cuts
        expected = {
            client: oracle_priority(talk, view, how, given_priority, last_seq)
            for client, (view, how, given_priority) in enumerate(subscriptions, start=1)
        }
        order = list(dict.fromkeys(send.to for send in sends if send.to in expected))
        assert len(order) == len(subscriptions)  # each is cut once a round
        for earlier, later in pairwise(order):
            assert expected[earlier] >= expected[later] - 1e-9
        last_seq = talk.publisher.seq


def test_reprioritise_keeps_the_wait_and_sorts_again() -> None:
    scheduler = Scheduler()
    scheduler.add("a", 0, 10.0)
    scheduler.add("b", 0, 10.0)
    assert scheduler.fresh() == ["a", "b"]
    scheduler.reprioritise("b", 5.0)
    scheduler.settle(0.0)
    assert scheduler.fresh() == []
    assert scheduler.pop_many(2) == ["b", "a"]


def test_dropping_the_tiers_sends_the_rows_they_held_back_at_the_next_push() -> None:
    talk = Talk({0: (50.0, 50.0), 2: (90.0, 50.0)})
    box = Box((0, 0), (100, 100))
    talk.subscribe(1, box, Relevance(tiers=[Tier(10, 50)]))
    talk.step()
    (held_back,) = frames_to(talk.step({2: (91.0, 50.0)}), 1)
    assert isinstance(held_back, NoUpdate)
    talk.subscribe(1, box)  # the same view, its tiers dropped
    (push,) = frames_to(talk.step(), 1)
    assert isinstance(push, Push) and keys_of(push.updated) == {2}


@given(st.lists(st.integers(0, 9), max_size=12), st.sets(st.integers(0, 9)))
def test_fresh_among_some_is_the_fresh_ones_among_them(woken: list[int], among: set[int]) -> None:
    scheduler = Scheduler()
    for sid in range(10):
        scheduler.add(sid, 0, 10.0)
    scheduler.settle(0.0)
    for sid in scheduler.pop_many(10):
        scheduler.served(sid, 0.0)
    scheduler.wake_all(woken)
    assert scheduler.fresh() == list(dict.fromkeys(woken))
    assert set(scheduler.fresh(among)) == set(woken) & among
