"""The scheduler: rates, priority with aging, parking — simulated with a fake clock."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable
from typing import cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.scheduler import BURST, Scheduler


def serve_round(scheduler: Scheduler, now: float, capacity: int) -> list[Hashable]:
    """Serve up to ``capacity`` due subscriptions, as the pump would with a time budget."""
    scheduler.settle(now)
    served = []
    while len(served) < capacity and (sid := scheduler.pop()) is not None:
        scheduler.served(sid, now)
        served.append(sid)
    return served


def test_higher_priority_is_served_first() -> None:
    scheduler = Scheduler()
    for sid, priority in (("low", 0), ("high", 5), ("mid", 2)):
        scheduler.add(sid, priority, rate=10.0)
    assert serve_round(scheduler, 0.0, capacity=3) == ["high", "mid", "low"]


def test_waiting_raises_priority_until_the_low_one_wins() -> None:
    scheduler = Scheduler(aging=10.0)
    scheduler.add("low", 0, rate=100.0)
    scheduler.settle(0.0)  # "low" is due from t = 0
    scheduler.add("high", 5, rate=100.0)
    assert scheduler.priority("low", 0.6) == pytest.approx(6.0)
    scheduler.settle(0.6)  # "high" is due from t = 0.6: 5 + 10 w < 6 + 10 w from then on
    assert scheduler.pop() == "low"
    assert scheduler.pop() == "high"


def test_the_rate_holds_a_subscription_back_and_next_wakeup_says_until_when() -> None:
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=4.0)
    for _ in range(int(BURST)):  # the full bucket: BURST pushes at once
        scheduler.wake("a")
        assert serve_round(scheduler, 10.0, capacity=9) == ["a"]
    scheduler.wake("a")
    assert serve_round(scheduler, 10.15, capacity=9) == []
    assert scheduler.next_wakeup() == pytest.approx(10.25)  # empty at 10.0, 4 per second
    assert serve_round(scheduler, 10.25, capacity=9) == ["a"]
    assert scheduler.next_wakeup() is None  # nothing pending


def test_a_change_of_view_alone_waits_for_room_to_spare() -> None:
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=10.0)
    for now in (0.0, 0.01, 0.1, 0.2):  # a quick second push, then new state at the rate
        scheduler.wake("a")
        assert serve_round(scheduler, now, capacity=1) == ["a"]
    scheduler.wake("a", eager=False)  # the view moved; the bucket holds 0.5
    assert serve_round(scheduler, 0.25, capacity=1) == []
    assert scheduler.next_wakeup() == pytest.approx(0.35)  # 1.5 pushes in the bucket
    scheduler.wake("a")  # the next tick's state comes first and carries the view change
    assert serve_round(scheduler, 0.3, capacity=1) == ["a"]


def test_waking_all_lazily_is_waking_each_as_a_change_of_view() -> None:
    """``wake_all(eager=False)`` (snapshots at the seq held: ``RelayCore.end_epoch``) needs
    room to spare, as ``wake(eager=False)`` does, and an eager wake still makes it due."""
    scheduler = Scheduler()
    for sid in ("idle", "timed"):
        scheduler.add(sid, 0, rate=10.0)
    for now in (0.0, 0.01, 0.1, 0.2):
        scheduler.wake_all(["idle", "timed"])
        assert serve_round(scheduler, now, capacity=2) == ["idle", "timed"]
    scheduler.wake("timed", eager=False)
    scheduler.settle(0.22)  # "timed" waits in the timer queue; "idle" is idle
    scheduler.wake_all(["idle", "timed", "unknown"], eager=False)
    assert serve_round(scheduler, 0.25, capacity=2) == []
    assert scheduler.next_wakeup() == pytest.approx(0.35)
    scheduler.wake_all(["timed"])
    assert serve_round(scheduler, 0.3, capacity=2) == ["timed"]
    assert serve_round(scheduler, 0.35, capacity=2) == ["idle"]


def test_a_late_push_does_not_delay_the_next_one() -> None:
    """Ticks at the subscription's own rate, each a little early or late: each goes out."""
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=10.0)
    pushes: list[Hashable] = []
    delays = []
    jitters = [0.0, 0.03, -0.02, 0.04, -0.03, 0.0, 0.02, -0.04, 0.0]  # seconds off the beat
    ticks = [tick * 0.1 + jitter for tick, jitter in enumerate(jitters)]
    for _ in range(int(BURST) - 1):  # spend the bucket's spare pushes
        scheduler.wake("a")
        assert serve_round(scheduler, -0.01, capacity=1) == ["a"]
    for now, following in itertools.pairwise(ticks):
        scheduler.wake("a")
        served = serve_round(scheduler, now, capacity=1)
        timer = scheduler.next_wakeup()  # the pump's rate timer, if it is set before the next tick
        if not served and timer is not None and timer < following:
            served = serve_round(scheduler, timer, capacity=1)
            delays.append(timer - now)
        pushes += served
    assert len(pushes) == 8
    # Ticks that come early right after a late one wait at most what the rate needs (a strict
    # 100 ms spacing would make five of them wait, 260 ms in all).
    assert sum(delays) <= 0.09 + 1e-9
    # a sustained faster stream is still held to the rate, after one push of slack
    for tick in range(20):
        scheduler.wake("a")
        pushes += serve_round(scheduler, 1.0 + tick * 0.05, capacity=1)
    assert len(pushes) <= 8 + 10 + BURST - 1  # 1 s at 10/s, plus the bucket's spare pushes


