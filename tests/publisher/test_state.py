"""The authoritative state kept by Spark: latest per key, read back from the state store."""

from __future__ import annotations

import time

import pytest

from fanout.publisher.datasets import agents
from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.state import current_state, latest_per_key, read_state

pytestmark = pytest.mark.spark

DATASET = agents(SimulationParams(agents=50))


def rows(spark, data: list[tuple[int, float, float, int]]):
    schema = "id long, x double, y double, kind int, tick long, ts double"
    return spark.createDataFrame([(i, x, y, 0, t, float(t)) for i, x, y, t in data], schema)


def test_latest_per_key_keeps_the_newest_row_of_each_key(spark) -> None:
    data = [(1, 0.0, 0.0, 1), (1, 5.0, 5.0, 3), (1, 9.0, 9.0, 2), (2, 1.0, 1.0, 1)]
    latest = latest_per_key(rows(spark, data), DATASET).orderBy("id").collect()
    assert [(r.id, r.x, r.tick) for r in latest] == [(1, 5.0, 3), (2, 1.0, 1)]


def test_state_is_read_back_after_each_committed_batch(spark, tmp_path) -> None:
    """A real streaming query with the simulation source, state read at two batch ids."""
    params = SimulationParams(
        agents=50, start_time=time.time() - 100, max_ticks=3, max_ticks_per_batch=1
    )
    dataset = agents(params)
    checkpoint = str(tmp_path / "checkpoint")
    seen: dict[int, dict[int, int]] = {}

    def record(batch, batch_id: int) -> None:
        state = current_state(spark, checkpoint, dataset, batch, batch_id).toArrow()
        seen[batch_id] = dict(
            zip(state.column("id").to_pylist(), state.column("tick").to_pylist(), strict=True)
        )

    source = spark.readStream.format("fanout_simulation").options(**params.to_options()).load()
    query = (
        latest_per_key(source, dataset)
        .writeStream.outputMode("update")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(record)
        .start()
    )
    try:
        query.processAllAvailable()  # one tick per batch (the read limit) up to max_ticks
    finally:
        query.stop()
    assert sorted(seen) == [0, 1, 2]
    # inside each batch, current_state is the whole state as of that batch's tick
    for batch_id, ticks in seen.items():
        assert len(ticks) == 50
        assert set(ticks.values()) == {batch_id + 1}
    committed = read_state(spark, checkpoint, dataset, 1).toArrow()
    assert set(committed.column("tick").to_pylist()) == {2}
    assert committed.column_names == list(DATASET.columns)
