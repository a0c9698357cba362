"""Views relative to the subscriber's own entity, resolved at the relay (relay/core/relative.py).

Whole conversations without sockets, against a small brute-force publisher: it holds the truth,
answers ``Acquire`` with snapshots and sends each tick the changed rows inside the relay's
primitives and deletes for the keys that left them, as the real one does.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, Send
from fanout.testing.relaycore import frames_to, ready_core
from fanout.views import Box, Sphere
from fanout.views.entity import Entity
from fanout.views.kinds import View
from fanout.views.region import Relative
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    Error,
    NoUpdate,
    Push,
    Release,
    Subscribe,
    Unsubscribe,
)

CLIENT = 1
Point = tuple[float, float]


class Publisher:
    """The truth, and the batches a relay holding ``prims`` gets from it."""

    def __init__(self, truth: dict[int, Point] | None = None) -> None:
        self.truth: dict[int, Point] = dict(truth or {})
        self.prims: dict[int, View] = {}
        self.fresh: list[int] = []
        self.sent: set[int] = set()  # the relay's checkout: keys sent and not deleted since
        self.seq = -1
        self.acquired: list[View] = []
        self.released: list[View] = []

    def take(self, sends: list[Send]) -> None:
        for send in sends:
            match send.frame if send.to == UPSTREAM else None:
                case Acquire(prim=prim, view=view):
                    self.prims[prim] = view
                    self.fresh.append(prim)
                    self.acquired.append(view)
                case Release(prim=prim):
                    self.released.append(self.prims.pop(prim))
                    self.fresh = [p for p in self.fresh if p != prim]

    def holds(self, prim: int, key: int) -> bool:
        view = self.prims[prim]
        if isinstance(view, Entity):
            return view.key == key
        x, y = self.truth[key]
        return bool(view.match(np.array([x]), np.array([y]))[0])  # type: ignore[union-attr]

    def tick(self, moves: dict[int, Point | None] | None = None) -> Batch:
        """Apply ``moves`` (None: delete) and return the relay's batch for this tick."""
        moves = moves or {}
        for key, point in moves.items():
            if point is None:
                self.truth.pop(key, None)
            else:
                self.truth[key] = point
        self.seq += 1
        live = [k for k in moves if k in self.truth]
        upserts = {k for k in live if any(self.holds(p, k) for p in self.prims)}
        upserts |= {k for k in self.truth for p in self.fresh if self.holds(p, k)}
        deletes = {k for k in moves if k in self.sent} - upserts
        self.sent = (self.sent - deletes) | upserts
        snapshots, self.fresh = self.fresh, []
        ordered = sorted(upserts)
        columns = {
            "id": np.array(ordered, dtype=np.int64),
            "x": np.array([self.truth[k][0] for k in ordered], dtype=np.float64),
            "y": np.array([self.truth[k][1] for k in ordered], dtype=np.float64),
        }
        return Batch(
            dataset="agents",
            epoch=1,
            seq=self.seq,
            tick=self.seq,
            tick_time=float(self.seq),
            upserts=encode_columns(columns),
            deletes=encode_columns({"id": np.array(sorted(deletes), dtype=np.int64)}),
            snapshots=snapshots,
        )

    def within(self, view: Relative) -> dict[int, Point]:
        """The truth's rows inside ``view`` resolved at its entity (the oracle)."""
        region = view.resolve(self.truth[view.entity])  # type: ignore[index]
        keys = np.array(sorted(self.truth), dtype=np.int64)
        xs = np.array([self.truth[k][0] for k in keys])
        ys = np.array([self.truth[k][1] for k in keys])
        return {int(k): self.truth[int(k)] for k in keys[region.match(xs, ys)]}