@settings(max_examples=200)
@given(
    ticks=st.lists(
        st.tuples(
            st.floats(-0.02, 0.02),  # the tick a little early or late
            st.floats(0.0, 0.09),  # its push sent that late (the loop busy with others)
            st.one_of(st.none(), st.floats(0.1, 0.9)),  # the view moved that far into the tick
        ),
        min_size=1,
        max_size=60,
    )
)
def test_on_a_stream_at_its_rate_every_tick_is_due_at_once(
    ticks: list[tuple[float, float, float | None]],
) -> None:
    """Ticks at the subscription's own rate, up to 20 ms early or late; each push sent up to
    90 ms after its tick; the view moving between ticks: every tick is due as soon as it comes,
    however late the push before it went out (rule 2)."""
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=10.0)
    previous = 0.0
    for number, (jitter, late, moved) in enumerate(ticks, start=1):
        now = number * 0.1 + jitter
        if moved is not None:  # pushed at once if the rate has room to spare
            at = previous + moved * (now - previous)
            scheduler.wake("a", eager=False)
            scheduler.settle(at)
            if scheduler.pop() == "a":
                scheduler.served("a", at)
        scheduler.wake("a")
        scheduler.settle(now)
        assert scheduler.pop() == "a", f"tick {number} waits for the rate"
        scheduler.served("a", now + late)
        previous = now


def test_a_parked_subscription_keeps_its_age() -> None:
    scheduler = Scheduler(aging=10.0)
    scheduler.add("busy", 0, rate=10.0)
    scheduler.settle(0.0)
    assert scheduler.pop() == "busy"
    scheduler.park("busy", ("client", 1))
    scheduler.add("new", 3, rate=10.0)
    scheduler.settle(1.0)  # "new" due from 1.0 with 3; "busy" due from 0.0: 10 after 1 s
    scheduler.unpark(("client", 1))
    scheduler.settle(1.0)
    assert scheduler.pop() == "busy"


def test_an_unserved_pop_goes_back_with_its_place() -> None:
    scheduler = Scheduler()
    scheduler.add("a", 1, rate=10.0)
    scheduler.add("b", 0, rate=10.0)
    scheduler.settle(0.0)
    assert scheduler.pop() == "a"
    scheduler.requeue("a")  # the round ended on its budget before serving it
    assert scheduler.pop() == "a"


def test_a_deferred_subscription_waits_until_its_time_then_is_due() -> None:
    scheduler = Scheduler()
    scheduler.add("a", 5, rate=1000.0)
    scheduler.add("b", 0, rate=1000.0)
    scheduler.settle(0.0)
    assert scheduler.pop() == "a"
    scheduler.defer("a", 2.5)  # its connection spent its SQL time: not before 2.5
    assert serve_round(scheduler, 0.0, capacity=5) == ["b"]
    assert scheduler.next_wakeup() == 2.5
    scheduler.wake("a")  # new state does not bring it forward
    assert serve_round(scheduler, 2.4, capacity=5) == []
    assert serve_round(scheduler, 2.5, capacity=5) == ["a"]
    assert scheduler.waiting() == 0


