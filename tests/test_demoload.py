"""The demo's load (``fanout.demoload``): UPDATES_PER_CORE updates per second per core."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.demoload import UPDATES_PER_CORE, demo_period


@given(agents=st.integers(1, 10**5), rate=st.floats(0.1, 50.0), cores=st.integers(1, 64))
def test_the_period_offers_at_most_the_updates_per_core_with_the_shortest_period(
    agents: int, rate: float, cores: int
) -> None:
    period = demo_period(agents, rate, cores)
    budget = UPDATES_PER_CORE * cores
    # brute force: the shortest period whose offered load fits the budget
    shortest = 1
    while agents * rate / shortest > budget:
        shortest += 1
    assert period == shortest


def test_the_default_demo_on_two_cores_moves_each_agent_every_five_seconds() -> None:
    assert demo_period(10_000, 10.0, 2) == 50  # 2,000 updates per second
