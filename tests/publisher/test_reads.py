"""Point-in-time reads (``publisher.reads``): which micro-batch a tick names."""

from __future__ import annotations

import pytest

from fanout.errors import BadRequest
from fanout.publisher.reads import batch_at

HISTORY = [(10, 4), (12, 5), (12, 6), (15, 7)]


def test_a_tick_names_the_last_micro_batch_that_ended_there() -> None:
    assert batch_at(HISTORY, 10) == (10, 4)
    assert batch_at(HISTORY, 12) == (12, 6)  # an empty micro-batch ended at the same tick
    assert batch_at(HISTORY, -1) == (15, 7)


@pytest.mark.parametrize(
    ("tick", "reason"),
    [(9, "is older than the state kept"), (13, "is not where a micro-batch ended")],
)
def test_a_tick_no_micro_batch_ended_at_is_a_bad_request(tick: int, reason: str) -> None:
    with pytest.raises(BadRequest, match=f"tick {tick} {reason} \\(readable: 10..15\\)"):
        batch_at(HISTORY, tick)
