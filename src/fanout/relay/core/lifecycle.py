"""A subscription's lifecycle at the relay, sans I/O: one state machine, its rules here.
Each phase in full (what parks it, what wakes it): docs/architecture.md, "Inside the relay".

1. **Pending** from ``Subscribed`` until its first push, and whenever its next push is full.
2. **Waiting for coverage** while ready primitives do not cover it: parked per dataset.
3. **Blocked** while its connection is still writing: parked per connection, pushes coalesced.
4. **Put off** while its connection has spent its SQL time (``throttle.Budgets``) or its link's
   bytes (``links``).
5. **Waiting for the log** (``every``) while its next seq is neither held nor learnt.
6. **Live** once a push or no-update went out; queued again at its rate.
7. **Ended** on ``Unsubscribe``, its connection gone, or when it cannot be served: final.
8. Its **progress** is written here and nowhere else; what it asked (``downstream.Asked``) is
   replaced here whole; every change of phase goes through ``TRANSITIONS``. So parking and
   phases cannot drift apart (``tests/relay/core/test_ownership.py``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from enum import Enum
from typing import TYPE_CHECKING

import msgspec

from fanout.relay.core import planner
from fanout.relay.core.scheduler import Scheduler
from fanout.relay.data.pushes import Held

if TYPE_CHECKING:
    from fanout.relay.core.changesets import Cursor
    from fanout.relay.core.downstream import Asked, Downstream, Subscription
    from fanout.relay.data.buffers import Keys, Stamp


class Phase(Enum):
    """Where a subscription is in its lifecycle (the module's rules)."""

    PENDING = "pending"
    WAITING = "waiting for coverage"
    BLOCKED = "blocked on its connection"
    PUT_OFF = "put off"
    ASKING = "waiting for the log"
    LIVE = "live"
    ENDED = "ended"


class Event(Enum):
    """What moves a subscription between phases."""

    RESTART = "restart"
    UNCOVERED = "uncovered"
    BUSY = "connection busy"
    OVER_BUDGET = "over its SQL share"
    UNKNOWN_SEQ = "seq not at hand"
    PUSHED = "pushed"
    END = "end"


#: What each event leads to from a phase that is not over (rules 1-7): a subscription is judged
#: afresh at each turn it is due, so any verdict may follow any other.
_ONWARD: dict[Event, Phase] = {
    Event.RESTART: Phase.PENDING,
    Event.UNCOVERED: Phase.WAITING,
    Event.BUSY: Phase.BLOCKED,
    Event.OVER_BUDGET: Phase.PUT_OFF,
    Event.UNKNOWN_SEQ: Phase.ASKING,
    Event.PUSHED: Phase.LIVE,
    Event.END: Phase.ENDED,
}

TRANSITIONS: dict[Phase, dict[Event, Phase]] = {
    **{phase: _ONWARD for phase in Phase if phase is not Phase.ENDED},
    Phase.ENDED: {},  # final (rule 7)
}
"""phase -> event -> the phase it leads to; an event a phase does not list is a bug."""


class LifecycleError(RuntimeError):
    """An event for a subscription that has ended: a bug in the relay, not a peer's error."""


def advance(phase: Phase, event: Event) -> Phase:
    """The phase after ``event`` (``TRANSITIONS``).

    Raises:
        LifecycleError: ``phase`` does not take ``event`` (it is ``ENDED``).
    """
    after = TRANSITIONS[phase].get(event)
    if after is None:
        raise _refused(phase, event)
    return after


def _refused(phase: Phase, event: Event) -> LifecycleError:
    return LifecycleError(f"{event.value} after the subscription {phase.value}")


class Lifecycle:
    """Moves subscriptions between phases, parking and queueing them in the scheduler, and
    records their progress (rule 8)."""

    def __init__(self, downstream: Downstream, scheduler: Scheduler) -> None:
        self.downstream = downstream
        self.scheduler = scheduler

    def _move(self, subscription: Subscription, event: Event) -> None:
        subscription.phase = advance(subscription.phase, event)

    # -- what was asked ----------------------------------------------------------------

    def start(self, subscription: Subscription, rate: float, now: float | None = None) -> None:
        """A new subscription (rule 1): indexed, and queued at ``rate`` for its first push;
        ``now`` dates its view (``changed``)."""
        if now is not None:
            subscription.moved_at = now
        self.downstream.put(subscription)
        self.scheduler.add(subscription.key, subscription.priority, rate)

    def changed(
        self, subscription: Subscription, asked: Asked, rate: float, now: float | None
    ) -> None:
        """Its subscriber asked anew (``asked``, served at ``rate``): re-indexed, and pushed
        the full view if its dataset or transform changed (rule 1), else what its new view
        adds. ``now`` dates the change, so the planner learns how fast the view moves
        (``planner.velocity``; without it none is estimated)."""
        before = subscription.asked
        key = subscription.key
        self.downstream.remove(key)  # indexed again below, perhaps under another dataset
        if (before.dataset, before.shape) != (asked.dataset, asked.shape):
            self.restart(subscription, "its dataset or transform changed")
        self.scheduler.update(key, asked.priority, rate)
        self.scheduler.wake(key, eager=subscription.held is None)
        if now is not None:
            if subscription.moved_at is None or before.dataset != asked.dataset:
                subscription.velocity = None
                subscription.moved_at = now
            elif asked.view != before.view:
                elapsed = now - subscription.moved_at
                subscription.velocity = planner.velocity(before.view, asked.view, elapsed)
                subscription.moved_at = now
        subscription.asked = asked
        self.downstream.put(subscription)

    # -- phases (rules 1-7) ------------------------------------------------------------

    def restart(self, subscription: Subscription, reason: str) -> None:
        """Its next push is the full view (rule 1); an ``every`` subscription under way is
        told why (a ``resync`` with ``reason``)."""
        self._move(subscription, Event.RESTART)
        subscription.held = None
        if subscription.cursor is not None:
            subscription.cursor = None
            subscription.owed = reason

    def uncovered(self, subscription: Subscription) -> None:
        """Ready primitives do not cover its view (rule 2)."""
        self._move(subscription, Event.UNCOVERED)
        self.scheduler.park(subscription.key, ("coverage", subscription.dataset))

    def busy(self, subscription: Subscription) -> None:
        """Its connection is still writing (rule 3)."""
        self._move(subscription, Event.BUSY)
        subscription.deferred += 1
        self.scheduler.park(subscription.key, ("client", subscription.client))

    def over_budget(self, subscription: Subscription, until: float) -> None:
        """Its connection spent its SQL share, or its link all it may take for now
        (``relay.core.links``); served again at ``until`` (rule 4)."""
        self._move(subscription, Event.OVER_BUDGET)
        self.scheduler.defer(subscription.key, until)

    def asking(self, subscription: Subscription) -> None:
        """Its next seq must come from the publisher's log (rule 5)."""
        self._move(subscription, Event.UNKNOWN_SEQ)
        self.scheduler.park(subscription.key, ("knowledge", subscription.dataset))

    def pushed(
        self, subscription: Subscription, now: float, count: int = 1, sent: int = 0, rows: int = 0
    ) -> None:
        """``count`` pushes or no-updates went out at ``now``, ``sent`` bytes carrying ``rows``
        rows (rule 6)."""
        after = TRANSITIONS[subscription.phase].get(Event.PUSHED)  # ``advance``, inlined: per push
        if after is None:
            raise _refused(subscription.phase, Event.PUSHED)
        subscription.phase = after
        subscription.last_push = now
        subscription.pushes += count
        subscription.sent_bytes += sent
        subscription.rows += rows
        self.scheduler.served(subscription.key, now)

    def pushed_all(self, pushes: Sequence[tuple[Subscription, int, int]], now: float) -> None:
        """``pushed`` for each of a turn's pushes cut together, (subscription, bytes sent, rows
        carried), one each at ``now``: their rate buckets advanced in one pass (rule 6)."""
        phase: Phase | None = None  # most are in one phase: its transition looked up once
        after: Phase | None = None
        for subscription, sent, rows in pushes:
            if subscription.phase is not phase:
                phase = subscription.phase
                after = TRANSITIONS[phase].get(Event.PUSHED)
            if after is None:
                raise _refused(subscription.phase, Event.PUSHED)
            subscription.phase = after
            subscription.last_push = now
            subscription.pushes += 1
            subscription.sent_bytes += sent
            subscription.rows += rows
        self.scheduler.served_all([subscription.key for subscription, _, _ in pushes], now)

    def unchanged(
        self, subscriptions: Sequence[Subscription], stamp: Stamp, generation: int, now: float
    ) -> list[bool]:
        """Quiet views (``relay.kinds.quiet``): each now holds the same keys as of ``stamp``
        (the buffer's ``generation``), as ``holds`` of a push that changes nothing would make
        it. Those that held an earlier state are pushed a no-update at ``now`` (True; rule 6),
        the others idle: ``holds``, ``pushed`` and the scheduler's ``served`` in one pass."""
        epoch, seq = stamp.epoch, stamp.seq
        pushed: list[bool] = []
        keys: list[Hashable] = []
        phase: Phase | None = None  # as in ``pushed_all``
        after: Phase | None = None
        for subscription in subscriptions:
            before = subscription.held
            assert before is not None
            if before.epoch == epoch:
                subscription.coalesced += max(0, seq - before.seq - 1)
            subscription.held = Held(before.view, generation, epoch, seq, before.keys)
            if before.epoch == epoch and before.seq == seq:
                self.scheduler.idle(subscription.key)  # a new state, but no new tick
                pushed.append(False)
                continue
            if subscription.phase is not phase:
                phase = subscription.phase
                after = TRANSITIONS[phase].get(Event.PUSHED)
            if after is None:
                raise _refused(subscription.phase, Event.PUSHED)
            subscription.phase = after
            subscription.last_push = now
            subscription.pushes += 1
            pushed.append(True)
            keys.append(subscription.key)
        self.scheduler.served_all(keys, now)
        return pushed

    def sent(self, subscription: Subscription, sent: int, rows: int) -> None:
        """One more ``every`` step of ``sent`` bytes carrying ``rows`` rows went out (its
        push counted by ``pushed`` with the burst)."""
        subscription.sent_bytes += sent
        subscription.rows += rows

    def end(self, subscription: Subscription) -> None:
        """It ends and is forgotten (rule 7)."""
        self._move(subscription, Event.END)
        self.downstream.remove(subscription.key)
        self.scheduler.remove(subscription.key)

    # -- progress within a phase (rule 8) ----------------------------------------------

    def judged(
        self, subscription: Subscription, servable: bool, seen: tuple[Hashable, int, int]
    ) -> None:
        """Whether ready primitives cover its view, judged at ``seen`` ((located view, shrink
        version, growth version))."""
        subscription.servable = servable
        subscription.coverage_seen = seen

    def holds(self, subscription: Subscription, held: Held, stamp: Stamp) -> None:
        """Its subscriber holds ``held`` once the cut of the state ``stamp`` names is sent; the
        ticks between the one it held and that one were coalesced."""
        before = subscription.held
        if before is not None and before.epoch == stamp.epoch:
            subscription.coalesced += max(0, stamp.seq - before.seq - 1)
        subscription.held = held

    def detail(self, subscription: Subscription, coarse: bool) -> None:
        """Its pushes go at coarser detail than asked, or at the detail asked again
        (``relay.core.links``, rule 5). Back at full detail, every row it holds goes again
        (or its next push is the full view): they were sent coarser."""
        subscription.coarse = coarse
        if not coarse and subscription.held is not None:
            held = subscription.held.refreshed()
            if held is None:
                self.restart(subscription, "detail")
            else:
                subscription.held = held

    def new_epoch(self, subscription: Subscription) -> None:
        """The publisher's epoch changed: every row it holds counts as updated at its next
        push."""
        if subscription.held is not None:
            subscription.held = msgspec.structs.replace(subscription.held, refresh=True)

    def announced(self, subscription: Subscription) -> str | None:
        """Why its next push restarts it (``resync``), now that it is told; None if it does
        not."""
        owed, subscription.owed = subscription.owed, None
        return owed

    def placed(self, subscription: Subscription, cursor: Cursor) -> None:
        """Its ``every`` stream continues from ``cursor`` (its full view went out there)."""
        subscription.cursor = cursor

    def stepped(self, subscription: Subscription, seq: int, keys: Keys) -> None:
        """Its ``every`` stream went out up to ``seq``, after which its subscriber holds
        ``keys``."""
        cursor = subscription.cursor
        assert cursor is not None
        cursor.seq, cursor.keys = seq, keys

    def trusted(self, subscription: Subscription, after: int | None) -> None:
        """The relay's live change sets are complete for its view after ``after`` (None: not
        until it is servable again)."""
        cursor = subscription.cursor
        if cursor is not None:
            cursor.trusted_after = after

    # -- what unparks subscriptions ----------------------------------------------------

    def coverage_grew(self, datasets: set[str]) -> None:
        """Primitives became ready: subscriptions of these datasets may be servable."""
        for name in sorted(datasets):
            self.scheduler.unpark(("coverage", name))

    def writable(self, client: int) -> bool:
        """A connection wrote everything: its blocked subscriptions may go (rule 3).

        Returns:
            Whether any was waiting for it.
        """
        return self.scheduler.unpark(("client", client)) > 0

    def counts(self) -> dict[Phase, int]:
        """How many subscriptions are in each phase."""
        found = dict.fromkeys(Phase, 0)
        for subscription in self.downstream:
            found[subscription.phase] += 1
        return found