class Conversation:
    """A relay core, the publisher above it and one subscriber's materialised rows below."""

    def __init__(self, publisher: Publisher, policy: Policy | None = None) -> None:
        self.core = ready_core(policy=policy)
        self.publisher = publisher
        self.rows: dict[int, Point] = {}
        self.errors: list[Error] = []
        self.pushes: list[Push | NoUpdate] = []
        self.now = 0.0

    def subscribe(self, view: View, sub: int = 1) -> list[Send]:
        sends = self.core.on_subscribe(CLIENT, Subscribe(sub, "agents", view, rate=1000.0))
        self.publisher.take(sends)
        self.errors += [s.frame for s in sends if isinstance(s.frame, Error)]
        return sends

    def step(self, moves: dict[int, Point | None] | None = None) -> list[Push | NoUpdate]:
        """One publisher tick, then one round of pushes; returns the pushes of this round."""
        self.core.on_batch(self.publisher.tick(moves))
        self.now += 1.0
        sends = self.core.pushes(self.now, lambda client: True)
        self.publisher.take(sends)
        mine = frames_to(sends, CLIENT)
        self.errors += [m for m in mine if isinstance(m, Error)]
        pushes = [m for m in mine if isinstance(m, Push | NoUpdate)]
        for push in pushes:
            self.apply(push)
        self.pushes += pushes
        return pushes

    def housekeeping(self) -> None:
        self.publisher.take(self.core.housekeeping(self.now))

    def apply(self, push: Push | NoUpdate) -> None:
        """Apply a push of subscription 1 (the one whose rows are checked) to ``rows``."""
        if isinstance(push, NoUpdate) or push.sub != 1:
            return
        if push.full:
            self.rows.clear()
        for part in (push.entered, push.updated):
            columns = decode_columns(part)
            for key, x, y in zip(
                columns.get("id", []), columns.get("x", []), columns.get("y", []), strict=True
            ):
                self.rows[int(key)] = (float(x), float(y))
        for key in decode_columns(push.left).get("id", []):
            del self.rows[int(key)]


def world() -> dict[int, Point]:
    """Entity 0 at (100, 100) among agents on a grid, 10 apart."""
    grid = {10 + i: (float(x), float(y)) for i, (x, y) in enumerate(_grid(0, 300, 10))}
    return {0: (100.0, 100.0), **grid}


def _grid(lo: int, hi: int, step: int) -> list[Point]:
    return [(float(x), float(y)) for x in range(lo, hi, step) for y in range(lo, hi, step)]


NEAR = Relative(0, Sphere((0, 0), 25))


def test_subscribing_follows_the_entity_then_covers_the_view_around_it() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(NEAR)
    assert talk.publisher.acquired == [Entity(0)]  # not held yet: first find it
    assert talk.step() == []  # the entity's row arrives, and with it where to look
    assert talk.publisher.acquired[1] == Box((50, 50), (150, 150))  # grown by margin
    (push,) = talk.step()
    assert isinstance(push, Push)
    assert push.full
    assert talk.rows == talk.publisher.within(NEAR)
    assert 0 in talk.rows and len(talk.rows) > 10


def test_the_view_moves_with_the_entity_and_rows_it_left_are_left() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(NEAR)
    talk.step()
    talk.step()
    before = set(talk.rows)
    (push,) = talk.step({0: (110.0, 100.0)})  # within the margin: no new upstream primitive
    assert len(talk.publisher.acquired) == 2
    assert isinstance(push, Push)
    left = {int(k) for k in decode_columns(push.left)["id"]}
    assert left and left <= before
    assert talk.rows == talk.publisher.within(NEAR)


def test_leaving_the_margin_acquires_more_and_parks_until_it_is_ready() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(NEAR)
    talk.step()
    talk.step()
    assert talk.step({0: (200.0, 200.0)}) == []  # uncovered: no push from a half-filled view
    assert talk.publisher.acquired[-1] == Box((150, 150), (250, 250))
    (push,) = talk.step()
    assert isinstance(push, Push)
    assert talk.rows == talk.publisher.within(NEAR)
    talk.housekeeping()
    assert talk.publisher.released == [Box((50, 50), (150, 150))]
    assert Entity(0) in talk.publisher.prims.values()


def test_a_view_that_does_not_contain_its_entity() -> None:
    ahead = Relative(0, Box((50, -10), (80, 10)))
    talk = Conversation(Publisher(world()))
    talk.subscribe(ahead)
    for _ in range(3):
        talk.step()
    assert talk.rows == talk.publisher.within(ahead)
    assert 0 not in talk.rows
    talk.step({0: (20.0, 250.0)})  # far away: the entity primitive still follows it
    talk.step()
    assert talk.rows == talk.publisher.within(ahead)


