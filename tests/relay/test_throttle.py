"""The read throttle keeps a connection within rate * T + burst frames, and no tighter."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fanout.relay.throttle import Throttle


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
    with pytest.raises(ValueError, match="rate > 0 and burst >= 1"):
        Throttle(rate, burst)
