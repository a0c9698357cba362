"""Which subscription to serve next: rates, priority with aging, parking (CA 3197003 [0138], [0141]-
[0146], Fig. 7). Pure: the caller passes the time in. Rules:

1. A subscription is **pending** with something to push (``wake``); serving it clears that.
2. A pending subscription is **due** when its token bucket (``rate`` a second, at most ``BURST``,
   starting full) holds a push, or for a new tick a second one filled on the ticks' own times
   does (docs/concepts.md, "The data's clock"); a change of view alone (``eager=False``) needs
   ``LAZY``. Until then it waits in a timer queue.
3. Due subscriptions go highest **effective priority** first:
   ``priority + aging * (now - due_since)``, a heap on ``due_since - priority / aging``.
4. One the caller cannot serve now is **parked** under a reason, keeping its ``due_since``, until
   ``unpark`` (latest-value coalescing: nothing queues for a busy connection). Nothing starves:
   rates bound how often others are served. The caller's loop: ``settle(now)`` once per round,
   ``pop()`` until None, and for each either ``served``, ``park``, ``defer`` or ``idle``; ones
   popped but not handled go back by ``requeue``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass
from enum import Enum

#: Priority units gained per second of waiting: 100 ms of waiting is worth one priority level.
AGING = 10.0
#: Pushes a subscription's rate bucket holds at most (see rule 2): one for the push, one spare
#: that a view change may take, and one that absorbs ticks arriving early.
BURST = 3.0
#: Pushes the bucket must hold for a push owed to a change of view alone (see rule 2): it never
#: takes the last spare push, which keeps the subscription's pushes on its ticks' beat.
LAZY = BURST - 0.5


class Where(Enum):
    """Where a subscription is in the scheduler."""

    IDLE = "idle"  # nothing pending
    FRESH = "fresh"  # pending, not yet sorted into the timer or ready queue
    TIMER = "timer"  # pending, waiting for its rate to allow the next push
    READY = "ready"  # due, in the ready heap
    POPPED = "popped"  # handed to the caller this round
    PARKED = "parked"  # due but blocked; see ``reason``


@dataclass(slots=True)
class Slot:
    """One subscription's scheduling state."""

    priority: float
    rate: float
    credit: float = BURST  # pushes the rate allows, as of ``credit_at``
    credit_at: float = -math.inf
    data: float = BURST  # pushes the rate allows on the data's clock, as of ``data_at``
    data_at: float = -math.inf  # the tick time of the state last pushed
    data_new: float = -math.inf  # the tick time of the newest state woken with
    need: float = 1.0  # credit the pending push needs (1, or LAZY for a view change alone)
    due_since: float | None = None
    where: Where = Where.IDLE
    reason: Hashable = None
    version: int = 0  # heap entries of older versions are stale
    rewoken: float | None = None  # woken while popped (with this need): pending again after