def test_a_wake_while_popped_is_not_lost() -> None:
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=1000.0)
    scheduler.settle(0.0)
    assert scheduler.pop() == "a"
    scheduler.wake("a")  # new state arrived while it was being served
    scheduler.served("a", 0.0)
    assert serve_round(scheduler, 1.0, capacity=1) == ["a"]


def test_removed_and_updated_subscriptions() -> None:
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=10.0)
    scheduler.add("b", 0, rate=10.0)
    scheduler.remove("a")
    scheduler.update("b", 7, rate=2.0)
    assert serve_round(scheduler, 0.0, capacity=5) == ["b"]
    assert scheduler.priority("b", 0.0) == 7
    for _ in range(int(BURST) - 1):
        scheduler.wake("b")
        assert serve_round(scheduler, 0.0, capacity=5) == ["b"]  # the bucket's spare pushes
    scheduler.wake("b")
    scheduler.settle(0.1)
    assert scheduler.next_wakeup() == pytest.approx(0.5)  # empty at 0.0, 2 per second
    with pytest.raises(ValueError, match="aging"):
        Scheduler(aging=0.0)


@settings(max_examples=100)
@given(
    priorities=st.lists(st.integers(0, 20), min_size=2, max_size=40),
    rates=st.lists(st.sampled_from([1.0, 5.0, 10.0, 30.0]), min_size=40, max_size=40),
    capacity=st.integers(1, 4),
    aging=st.sampled_from([2.0, 10.0, 50.0]),
)
def test_nothing_starves_under_constant_overload(
    priorities: list[int], rates: list[float], capacity: int, aging: float
) -> None:
    """Every subscription always has new state; the relay serves far fewer than are due.

    A subscription due at t outranks all that become due after t + (p_max - p) / aging, and
    each of the n - 1 others can be served at most once per its own interval before that, so
    its wait is bounded by the time the relay needs to serve those.
    """
    scheduler = Scheduler(aging=aging)
    count = len(priorities)
    step = 0.01  # a round every 10 ms, each serving ``capacity``
    for sid in range(count):
        scheduler.add(sid, priorities[sid], rates[sid])
    window = (max(priorities) - min(priorities)) / aging
    horizon = window + 2 * max(1 / r for r in rates[:count])
    # Pushes that may precede one: every other subscription, once per interval it can fit in.
    ahead = sum(math.ceil(horizon * rates[sid]) + 1 for sid in range(count))
    bound = (ahead / capacity + 1) * step + horizon
    served: dict[int, list[float]] = {sid: [] for sid in range(count)}
    for tick in range(int((bound * 3) / step)):
        now = tick * step
        for sid in range(count):
            scheduler.wake(sid)  # constant overload: everyone always has something new
        for sid in serve_round(scheduler, now, capacity):
            served[sid].append(now)
        for sid in range(count):
            last = served[sid][-1] if served[sid] else 0.0
            assert now - last <= bound, f"{sid} starved"
    for sid, times in served.items():
        assert_rate(np.array(times), rates[sid])


def assert_rate(times: np.ndarray, rate: float) -> None:
    """At most rate * T + BURST pushes in any T seconds.

    That is: any k + 1 pushes in a row span at least (k + 1 - BURST) / rate seconds.
    """
    for lag in range(1, len(times)):
        spans = times[lag:] - times[:-lag]
        assert np.all(spans >= (lag + 1 - BURST) / rate - 1e-9), f"{lag + 1} pushes too close"


@settings(max_examples=200)
@given(
    ticks=st.lists(
        st.tuples(
            st.floats(0.0, 0.3),  # the tick came that late (a relay behind its upstream)
            st.floats(0.0, 0.09),  # its push sent that late (the loop busy with others)
            st.booleans(),  # a moved view's rows came before it, at the seq held
        ),
        min_size=1,
        max_size=60,
    )
)
def test_ticks_at_its_rate_are_due_as_they_come_however_late_or_bunched(
    ticks: list[tuple[float, float, bool]],
) -> None:
    """Ticks at the subscription's own rate by their own times, arriving up to 300 ms late
    (so some bunched, and a late one followed by one on time), a view completed between
    some: every tick is due as soon as it comes (the data's clock, rule 2). With the wall
    clock alone, a tick coming early after late ones waited, and the pushes after it
    stayed locked behind the rate."""
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=10.0)
    scheduler.settle(0.0)
    assert scheduler.pop() == "a"
    scheduler.served("a", 0.0)
    arrived = 0.0
    for number, (late, sent, completed) in enumerate(ticks, start=1):
        tick_time = number * 0.1
        now = max(arrived, tick_time + late)  # in order
        if completed:  # pushed at once if the rate has room to spare
            scheduler.wake("a", eager=False)
            scheduler.settle(now)
            if scheduler.pop() == "a":
                scheduler.served("a", now)
        scheduler.wake("a", tick_time=tick_time)
        scheduler.settle(now)
        assert scheduler.pop() == "a", f"tick {number} waits for the rate"
        arrived = now + sent
        scheduler.served("a", arrived)


