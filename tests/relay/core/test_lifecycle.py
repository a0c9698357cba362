"""A subscription's lifecycle (relay/core/lifecycle.py): the transition table, the lifecycle
against a simple model of it, the progress it records, and the phases a real conversation with
the core moves a subscription through."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from fanout.relay.core.changesets import Cursor
from fanout.relay.core.downstream import Asked, Downstream, Subscription
from fanout.relay.core.lifecycle import (
    TRANSITIONS,
    Event,
    Lifecycle,
    LifecycleError,
    Phase,
    advance,
)
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM
from fanout.relay.core.scheduler import Scheduler
from fanout.relay.core.transforms import Shape
from fanout.relay.data.buffers import Stamp
from fanout.relay.data.pushes import Held
from fanout.testing.batches import batch, rows
from fanout.testing.relaycore import ready_core
from fanout.views import Box
from fanout.wire.messages import Acquire, Subscribe, Unsubscribe

CLIENT = 1
SHAPE = Shape(("id", "x", "y"))
#: The model: each event leads to the phase named for it, from any phase but the last.
LEADS_TO = {
    Event.RESTART: Phase.PENDING,
    Event.UNCOVERED: Phase.WAITING,
    Event.BUSY: Phase.BLOCKED,
    Event.OVER_BUDGET: Phase.PUT_OFF,
    Event.UNKNOWN_SEQ: Phase.ASKING,
    Event.PUSHED: Phase.LIVE,
    Event.END: Phase.ENDED,
}


def asked(view: Box | None = None, dataset: str = "agents", shape: Shape = SHAPE) -> Asked:
    return Asked(dataset, view or Box((0, 0), (10, 10)), 10.0, shape, reads=(dataset,))


def lifecycle() -> Lifecycle:
    return Lifecycle(Downstream(), Scheduler())


def started(life: Lifecycle, sub: int = 1, cursor: Cursor | None = None) -> Subscription:
    subscription = Subscription(CLIENT, sub, asked(), cursor)
    life.start(subscription, 10.0)
    return subscription


# -- the table ---------------------------------------------------------------------------------


@given(st.lists(st.sampled_from(list(Event)), max_size=30))
def test_every_event_leads_to_its_phase_until_the_end_and_none_after(events: list[Event]) -> None:
    phase = Phase.PENDING
    ended = False
    for event in events:
        if ended:
            with pytest.raises(LifecycleError, match=event.value):
                advance(phase, event)
            continue
        phase = advance(phase, event)
        assert phase is LEADS_TO[event]
        ended = event is Event.END
    assert (phase is Phase.ENDED) == ended


def test_the_table_names_every_phase_reaches_each_and_ends_in_one() -> None:
    assert set(TRANSITIONS) == set(Phase)
    assert {after for moves in TRANSITIONS.values() for after in moves.values()} == set(Phase)
    assert TRANSITIONS[Phase.ENDED] == {}
    assert all(TRANSITIONS[phase] == LEADS_TO for phase in Phase if phase is not Phase.ENDED)


# -- the lifecycle against the model ------------------------------------------------------------


class LifecycleMachine(RuleBasedStateMachine):
    """Random moves of a few subscriptions; each one's phase, counters and membership of the
    stores follow the model, and a move after its end is refused and changes nothing."""

    subscriptions = Bundle("subscriptions")

    def __init__(self) -> None:
        super().__init__()
        self.life = lifecycle()
        self.phase: dict[Subscription, Phase] = {}
        self.pushes: dict[Subscription, int] = {}
        self.deferred: dict[Subscription, int] = {}
        self.now = 0.0
        self.ids = iter(range(1, 1_000_000))

    def _moved(self, subscription: Subscription, event: Event, move: object) -> bool:
        """Make a move; whether the model allowed it (else it must have been refused)."""
        before = (subscription.phase, subscription.pushes, subscription.deferred)
        if self.phase[subscription] is Phase.ENDED:
            with pytest.raises(LifecycleError):
                move()  # type: ignore[operator]
            assert (subscription.phase, subscription.pushes, subscription.deferred) == before
            return False
        move()  # type: ignore[operator]
        self.phase[subscription] = LEADS_TO[event]
        return True

    @rule(target=subscriptions)
    def start(self) -> Subscription:
        subscription = started(self.life, next(self.ids))
        self.phase[subscription] = Phase.PENDING
        self.pushes[subscription] = self.deferred[subscription] = 0
        return subscription

    @rule(subscription=subscriptions)
    def restart(self, subscription: Subscription) -> None:
        self._moved(subscription, Event.RESTART, lambda: self.life.restart(subscription, "why"))

    @rule(subscription=subscriptions)
    def uncovered(self, subscription: Subscription) -> None:
        self._moved(subscription, Event.UNCOVERED, lambda: self.life.uncovered(subscription))

    @rule(subscription=subscriptions)
    def busy(self, subscription: Subscription) -> None:
        if self._moved(subscription, Event.BUSY, lambda: self.life.busy(subscription)):
            self.deferred[subscription] += 1

    @rule(subscription=subscriptions, wait=st.floats(0.0, 5.0))
    def over_budget(self, subscription: Subscription, wait: float) -> None:
        until = self.now + wait
        self._moved(
            subscription, Event.OVER_BUDGET, lambda: self.life.over_budget(subscription, until)
        )

    @rule(subscription=subscriptions)
    def asking(self, subscription: Subscription) -> None:
        self._moved(subscription, Event.UNKNOWN_SEQ, lambda: self.life.asking(subscription))

    @rule(subscription=subscriptions, count=st.integers(1, 4), later=st.floats(0.0, 1.0))
    def pushed(self, subscription: Subscription, count: int, later: float) -> None:
        self.now += later
        now = self.now
        if self._moved(
            subscription, Event.PUSHED, lambda: self.life.pushed(subscription, now, count)
        ):
            self.pushes[subscription] += count
            assert subscription.last_push == now

    @rule(subscription=subscriptions)
    def end(self, subscription: Subscription) -> None:
        self._moved(subscription, Event.END, lambda: self.life.end(subscription))

    @rule(client=st.just(CLIENT))
    def writable(self, client: int) -> None:
        self.life.writable(client)  # unparks; no phase changes until each is judged again

    @invariant()
    def each_follows_the_model(self) -> None:
        for subscription, phase in self.phase.items():
            assert subscription.phase is phase
            assert subscription.pushes == self.pushes[subscription]
            assert subscription.deferred == self.deferred[subscription]

    @invariant()
    def the_stores_hold_exactly_the_subscriptions_not_ended(self) -> None:
        going = {s.key for s, phase in self.phase.items() if phase is not Phase.ENDED}
        assert {s.key for s in self.life.downstream} == going
        assert all(key in self.life.scheduler for key in going)
        assert len(self.life.scheduler) == len(going)
        counts = Counter(p for p in self.phase.values() if p is not Phase.ENDED)
        assert self.life.counts() == {phase: counts[phase] for phase in Phase}


TestLifecycleMachine = LifecycleMachine.TestCase


# -- progress ---------------------------------------------------------------------------------


def held(seq: int, epoch: int = 1) -> Held:
    return Held(Box((0, 0), (10, 10)), 0, epoch, seq, np.array([1, 2]))


def test_what_was_asked_is_immutable_and_read_through() -> None:
    subscription = Subscription(CLIENT, 1, asked())
    with pytest.raises(AttributeError):
        subscription.asked.view = Box((0, 0), (1, 1))  # type: ignore[misc]
    assert (subscription.dataset, subscription.view, subscription.shape) == (
        "agents",
        Box((0, 0), (10, 10)),
        SHAPE,
    )
    assert (subscription.key, subscription.mode, subscription.reads) == (
        (CLIENT, 1),
        "latest",
        ("agents",),
    )


def test_a_change_replaces_what_was_asked_and_reindexes_the_same_subscription() -> None:
    life = lifecycle()
    subscription = started(life)
    life.pushed(subscription, 1.0)
    life.holds(subscription, held(3), Stamp(1, 3, 3, 0.0))
    moved = asked(Box((5, 0), (15, 10)))
    life.changed(subscription, moved, 10.0, None)
    assert subscription.asked is moved and life.downstream.get((CLIENT, 1)) is subscription
    assert subscription.phase is Phase.LIVE and subscription.held is not None  # a delta next

    elsewhere = asked(dataset="other")
    life.changed(subscription, elsewhere, 10.0, None)
    assert life.downstream.of_dataset("agents") == []
    assert life.downstream.of_dataset("other") == [subscription]
    assert subscription.phase is Phase.PENDING and subscription.held is None  # a full push next


def test_a_dated_change_of_view_gives_its_velocity() -> None:
    life = lifecycle()
    subscription = Subscription(CLIENT, 1, asked())
    life.start(subscription, 10.0, now=0.0)
    assert (subscription.moved_at, subscription.velocity) == (0.0, None)
    life.changed(subscription, asked(Box((2, 0), (12, 10))), 10.0, 2.0)
    assert subscription.moved_at == 2.0 and subscription.velocity == (1.0, 0.0)
    life.changed(subscription, asked(Box((2, 0), (12, 10))), 10.0, 3.0)  # the same view
    assert subscription.moved_at == 2.0 and subscription.velocity == (1.0, 0.0)
    life.changed(subscription, asked(Box((2, 0), (12, 10)), dataset="other"), 10.0, 4.0)
    assert subscription.moved_at == 4.0 and subscription.velocity is None


def test_a_restart_tells_an_every_subscription_under_way_why_once() -> None:
    life = lifecycle()
    latest, every = started(life, 1), started(life, 2, Cursor(1, 5, np.array([1])))
    life.holds(latest, held(5), Stamp(1, 5, 5, 0.0))
    life.restart(latest, "a new table")
    life.restart(every, "a new table")
    assert latest.held is None and life.announced(latest) is None
    assert every.cursor is None and life.announced(every) == "a new table"
    assert life.announced(every) is None


def test_what_a_subscriber_holds_counts_the_ticks_it_skipped() -> None:
    life = lifecycle()
    subscription = started(life)
    life.holds(subscription, held(1), Stamp(1, 1, 1, 0.0))
    life.holds(subscription, held(5), Stamp(1, 5, 5, 0.0))  # ticks 2-4 folded into 5
    after = held(2, epoch=2)
    life.holds(subscription, after, Stamp(2, 2, 2, 0.0))  # a new epoch: none
    assert subscription.coalesced == 3 and subscription.held is after
    life.new_epoch(subscription)
    refreshed = subscription.held
    assert refreshed is not None and refreshed.refresh and not after.refresh
    assert (refreshed.epoch, refreshed.seq, refreshed.keys) == (2, 2, after.keys)


def test_an_every_cursor_moves_only_through_its_lifecycle() -> None:
    life = lifecycle()
    subscription = started(life)
    life.trusted(subscription, 3)  # no cursor yet: nothing to trust
    life.placed(subscription, Cursor(1, 4, np.array([1, 2])))
    life.trusted(subscription, 4)
    life.stepped(subscription, 5, np.array([2]))
    cursor = subscription.cursor
    assert cursor is not None
    assert (cursor.seq, cursor.keys.tolist(), cursor.trusted_after) == (5, [2], 4)
    life.trusted(subscription, None)
    assert cursor.trusted_after is None


def test_coverage_is_judged_once_per_view_and_version() -> None:
    life = lifecycle()
    subscription = started(life)
    assert not subscription.servable and subscription.coverage_seen == (None, -1, -1)
    life.judged(subscription, True, ("view", 2, 3))
    assert subscription.servable and subscription.coverage_seen == ("view", 2, 3)


# -- a conversation -----------------------------------------------------------------------------


def test_a_conversation_moves_a_subscription_through_its_phases() -> None:
    core = ready_core(policy=Policy(widen="exact", grace=0.0))
    sends = core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1000.0))
    subscription = core.downstream.get((CLIENT, 1))
    assert subscription is not None and subscription.phase is Phase.PENDING
    (acquire,) = [s.frame for s in sends if s.to == UPSTREAM]
    assert isinstance(acquire, Acquire)

    assert core.pushes(1.0, lambda client: True) == []
    assert subscription.phase is Phase.WAITING  # its snapshot has not come

    core.on_batch(batch(0, rows(k1=(1, 1), k2=(2, 2)), snapshots=[acquire.prim]))
    assert core.pushes(2.0, lambda client: False) == []
    assert subscription.phase is Phase.BLOCKED  # its connection is still writing
    assert core.on_writable(CLIENT)

    (push,) = core.pushes(3.0, lambda client: True)
    assert push.to == CLIENT and subscription.phase is Phase.LIVE and subscription.pushes == 1

    core.on_unsubscribe(CLIENT, Unsubscribe(1))
    assert subscription.phase is Phase.ENDED and core.downstream.get((CLIENT, 1)) is None
    with pytest.raises(LifecycleError):
        core.lifecycle.pushed(subscription, 4.0)