def test_an_entity_that_does_not_exist_is_an_error() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(Relative(9999, Sphere((0, 0), 25)))
    talk.step()
    (error,) = talk.errors
    assert error.code == "entity_not_held"
    assert "9999" in error.message
    assert talk.core.stats()["subscriptions"] == 0


def test_an_entity_deleted_later_ends_the_subscription() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(NEAR)
    talk.step()
    talk.step()
    talk.step({0: None})
    (error,) = talk.errors
    assert error.code == "entity_not_held"


def test_an_entity_key_of_the_wrong_type_is_refused_at_subscribe() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(Relative("zero", Sphere((0, 0), 25)))
    (error,) = talk.errors
    assert error.code == "invalid_view"
    assert "integer" in error.message
    assert talk.publisher.acquired == []


def test_an_entity_already_held_is_covered_at_once() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(Box((0, 0), (300, 300)), sub=2)
    talk.step()
    talk.subscribe(NEAR)
    assert talk.publisher.acquired[1:] == [Entity(0)]  # the box covers the resolved view
    (push,) = [p for p in talk.step() if p.sub == 1]
    assert isinstance(push, Push)
    assert talk.rows == talk.publisher.within(NEAR)


def test_the_entity_primitive_is_released_when_nobody_follows_it() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(NEAR)
    talk.step()
    talk.step()
    talk.core.on_unsubscribe(CLIENT, Unsubscribe(1))
    talk.housekeeping()
    assert Entity(0) in talk.publisher.released
    assert talk.publisher.prims == {}


def test_pruning_a_released_region_keeps_the_followed_entity() -> None:
    talk = Conversation(Publisher(world()))
    talk.subscribe(Box((90, 90), (110, 110)), sub=2)
    talk.step()
    talk.subscribe(Relative(0, Box((150, 150), (170, 170))))  # the view is far from 0
    talk.step()
    talk.core.on_unsubscribe(CLIENT, Unsubscribe(2))
    talk.housekeeping()  # releases the box around 0, and prunes it
    talk.step()
    talk.step()  # the entity did not move: nothing re-sends its row
    assert talk.errors == []
    assert talk.rows == talk.publisher.within(Relative(0, Box((150, 150), (170, 170))))


coordinate = st.floats(0, 300, allow_nan=False)
moves = st.dictionaries(
    st.integers(0, 30), st.one_of(st.none(), st.tuples(coordinate, coordinate)), max_size=6
)
walks = st.tuples(st.floats(-40, 40), st.floats(-40, 40))
views = st.one_of(
    st.floats(5, 60).map(lambda r: Sphere((0, 0), r)),
    st.tuples(st.floats(-50, 50), st.floats(-50, 50), st.floats(1, 60)).map(
        lambda t: Box((t[0], t[1]), (t[0] + t[2], t[1] + t[2]))
    ),
)


@settings(max_examples=60, deadline=None)
@given(
    views,
    st.lists(st.tuples(walks, moves), min_size=1, max_size=12),
    st.sampled_from(["margin", "tiles"]),
    st.integers(0, 2**32 - 1),
)
def test_materialised_rows_always_equal_the_translated_view_in_the_truth(
    inner, epochs, widen, seed
) -> None:
    rng = np.random.default_rng(seed)
    truth = {k: (float(x), float(y)) for k, (x, y) in enumerate(rng.uniform(0, 300, (31, 2)))}
    view = Relative(0, inner)
    talk = Conversation(Publisher(truth), Policy(widen=widen, grace=0.0))
    talk.subscribe(view)
    for (dx, dy), changes in epochs:
        x, y = talk.publisher.truth[0]
        others = {k: v for k, v in changes.items() if k != 0}  # the entity moves, never dies
        for push in talk.step({**others, 0: (x + dx, y + dy)}):
            assert push.tick == talk.publisher.seq  # cut at the state just applied
            assert talk.rows == talk.publisher.within(view)
        talk.housekeeping()
    for _ in range(3):  # quiet ticks: coverage catches up and the subscriber with it
        talk.step()
    assert talk.errors == []
    assert talk.pushes  # the subscriber was served
    assert talk.rows == talk.publisher.within(view)
    assert not math.isnan(sum(x for x, _ in talk.rows.values()))