@settings(max_examples=200)
@given(
    wakes=st.lists(
        st.tuples(
            st.floats(0.0, 0.2),  # wall seconds since the last wake
            st.one_of(st.none(), st.floats(0.0, 0.2)),  # tick seconds gained, or no new tick
            st.booleans(),  # eager
        ),
        min_size=1,
        max_size=80,
    ),
    rate=st.sampled_from([1.0, 5.0, 10.0, 40.0]),
)
def test_both_clocks_together_bound_the_pushes(
    wakes: list[tuple[float, float | None, bool]], rate: float
) -> None:
    """Any k + 1 pushes in a row span at least (k + 1 - 2 * BURST) / rate seconds of the wall
    clock and the data's clock together: pushes the wall clock allowed are at most
    rate * T + BURST, those the ticks' times allowed rate * T' + BURST."""
    scheduler = Scheduler()
    scheduler.add("a", 0, rate=rate)
    now, tick, pushed = 0.0, 0.0, []
    for wall, gained, eager in wakes:
        now += wall
        if gained is not None:
            tick += gained
        scheduler.wake("a", eager, None if gained is None else tick)
        scheduler.settle(now)
        if scheduler.pop() == "a":
            scheduler.served("a", now)
            pushed.append((now, tick))
    times = np.array(pushed).reshape(-1, 2)
    for lag in range(1, len(times)):
        spans = (times[lag:] - times[:-lag]).sum(axis=1)
        assert np.all(spans >= (lag + 1 - 2 * BURST) / rate - 1e-9), f"{lag + 1} too close"


def test_priority_decides_who_gets_the_scarce_pushes() -> None:
    """Under overload the higher priority gets more pushes, the lower still gets some."""
    scheduler = Scheduler(aging=10.0)
    scheduler.add("high", 3, rate=100.0)
    scheduler.add("low", 0, rate=100.0)
    counts = {"high": 0, "low": 0}
    for tick in range(1000):
        now = tick * 0.01
        scheduler.wake("high")
        scheduler.wake("low")
        for sid in serve_round(scheduler, now, capacity=1):
            counts[str(sid)] += 1
    assert counts["high"] > counts["low"] > 0


@settings(max_examples=100)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["wake", "lazy", "round", "park", "unpark", "remove", "update"]),
            st.integers(0, 11),
            st.integers(1, 5),
        ),
        max_size=80,
    ),
    priorities=st.lists(st.integers(0, 5), min_size=12, max_size=12),
)
def test_pop_many_pops_what_pop_would_one_by_one(
    ops: list[tuple[str, int, int]], priorities: list[int]
) -> None:
    one, many = Scheduler(), Scheduler()
    for scheduler in (one, many):
        for sid, priority in enumerate(priorities):
            scheduler.add(sid, priority, rate=10.0 if sid % 3 else 40.0)
    now = 0.0
    for op, sid, count in ops:
        now += 0.013
        if op in {"round", "park"}:
            one.settle(now)
            many.settle(now)
            singles = []
            while len(singles) < count and (popped := one.pop()) is not None:
                singles.append(popped)
            assert many.pop_many(count) == singles
            for scheduler in (one, many):
                settle_popped(scheduler, singles, now, park=op == "park")
        else:
            for scheduler in (one, many):
                apply(scheduler, op, sid)
    one.settle(now + 1)
    many.settle(now + 1)
    assert many.pop_many(100) == list(iter(one.pop, None))


