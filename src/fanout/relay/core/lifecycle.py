"""A subscription's lifecycle at the relay, sans I/O: one state machine, its rules here.

Rules:

1. A subscription is **pending** from the moment it is accepted (``Subscribed`` sent) until its
   first push, and again whenever its next push must be the full view (its view, transform or
   dataset changed; an ``every`` subscription restarted by a ``resync``).
2. It **waits for coverage** while ready primitives do not cover its view (its snapshots are on
   the way, a relative view's entity moved off what is held, the upstream link is down). It is
   parked under ``("coverage", dataset)`` and unparked when primitives of a dataset it reads
   become ready (a live subscription whose coverage shrank finds out at its next turn).
3. It is **blocked** while its connection has not written everything it was sent before: parked
   under ``("client", connection)`` until the shell says the connection is writable. Its
   pushes meanwhile coalesce into one (latest-value) for mode ``latest``; an ``every``
   subscription continues seq by seq from where it was.
4. It is **put off** while its connection has spent its share of the relay's SQL time
   (``relay.core.throttle.Budgets``): a timer in the scheduler until the time is paid back.
5. An ``every`` subscription **waits for the log** while the seq it needs next is neither in the
   relay's window nor learnt: parked under ``("knowledge", dataset)`` until ``Knowledge``
   arrives (its curiosity was sent upstream).
6. It is **live** once a push or no-update went out; the scheduler queues it again at its rate
   whenever a new state concerns it.
7. It **ends** on ``Unsubscribe``, when its connection goes, or when it cannot be served (its
   query fails, its entity is gone, the publisher refused what it needs). Ended is final: no
   event moves a subscription out of it, and the relay forgets it.

Every move between these phases is made here, so the scheduler's parking reasons and the
phases cannot drift apart.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from fanout.relay.core.scheduler import Scheduler

if TYPE_CHECKING:
    from fanout.relay.core.downstream import Downstream, Subscription


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


TRANSITIONS: dict[Event, Phase] = {
    Event.RESTART: Phase.PENDING,
    Event.UNCOVERED: Phase.WAITING,
    Event.BUSY: Phase.BLOCKED,
    Event.OVER_BUDGET: Phase.PUT_OFF,
    Event.UNKNOWN_SEQ: Phase.ASKING,
    Event.PUSHED: Phase.LIVE,
    Event.END: Phase.ENDED,
}
"""The phase each event leads to, from any phase but ``ENDED`` (rule 7)."""


class LifecycleError(RuntimeError):
    """An event for a subscription that has ended: a bug in the relay, not a peer's error."""


def advance(phase: Phase, event: Event) -> Phase:
    """The phase after ``event`` (the table above).

    Raises:
        LifecycleError: ``phase`` is ``ENDED``.
    """
    if phase is Phase.ENDED:
        raise LifecycleError(f"{event.value} after the subscription ended")
    return TRANSITIONS[event]


class Lifecycle:
    """Moves subscriptions between phases, parking and queueing them in the scheduler."""

    def __init__(self, downstream: Downstream, scheduler: Scheduler) -> None:
        self.downstream = downstream
        self.scheduler = scheduler

    def _move(self, subscription: Subscription, event: Event) -> None:
        subscription.phase = advance(subscription.phase, event)

    def start(self, subscription: Subscription, rate: float) -> None:
        """A new subscription (rule 1): queued for its first push (the caller indexes it in
        the downstream store once its view is set)."""
        self.scheduler.add(subscription.key, subscription.priority, rate)

    def restart(self, subscription: Subscription) -> None:
        """Its next push is the full view (rule 1)."""
        self._move(subscription, Event.RESTART)

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
        """Its connection spent its SQL share; served again at ``until`` (rule 4)."""
        self._move(subscription, Event.OVER_BUDGET)
        self.scheduler.defer(subscription.key, until)

    def asking(self, subscription: Subscription) -> None:
        """Its next seq must come from the publisher's log (rule 5)."""
        self._move(subscription, Event.UNKNOWN_SEQ)
        self.scheduler.park(subscription.key, ("knowledge", subscription.dataset))

    def pushed(self, subscription: Subscription, now: float, count: int = 1) -> None:
        """``count`` pushes or no-updates went out at ``now`` (rule 6)."""
        if subscription.phase is Phase.ENDED:  # ``advance``, inlined: this runs for every push
            raise LifecycleError(f"{Event.PUSHED.value} after the subscription ended")
        subscription.phase = TRANSITIONS[Event.PUSHED]
        subscription.last_push = now
        subscription.pushes += count
        self.scheduler.served(subscription.key, now)

    def end(self, subscription: Subscription) -> None:
        """It ends and is forgotten (rule 7)."""
        self._move(subscription, Event.END)
        self.downstream.remove(subscription.key)
        self.scheduler.remove(subscription.key)

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
