"""The simulation source: deterministic, inside the world, and its batches are what ticks say."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from fanout.errors import ConfigError
from fanout.publisher.sources.simulation import (
    SimulationParams,
    SimulationStreamReader,
    agent_ids_at,
    last_moves,
    positions,
    tick_rows,
)


def test_positions_are_a_function_of_seed_agent_and_tick() -> None:
    params = SimulationParams(agents=1000, seed=3)
    ids = np.arange(1000)
    first = positions(params, ids, 77)
    again = positions(params, ids, 77)
    other_seed = positions(SimulationParams(agents=1000, seed=4), ids, 77)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[0], other_seed[0])
    # any subset gives the same values as the whole: executors can split agents freely
    subset = positions(params, ids[123:456], 77)
    assert np.array_equal(subset[1], first[1][123:456])


@given(st.integers(0, 10**7), st.sampled_from([2, 3]), st.floats(1, 1e4))
def test_agents_stay_inside_the_world(tick: int, dims: int, world: float) -> None:
    params = SimulationParams(agents=200, dims=dims, world=world, speed=world / 10)
    for axis in positions(params, np.arange(200), tick):
        assert axis.min() >= 0
        assert axis.max() <= world


def test_agents_move_a_little_per_tick() -> None:
    params = SimulationParams(agents=500, speed=20.0, rate=10.0)
    before, after = positions(params, np.arange(500), 100), positions(params, np.arange(500), 101)
    step = np.hypot(after[0] - before[0], after[1] - before[1])
    assert step.max() < 3 * params.speed / params.rate  # bounded speed, wander included
    assert step.mean() > 0


@given(st.integers(1, 7), st.integers(0, 50), st.integers(0, 30), st.integers(1, 40))
def test_every_agent_moves_once_per_period(period: int, first: int, lo: int, width: int) -> None:
    params = SimulationParams(agents=lo + width, period=period)
    hi = lo + width
    moved = np.concatenate([agent_ids_at(params, t, lo, hi) for t in range(first, first + period)])
    assert sorted(moved.tolist()) == list(range(lo, hi))


@given(st.integers(1, 5), st.integers(0, 40), st.integers(1, 12))
def test_latest_emission_is_each_agents_last_move_in_the_range(
    period: int, first: int, span: int
) -> None:
    params = SimulationParams(agents=30, period=period)
    last = first + span
    ids, ticks = last_moves(params, first, last, 0, 30)
    expected: dict[int, int] = {}
    for tick in range(first + 1, last + 1):
        for agent in agent_ids_at(params, tick, 0, 30).tolist():
            expected[agent] = tick
    assert dict(zip(ids.tolist(), ticks.tolist(), strict=True)) == expected


@settings(max_examples=20)
@given(st.integers(0, 20), st.integers(1, 5))
def test_reader_partitions_cover_every_agent_once(first: int, partitions: int) -> None:
    params = SimulationParams(agents=101, partitions=partitions, emit="every")
    reader = SimulationStreamReader(params)
    parts = reader.partitions({"tick": first}, {"tick": first + 2})
    rows = [batch for part in parts for batch in reader.read(part)]
    ids = np.concatenate([batch.column("id").to_numpy() for batch in rows])
    assert len(ids) == 2 * 101
    assert sorted(set(ids.tolist())) == list(range(101))


def test_tick_rows_carry_the_tick_and_its_time() -> None:
    params = SimulationParams(agents=10, start_time=1000.0, rate=4.0)
    batch = tick_rows(params, 8, 0, 10)
    assert batch.schema.names == ["id", "x", "y", "kind", "tick", "ts"]
    assert set(batch.column("tick").to_pylist()) == {8}
    assert set(batch.column("ts").to_pylist()) == {1002.0}


def test_latest_offset_never_goes_back_and_respects_the_limits() -> None:
    params = SimulationParams(
        agents=100, period=2, start_time=0.0, max_ticks_per_batch=5, max_ticks=12, admission="fixed"
    )
    reader = SimulationStreamReader(params)
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(250)  # 5 ticks of 50 moving agents
    assert reader.latestOffset({"tick": 3}, limit) == {"tick": 8}
    assert reader.latestOffset({"tick": 10}, limit) == {"tick": 12}
    assert reader.latestOffset({"tick": 0}, ReadAllAvailable()) == {"tick": 12}
    assert reader.latestOffset({"tick": 0}, ReadMaxRows(1)) == {"tick": 1}  # at least one tick
    future = SimulationStreamReader(SimulationParams(start_time=1e12))
    assert future.latestOffset({"tick": 42}, ReadAllAvailable()) == {"tick": 42}


def test_latency_admission_takes_what_arrived_during_recent_micro_batches(monkeypatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    params = SimulationParams(agents=100, rate=10.0, start_time=0.0, max_ticks_per_batch=600)
    reader = SimulationStreamReader(params)
    limit = reader.getDefaultReadLimit()
    # Nothing measured yet: up to the ceiling (catching up with Spark's start-up at once).
    assert reader.latestOffset({"tick": 0}, limit) == {"tick": 600}
    clock[0] += 0.5  # that micro-batch took 0.5 s: 5 ticks arrived meanwhile, 10 allowed
    assert reader.latestOffset({"tick": 600}, limit) == {"tick": 610}
    clock[0] += 0.5
    assert reader.latestOffset({"tick": 610}, ReadAllAvailable())["tick"] > 620  # availableNow


def test_options_round_trip_and_bad_options_are_named() -> None:
    params = SimulationParams(agents=7, dims=3, rate=2.5, emit="every", start_time=12.25)
    assert SimulationParams.from_options(params.to_options()) == params
    with pytest.raises(ConfigError, match="unknown simulation option"):
        SimulationParams.from_options({"agnets": "3"})
    with pytest.raises(ConfigError, match="agents='many' is not a number"):
        SimulationParams.from_options({"agents": "many"})
    with pytest.raises(ConfigError, match="dims=4"):
        SimulationParams(dims=4)
