"""Spark's stateful stream alone: the publisher's ``agents`` simulation through its
``latest_per_key`` into Spark's ``noop`` sink, run a number of micro-batches and timed by
Spark's own progress.

``bench/state.py`` takes the floor under the publisher pipeline with it; ``bench/latency.py``
and ``bench/microbatch.py`` load the state the same way before they measure. Imports PySpark:
only where the publisher's extra is installed.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from fanout.publisher import streams
from fanout.publisher.datasets import agents
from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.state import latest_per_key

#: Spark settings of the state in RocksDB with changelog checkpointing.
ROCKSDB = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
#: ... and in Spark's default HDFS-backed state store (the publisher's default).
HDFS = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false",
}


def rows(spark: SparkSession, params: SimulationParams, *, stateful: bool) -> DataFrame:
    """The simulation's rows, through ``latest_per_key`` when ``stateful``."""
    dataset = agents(params)
    stream = streams.stream(spark, dataset, params.start_time, Path(tempfile.gettempdir()))
    return latest_per_key(stream, dataset) if stateful else stream


def run(
    spark: SparkSession,
    params: SimulationParams,
    checkpoint: Path,
    *,
    stateful: bool,
    batches: int | None,
) -> list[dict[str, Any]]:
    """Run the stream from ``checkpoint``: ``batches`` micro-batches, or all available now.

    Returns:
        Spark's progress of each micro-batch run (``durationMs``, ``numInputRows``).
    """
    writer = (
        rows(spark, params, stateful=stateful)
        .writeStream.format("noop")
        .outputMode("update" if stateful else "append")
        .option("checkpointLocation", str(checkpoint))
    )
    if batches is None:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        return progress(query)
    query = writer.start()
    try:
        while len(query.recentProgress) < batches and query.isActive:
            time.sleep(0.2)
        if query.exception() is not None:
            raise RuntimeError(f"the stream failed: {query.exception()}")
    finally:
        query.stop()
    return progress(query)[:batches]


def progress(query: StreamingQuery) -> list[dict[str, Any]]:
    """Each micro-batch's durations and input rows, oldest first."""
    return [
        {"durationMs": dict(p.durationMs), "numInputRows": p.numInputRows}
        for p in query.recentProgress
        if p.numInputRows > 0
    ]