class Scheduler:
    """Rate timers and an aging priority queue over subscriptions (any hashable ids).

    Attributes:
        aging: priority units gained per second of waiting.
        served_count: pushes served.
        parked_count: times a due subscription had to be parked.
    """

    def __init__(self, aging: float = AGING) -> None:
        if not aging > 0:
            raise ValueError(f"aging {aging!r} must be > 0 (else low priorities could starve)")
        self.aging = aging
        self.served_count = 0
        self.parked_count = 0
        self._slots: dict[Hashable, Slot] = {}
        self._fresh: list[Hashable] = []
        self._timers: list[tuple[float, int, int, Hashable]] = []
        self._ready: list[tuple[float, int, int, Hashable]] = []
        self._lots: dict[Hashable, set[Hashable]] = {}
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, sid: Hashable) -> bool:
        return sid in self._slots

    # -- membership -----------------------------------------------------------------------

    def add(self, sid: Hashable, priority: float, rate: float) -> None:
        """Start scheduling ``sid`` (pending: its first push is owed)."""
        self._slots[sid] = Slot(priority=priority, rate=rate)
        self.wake(sid)

    def update(self, sid: Hashable, priority: float, rate: float) -> None:
        """Change a subscription's priority or rate; it keeps how long it has waited.

        The credit already in its rate bucket is kept (and grows at the new rate).
        """
        slot = self._slots[sid]
        slot.priority, slot.rate = priority, rate
        if slot.where in (Where.READY, Where.TIMER):
            self._resort(sid, slot)

    def reprioritise(self, sid: Hashable, priority: float) -> None:
        """Change a subscription's priority only (one derived from its rows:
        ``relay.core.tiering``); it keeps how long it has waited and its rate's credit."""
        slot = self._slots[sid]
        slot.priority = priority
        if slot.where in (Where.READY, Where.TIMER):
            self._resort(sid, slot)

    def fresh(self, among: Collection[Hashable] | None = None) -> list[Hashable]:
        """The subscriptions pending since the last ``settle``, not yet sorted by priority (only
        those ``among``, if given: whichever is fewer is looked through)."""
        slots = self._slots
        looked = self._fresh if among is None or len(among) >= len(self._fresh) else among
        fresh = (sid for sid in looked if sid in slots and slots[sid].where is Where.FRESH)
        if among is not None and looked is self._fresh:
            fresh = (sid for sid in fresh if sid in among)
        return list(dict.fromkeys(fresh))

    def remove(self, sid: Hashable) -> None:
        """Stop scheduling ``sid`` (unknown ids are ignored)."""
        slot = self._slots.pop(sid, None)
        if slot is not None and slot.where is Where.PARKED:
            self._leave_lot(sid, slot)

    def _leave_lot(self, sid: Hashable, slot: Slot) -> None:
        lot = self._lots.get(slot.reason)
        if lot is not None:
            lot.discard(sid)
            if not lot:
                del self._lots[slot.reason]

    def priority(self, sid: Hashable, now: float) -> float:
        """``sid``'s effective priority now (its priority plus what waiting added)."""
        slot = self._slots[sid]
        waited = 0.0 if slot.due_since is None else max(0.0, now - slot.due_since)
        return slot.priority + self.aging * waited

    # -- becoming pending -----------------------------------------------------------------

    def wake(self, sid: Hashable, eager: bool = True, tick_time: float | None = None) -> None:
        """``sid`` has something new to push (unknown ids are ignored).

        Args:
            sid: the subscription.
            eager: new state (True), or only a change of its view, which may wait for the next
                state if the rate has no room to spare (see rule 2).
            tick_time: the tick time of the new state, if it brought a new tick (rule 2).
        """
        slot = self._slots.get(sid)
        if slot is None:
            return
        need = 1.0 if eager else LAZY
        newer = False
        if tick_time is not None and tick_time > slot.data_new:
            slot.data_new, newer = tick_time, True
        if slot.where is Where.IDLE:  # the common case (a new state wakes every reader)
            slot.need, slot.where = need, Where.FRESH
            self._fresh.append(sid)
            return
        if slot.where is Where.TIMER and (need < slot.need or newer):
            slot.need = min(slot.need, need)
            self._resort(sid, slot)  # due sooner now
            return
        slot.need = min(slot.need, need)
        if slot.where is Where.PARKED:
            self._leave_lot(sid, slot)
            slot.where = Where.FRESH
            self._fresh.append(sid)
        elif slot.where is Where.POPPED:
            slot.rewoken = need if slot.rewoken is None else min(slot.rewoken, need)

    def wake_all(
        self, sids: Iterable[Hashable], eager: bool = True, tick_time: float | None = None
    ) -> None:
        """``wake(sid, eager, tick_time)`` for each of ``sids`` (a new state wakes every reader
        of its dataset: the idle ones, the common case, without a call each)."""
        slots, fresh = self._slots, self._fresh
        need = 1.0 if eager else LAZY
        tick = -math.inf if tick_time is None else tick_time
        for sid in sids:
            slot = slots.get(sid)
            if slot is None:
                continue
            if slot.where is Where.IDLE:
                slot.need, slot.where = need, Where.FRESH
                if tick > slot.data_new:  # noqa: PLR1730  (per reader per tick: no call)
                    slot.data_new = tick
                fresh.append(sid)
            else:
                self.wake(sid, eager, tick_time)

    def park(self, sid: Hashable, reason: Hashable) -> None:
        """A popped subscription cannot be served until ``unpark(reason)``; it keeps its age."""
        slot = self._slots[sid]
        slot.where, slot.reason, slot.rewoken = Where.PARKED, reason, None
        self._lots.setdefault(reason, set()).add(sid)
        self.parked_count += 1

    def unpark(self, reason: Hashable) -> int:
        """Whatever was blocked by ``reason`` may be served again; returns how many."""
        lot = self._lots.pop(reason, set())
        for sid in lot:
            self.wake(sid)
        return len(lot)

    def parked(self, reason: Hashable) -> int:
        """How many subscriptions wait on ``reason``."""
        return len(self._lots.get(reason, ()))

    # -- a round --------------------------------------------------------------------------

    def settle(self, now: float) -> None:
        """Sort newly pending subscriptions and elapsed timers into the ready queue."""
        fresh, self._fresh = self._fresh, []
        slots, ready = self._slots, self._ready
        entries = []  # ``_enqueue``'s ready entries, heaped at once below (a swap wakes many)
        for sid in fresh:
            slot = slots.get(sid)
            if slot is None or slot.where is not Where.FRESH:
                continue
            if slot.due_since is None and _due_at(slot) > now:
                self._enqueue(sid, slot, now)  # to the timers
                continue
            slot.version += 1
            if slot.due_since is None:
                slot.due_since = now  # it waits from when it became pending
            slot.where = Where.READY
            key = slot.due_since - slot.priority / self.aging
            entries.append((key, next(self._order), slot.version, sid))
        if len(entries) * 4 >= len(ready):
            ready.extend(entries)
            heapq.heapify(ready)
        else:
            for entry in entries:
                heapq.heappush(ready, entry)
        while self._timers and self._timers[0][0] <= now:
            due, _, version, sid = heapq.heappop(self._timers)
            slot = self._slots.get(sid)
            if slot is not None and slot.version == version and slot.where is Where.TIMER:
                slot.due_since = due
                self._push_ready(sid, slot)

    def _resort(self, sid: Hashable, slot: Slot) -> None:
        """Sort a queued subscription again at the next ``settle`` (its heap entry goes stale)."""
        slot.version += 1
        slot.where = Where.FRESH
        self._fresh.append(sid)

    def _enqueue(self, sid: Hashable, slot: Slot, now: float) -> None:
        slot.version += 1
        if slot.due_since is not None:  # it was due already (parked, or re-keyed): keep its age
            self._push_ready(sid, slot)
            return
        due = _due_at(slot)
        if due <= now:
            slot.due_since = now  # it waits from when it became pending
            self._push_ready(sid, slot)
        else:
            slot.where = Where.TIMER
            heapq.heappush(self._timers, (due, next(self._order), slot.version, sid))

    def _push_ready(self, sid: Hashable, slot: Slot) -> None:
        assert slot.due_since is not None
        slot.where = Where.READY
        key = slot.due_since - slot.priority / self.aging
        heapq.heappush(self._ready, (key, next(self._order), slot.version, sid))

    def pop_many(self, count: int) -> list[Hashable]:
        """``pop`` up to ``count`` times: the due subscriptions in the order ``pop`` gives."""
        popped: list[Hashable] = []
        ready, slots = self._ready, self._slots
        while ready and len(popped) < count:
            _, _, version, sid = heapq.heappop(ready)
            slot = slots.get(sid)
            if slot is not None and slot.version == version and slot.where is Where.READY:
                slot.where = Where.POPPED
                popped.append(sid)
        return popped

    def pop(self) -> Hashable | None:
        """The due subscription with the highest effective priority, or None."""
        while self._ready:
            _, _, version, sid = heapq.heappop(self._ready)
            slot = self._slots.get(sid)
            if slot is not None and slot.version == version and slot.where is Where.READY:
                slot.where = Where.POPPED
                return sid
        return None

    def served(self, sid: Hashable, now: float) -> None:
        """A popped subscription was served at ``now``: not pending until woken again."""
        slot = self._slots[sid]
        credit = min(BURST, slot.credit + (now - slot.credit_at) * slot.rate)
        slot.credit, slot.credit_at, slot.due_since = max(credit - 1.0, 0.0), now, None
        if slot.data_new > slot.data_at:  # a new tick: on the data's clock too
            slot.data, slot.data_at = max(_data_credit(slot) - 1.0, 0.0), slot.data_new
        self.served_count += 1
        self._rest(sid, slot)

    def served_all(self, sids: Iterable[Hashable], now: float) -> None:
        """``served`` for each of ``sids`` (popped, all served at ``now``: a turn's quiet views,
        ``relay.core.serving``), their rate buckets advanced in one pass."""
        slots, idle, count = self._slots, Where.IDLE, 0
        for sid in sids:
            slot = slots[sid]
            credit = slot.credit + (now - slot.credit_at) * slot.rate
            credit = (BURST if credit > BURST else credit) - 1.0
            slot.credit, slot.credit_at, slot.due_since = credit if credit > 0.0 else 0.0, now, None
            if slot.data_new > slot.data_at:  # a new tick: on the data's clock too
                data = slot.data + (slot.data_new - slot.data_at) * slot.rate
                data = (BURST if data > BURST else data) - 1.0
                slot.data, slot.data_at = data if data > 0.0 else 0.0, slot.data_new
            slot.where = idle
            count += 1
            if slot.rewoken is not None:
                need, slot.rewoken = slot.rewoken, None
                self.wake(sid, eager=need <= 1.0)
        self.served_count += count

    def idle(self, sid: Hashable) -> None:
        """A popped subscription turned out to have nothing to send: not pending, not served."""
        slot = self._slots[sid]
        slot.due_since = None
        self._rest(sid, slot)

    def _rest(self, sid: Hashable, slot: Slot) -> None:
        slot.where = Where.IDLE
        if slot.rewoken is not None:
            need, slot.rewoken = slot.rewoken, None
            self.wake(sid, eager=need <= 1.0)

    def defer(self, sid: Hashable, until: float) -> None:
        """A popped subscription may not be served before ``until`` (its connection has spent
        its SQL time, ``relay.core.throttle.Budgets``): it waits in the timer queue, then is due
        again, its age counted from then."""
        slot = self._slots[sid]
        slot.version += 1
        slot.where, slot.rewoken, slot.due_since = Where.TIMER, None, None
        heapq.heappush(self._timers, (until, next(self._order), slot.version, sid))

    def requeue(self, sid: Hashable) -> None:
        """Hand back a popped subscription unserved; it keeps its place and age."""
        slot = self._slots.get(sid)
        if slot is not None and slot.where is Where.POPPED:
            slot.version += 1
            slot.rewoken = None
            self._push_ready(sid, slot)

    def next_wakeup(self) -> float | None:
        """When the next round has work: -inf if now, a rate timer's time, or None."""
        if self._fresh or self._ready:
            return -math.inf
        while self._timers:
            due, _, version, sid = self._timers[0]
            slot = self._slots.get(sid)
            if slot is not None and slot.version == version and slot.where is Where.TIMER:
                return due
            heapq.heappop(self._timers)
        return None

    def waiting(self) -> int:
        """Subscriptions pending (fresh, timed, ready or parked)."""
        return sum(1 for slot in self._slots.values() if slot.where is not Where.IDLE)


def _due_at(slot: Slot) -> float:
    """When ``slot``'s rate bucket next holds what its push needs (-inf: it does already; the
    data's clock moves only with a wake, so a wait is the wall clock's)."""
    if slot.credit >= slot.need or (
        slot.data_new > slot.data_at and _data_credit(slot) >= slot.need
    ):
        return -math.inf
    return slot.credit_at + (slot.need - slot.credit) / slot.rate


def _data_credit(slot: Slot) -> float:
    """What ``slot``'s bucket holds on the data's clock with the newest tick woken with (one
    not yet pushed: only a push of a new tick takes from it, or is allowed by it)."""
    return min(BURST, slot.data + (slot.data_new - slot.data_at) * slot.rate)
