"""Latency-aware admission (``publisher.admission``) against a brute-force oracle: a simulated
stream run under every fixed cap, the best of them as good as admission may hope to be."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.publisher.admission import WINDOW, TickAdmission

#: (now, start, available) -> the micro-batch's end tick.
Policy = Callable[[float, int, int], int]


def simulate(  # noqa: PLR0917 (a cost model's parameters)
    policy: Policy, fixed: float, per_tick: float, rate: float, backlog: int, seconds: float
) -> float:
    """Run a stream whose micro-batch of n ticks takes ``fixed + per_tick * n`` seconds, back to
    back, starting ``backlog`` ticks behind, for ``seconds``; the mean latency (micro-batch end
    minus the tick's time) of the ticks of the last third."""
    now, done, latencies = 0.0, 0, []

    def tick_time(tick: int) -> float:
        return (tick - backlog) / rate

    while now < seconds:
        available = int(now * rate) + backlog
        end = policy(now, done, available)
        if end <= done:
            now = max(now + POLL, tick_time(done + 1))
            continue
        assert done < end <= available
        now += fixed + per_tick * (end - done)
        if now > seconds / 1.5:
            latencies += [now - tick_time(t) for t in range(done + 1, end + 1)]
        done = end
    return sum(latencies) / max(1, len(latencies))


SECONDS = 240.0
POLL = 0.01
CEILING = 120


def fixed_cap(cap: int) -> Policy:
    return lambda now, start, available: min(available, start + cap)


costs = {
    "fixed": st.floats(0.05, 3.0),
    "rate": st.floats(2.0, 20.0),
    # rate * per_tick: the share of a second each second's ticks cost.
    "load": st.floats(0.0, 0.6),
}


@settings(max_examples=25, deadline=None)
@given(**costs)
def test_in_steady_state_admission_is_as_fast_as_the_best_fixed_cap(
    fixed: float, rate: float, load: float
) -> None:
    per_tick = load / rate
    adaptive = simulate(TickAdmission(rate, CEILING).admit, fixed, per_tick, rate, 0, SECONDS)
    best = min(
        simulate(fixed_cap(cap), fixed, per_tick, rate, 0, SECONDS) for cap in range(1, CEILING + 1)
    )
    assert adaptive <= best * 1.05 + 1 / rate


@settings(max_examples=25, deadline=None)
@given(**costs, backlog=st.integers(0, 3000))
def test_a_backlog_clears_and_no_micro_batch_outgrows_twice_the_steady_one(
    fixed: float, rate: float, load: float, backlog: int
) -> None:
    per_tick = load / rate
    admission = TickAdmission(rate, 10_000)
    durations: list[float] = []

    def recording(now: float, start: int, available: int) -> int:
        end = admission.admit(now, start, available)
        if end > start:
            durations.append(fixed + per_tick * (end - start))
        return end

    # Long enough to clear the backlog at the slowest the cap allows (a micro-batch twice the
    # steady one nets fixed / per_tick ticks), then to measure.
    steady = fixed / (1 - load)
    clearing = backlog / (fixed / per_tick) * 2 * steady if per_tick else 0.0
    seconds = 3 * (clearing + 60.0)
    caught_up = simulate(recording, fixed, per_tick, rate, backlog, seconds)
    settled = simulate(fixed_cap(10_000), fixed, per_tick, rate, 0, seconds)
    assert caught_up <= settled * 1.05 + 1 / rate
    # Once a window of micro-batches is measured (the first took the whole start-up backlog),
    # none lasts more than twice the steady one (plus one tick's cost).
    assert max(durations[WINDOW:], default=0.0) <= 2 * steady + per_tick + 1e-9


@given(
    durations=st.lists(st.tuples(st.integers(1, 1000), st.floats(0.0, 100.0)), max_size=10),
    rate=st.floats(0.1, 100.0),
    ceiling=st.integers(1, 10_000),
    start=st.integers(0, 10**6),
    ahead=st.integers(0, 10**5),
)
def test_a_micro_batch_takes_between_one_tick_and_its_cap(
    durations: list[float], rate: float, ceiling: int, start: int, ahead: int
) -> None:
    admission = TickAdmission(rate, ceiling)
    for ticks, seconds in durations:
        admission.observe(ticks, seconds)
    cap = admission.cap()
    assert 1 <= cap <= ceiling
    end = admission.admit(0.0, start, start + ahead)
    assert end == (start if ahead == 0 else min(start + ahead, start + cap))


def test_before_two_sizes_are_measured_the_cap_follows_the_median_duration() -> None:
    admission = TickAdmission(rate=10.0, ceiling=600)
    assert admission.cap() == 600  # nothing measured: catch up with start-up at once
    for seconds in (0.5, 0.5, 9.0):  # one slow micro-batch does not move the median
        admission.observe(4, seconds)
    assert admission.cost() is None
    assert admission.cap() == 10  # 2 x 10 ticks/s x 0.5 s


def test_the_cap_fits_twice_the_steady_duration_of_the_fitted_cost() -> None:
    admission = TickAdmission(rate=10.0, ceiling=600)
    for ticks in (5, 10, 20, 40):
        admission.observe(ticks, 1.0 + 0.05 * ticks)  # 1 s fixed, 50 ms per tick
    fixed, per_tick = admission.cost() or (0.0, 0.0)
    assert (round(fixed, 6), round(per_tick, 6)) == (1.0, 0.05)
    # steady: 1 / (1 - 0.5) = 2 s (20 ticks); twice that, 4 s, fits (4 - 1) / 0.05 ticks
    assert admission.cap() == 60
    admission.observe(50, 1.0)  # ticks cost nothing any more: take all there is
    admission.observe(60, 0.9)
    admission.observe(70, 0.8)
    admission.observe(80, 0.7)
    assert admission.cap() == 600


def test_admit_measures_a_micro_batch_from_one_call_to_the_next() -> None:
    admission = TickAdmission(rate=10.0, ceiling=600)
    assert admission.admit(100.0, 0, 30) == 30
    assert admission.admit(101.5, 30, 45) == 45  # 30 ticks in 1.5 s: cap 30
    assert admission.admit(103.0, 45, 200) == 200  # 15 ticks in 1.5 s: ticks cost nothing
    assert admission.admit(104.0, 200, 200) == 200  # nothing new: not a micro-batch
    fixed, per_tick = admission.cost() or (0.0, 1.0)
    assert (round(fixed, 6), per_tick) == (round(4 / 3, 6), 0.0)  # a slope < 0: the mean


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        TickAdmission(rate=0.0, ceiling=5)
    with pytest.raises(ValueError, match="ceiling >= 1"):
        TickAdmission(rate=1.0, ceiling=0)