def apply(scheduler: Scheduler, op: str, sid: int) -> None:
    if op in {"wake", "lazy"}:
        scheduler.wake(sid, eager=op == "wake")
    elif op == "unpark":
        scheduler.unpark(sid % 2)
    elif op == "remove":
        scheduler.remove(sid)
    elif op == "update" and sid in scheduler:
        scheduler.update(sid, priority=sid % 4, rate=20.0)  # re-sorted: its old entry is stale


def settle_popped(scheduler: Scheduler, popped: list[Hashable], now: float, park: bool) -> None:
    for at, sid in enumerate(popped):
        if park and at == 0:
            scheduler.park(sid, cast(int, sid) % 2)
        else:
            scheduler.served(sid, now)


def bucket(pushes: list[float], rate: float, now: float) -> float:
    """The brute-force rate bucket: pushes a subscription's rate allows at ``now``, replayed
    from every push it had (full at first, ``BURST`` at most, one taken per push)."""
    credit, last = BURST, -math.inf
    for at in pushes:
        credit = max(min(BURST, credit + (at - last) * rate) - 1.0, 0.0)
        last = at
    return min(BURST, credit + (now - last) * rate)


@settings(max_examples=150, deadline=None)
@given(
    rates=st.lists(st.sampled_from([3.0, 7.0, 10.0, 40.0]), min_size=1, max_size=12),
    rounds=st.lists(
        st.tuples(st.floats(0.001, 0.3), st.sets(st.integers(0, 11))), min_size=1, max_size=40
    ),
    bulk=st.booleans(),
)
def test_served_all_serves_what_the_rate_buckets_allow_and_nothing_else(
    rates: list[float], rounds: list[tuple[float, set[int]]], bulk: bool
) -> None:
    """Each round serves every due subscription (``served_all``, or ``served`` one by one): a
    woken subscription is served at the first round its bucket (replayed from its pushes)
    holds a push, never before."""
    scheduler = Scheduler()
    for sid, rate in enumerate(rates):
        scheduler.add(sid, priority=sid % 3, rate=rate)
    pending = set(range(len(rates)))
    pushes: dict[int, list[float]] = {sid: [] for sid in range(len(rates))}
    now = 0.0
    for step, woken in rounds:
        now += step
        for sid in woken & set(range(len(rates))):
            scheduler.wake(sid)
            pending.add(sid)
        scheduler.settle(now)
        popped = cast(list[int], scheduler.pop_many(len(rates)))
        if bulk:
            scheduler.served_all(popped, now)
        else:
            for sid in popped:
                scheduler.served(sid, now)
        for sid in range(len(rates)):
            allowed = bucket(pushes[sid], rates[sid], now)
            if sid in popped:
                assert sid in pending and allowed >= 1.0 - 1e-9, f"{sid} served early"
            elif sid in pending:
                assert allowed < 1.0 + 1e-9, f"{sid} due but not served"
        for sid in popped:
            pushes[sid].append(now)
            pending.discard(sid)
    assert scheduler.served_count == sum(len(times) for times in pushes.values())


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["wake", "lazy", "round"]), st.integers(0, 7)),
        max_size=60,
    )
)
def test_served_all_leaves_the_scheduler_as_served_one_by_one(
    ops: list[tuple[str, int]],
) -> None:
    one, bulk = Scheduler(), Scheduler()
    for scheduler in (one, bulk):
        for sid in range(8):
            scheduler.add(sid, priority=sid % 3, rate=10.0 if sid % 2 else 25.0)
    now = 0.0
    for op, sid in ops:
        now += 0.011
        if op == "round":
            popped = []
            for scheduler in (one, bulk):
                scheduler.settle(now)
                popped.append(scheduler.pop_many(8))
                if sid % 2 and popped[-1]:
                    scheduler.wake(popped[-1][0], eager=sid % 4 == 1)  # woken while popped
            assert popped[0] == popped[1]
            for sid_ in popped[0]:
                one.served(sid_, now)
            bulk.served_all(popped[1], now)
        else:
            for scheduler in (one, bulk):
                scheduler.wake(sid, eager=op != "lazy")
    for sid in range(8):
        assert one._slots[sid] == bulk._slots[sid]
    assert one.served_count == bulk.served_count
    one.settle(now + 1)
    bulk.settle(now + 1)
    assert one.pop_many(8) == bulk.pop_many(8)
