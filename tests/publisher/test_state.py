"""The authoritative state kept by Spark: latest per key, tombstones, read back from the store."""

from __future__ import annotations

import time

import pytest

from fanout.publisher import streams
from fanout.publisher.datasets import agents
from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.state import (
    STATE_STORES,
    current_state,
    latest_per_key,
    live_rows,
    read_state,
    use_state_store,
)

pytestmark = pytest.mark.spark

DATASET = agents(SimulationParams(agents=50))


def rows(spark, data: list[tuple[int, float, int, bool]]):
    """Rows (id, x, version, deleted) of the agents schema."""
    schema = (
        "id long, x double, y double, kind int, tick long, ts double,"
        " _version long, _deleted boolean"
    )
    return spark.createDataFrame(
        [(i, x, 0.0, 0, v, float(v), v, deleted) for i, x, v, deleted in data], schema
    )


def test_latest_per_key_keeps_the_newest_row_of_each_key(spark) -> None:
    data = [(1, 0.0, 1, False), (1, 5.0, 3, False), (1, 9.0, 2, False), (2, 1.0, 1, False)]
    latest = latest_per_key(rows(spark, data), DATASET).orderBy("id").collect()
    assert [(r.id, r.x, r._version) for r in latest] == [(1, 5.0, 3), (2, 1.0, 1)]


def test_a_delete_wins_over_older_rows_and_loses_to_newer_ones(spark) -> None:
    data = [
        (1, 1.0, 1, False),
        (1, 0.0, 2, True),
        (2, 2.0, 1, False),
        (2, 0.0, 2, True),
        (2, 7.0, 3, False),
    ]
    latest = live_rows(latest_per_key(rows(spark, data), DATASET)).collect()
    assert [(r.id, r.x) for r in latest] == [(2, 7.0)]


@pytest.mark.parametrize("store", ["hdfs", "rocksdb"])
def test_state_is_read_back_after_each_committed_batch(spark, tmp_path, store) -> None:
    """A real streaming query with the simulation source, state read at two batch ids, in
    either state store a dataset may choose."""
    params = SimulationParams(agents=50, max_ticks=3, max_ticks_per_batch=1)
    dataset = agents(params)
    checkpoint = str(tmp_path / "checkpoint")
    seen: dict[int, dict[int, int]] = {}

    def record(batch, batch_id: int) -> None:
        state = current_state(spark, checkpoint, dataset, batch, batch_id).toArrow()
        seen[batch_id] = dict(
            zip(state.column("id").to_pylist(), state.column("tick").to_pylist(), strict=True)
        )

    source = streams.stream(spark, dataset, start_time=time.time() - 100, state_dir=tmp_path)
    use_state_store(spark, store)
    try:
        query = (
            latest_per_key(source, dataset)
            .writeStream.outputMode("update")
            .option("checkpointLocation", checkpoint)
            .foreachBatch(record)
            .start()
        )
    finally:
        use_state_store(spark, "hdfs")  # the session is shared: Spark's default again
    try:
        query.processAllAvailable()  # one tick per batch (the read limit) up to max_ticks
    finally:
        query.stop()
    provider = STATE_STORES[store]["spark.sql.streaming.stateStore.providerClass"]
    assert provider in (tmp_path / "checkpoint" / "offsets" / "0").read_text()
    assert sorted(seen) == [0, 1, 2]
    # inside each batch, current_state is the whole state as of that batch's tick
    for batch_id, ticks in seen.items():
        assert len(ticks) == 50
        assert set(ticks.values()) == {batch_id + 1}
    committed = read_state(spark, checkpoint, dataset, 1).toArrow()
    assert set(committed.column("tick").to_pylist()) == {2}
    assert committed.column_names == [*DATASET.columns, "_version", "_deleted"]
