"""The read throttle keeps a connection within rate * T + burst frames, and no tighter; the
SQL time budgets keep a connection's SQL within share * T + burst seconds, and no tighter."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fanout.buckets import Throttle
from fanout.relay.core.throttle import Budgets


@example(rate=10.0, burst=1, gaps=[0.0, 1.0, 0.0, 0.0])  # idle time must not pile up tokens
@given(
    rate=st.floats(1.0, 5_000.0),
    burst=st.integers(1, 50),
    gaps=st.lists(st.one_of(st.just(0.0), st.floats(0.0, 0.01), st.floats(0.0, 1.0)), max_size=300),
)
def test_frames_read_as_told_stay_within_rate_and_burst(
    rate: float, burst: int, gaps: list[float]
) -> None:
    """Oracle: the read times themselves. A sender with frames ready after ``gaps``; the
    reader reads each one when it is there and it is not told to wait."""
    throttle = Throttle(rate, burst)
    now, reads = 0.0, []
    for gap in gaps:
        now += gap  # the next frame arrives (or was already waiting)
        reads.append(now)
        now += throttle.take(now)
    for i, start in enumerate(reads):
        for j in range(i, len(reads)):
            window = reads[j] - start
            assert j - i + 1 <= rate * window + burst + 1 + 1e-6


@given(rate=st.floats(1.0, 5_000.0), burst=st.integers(1, 500), frames=st.integers(1, 2_000))
def test_a_flood_is_read_at_the_rate_after_the_burst(rate: float, burst: int, frames: int) -> None:
    throttle = Throttle(rate, burst)
    now = 0.0
    for _ in range(frames):
        now += throttle.take(now)
    expected = max(0.0, (frames - burst) / rate)
    assert now == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_a_connection_within_its_rate_never_waits() -> None:
    throttle = Throttle(rate=10.0, burst=2)
    assert all(throttle.take(t * 0.1) == 0.0 for t in range(100))


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 5), (-1.0, 5), (float("inf"), 5), (5.0, 0)])
def test_a_throttle_that_could_not_work_is_refused(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="rate > 0 and burst > 0"):
        Throttle(rate, burst)


@example(share=0.25, burst=0.1, work=[(1.0, 0.0), (0.0, 5.0), (0.5, 0.0), (0.5, 0.0)])
@given(
    share=st.floats(0.01, 1.0),
    burst=st.floats(0.001, 2.0),
    work=st.lists(
        st.tuples(st.floats(0.0, 0.6), st.one_of(st.just(0.0), st.floats(0.0, 3.0))), max_size=100
    ),
)
def test_sql_run_as_told_stays_within_the_share(
    share: float, burst: float, work: list[tuple[float, float]]
) -> None:
    """Oracle: the pushes' own times. A connection whose SQL pushes take ``seconds`` each and
    are wanted again ``gap`` later; each runs when wanted unless ``until`` puts it off."""
    budgets = Budgets(share, burst)
    now, runs = 0.0, []
    for seconds, gap in work:
        until = budgets.until(7, now)
        if until is not None:
            assert until > now
            now = until
        runs.append((now, seconds))
        budgets.spend(7, seconds, now)
        now += seconds + gap
    for i, (start, _) in enumerate(runs):
        spent = 0.0
        for j in range(i, len(runs)):
            begun, seconds = runs[j]
            spent += seconds
            # One push may overdraw the bucket (its time is known only after it ran).
            assert spent <= share * (begun + seconds - start) + burst + seconds + 1e-9


@given(share=st.floats(0.05, 1.0), seconds=st.floats(0.001, 0.5), pushes=st.integers(1, 200))
def test_expensive_sql_runs_at_the_share_after_the_burst(
    share: float, seconds: float, pushes: int
) -> None:
    budgets = Budgets(share, burst=1.0)
    now = 0.0
    for _ in range(pushes):
        now = budgets.until(7, now) or now
        budgets.spend(7, seconds, now)
        now += seconds
    total = pushes * seconds
    assert now >= (total - 1.0 - seconds) / share - 1e-9  # held to the share after the burst
    assert now <= max(total, (total - 1.0) / share + seconds) + 1e-9  # and put off no longer


def test_sql_budgets_are_per_connection_and_forgotten_with_it() -> None:
    budgets = Budgets(share=0.5, burst=0.1)
    budgets.spend(1, 0.3, now=0.0)  # 0.2 overdrawn at 0.3: paid back at 0.7
    assert budgets.until(1, 0.5) == pytest.approx(0.7)
    assert budgets.until(2, 0.5) is None  # another connection is not put off
    assert budgets.until(1, 0.7) is None
    assert budgets.put_off == 1
    budgets.spend(1, 0.3, now=0.7)
    budgets.forget(1)
    assert budgets.until(1, 0.8) is None


@pytest.mark.parametrize(("share", "burst"), [(0.0, 1.0), (1.5, 1.0), (0.5, 0.0)])
def test_a_sql_budget_that_could_not_work_is_refused(share: float, burst: float) -> None:
    with pytest.raises(ValueError, match="0 < share <= 1 and burst > 0"):
        Budgets(share, burst)
