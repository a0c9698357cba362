"""The authoritative latest state per key, kept by Spark's built-in stateful aggregation.

``groupBy(key).agg(max_by(struct(...), order))`` in update mode ran at 10-80x the speed of
Spark's Python stateful APIs (docs/benchmarks/state.md), so the pipeline keeps
state that way. Its state store can be read back as a batch DataFrame (``format("statestore")``),
which is how the publisher answers snapshot and read-state requests without keeping a second copy.
"""

from __future__ import annotations

import pyspark.sql.functions as sf
from pyspark.sql import DataFrame, SparkSession

from fanout.publisher.datasets import DELETED, VERSION, Dataset, StateStoreKind

_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
_PROVIDERS = "org.apache.spark.sql.execution.streaming.state."
#: Spark settings of each state store a dataset may choose (``Dataset.state_store``). Measured
#: by ``bench/latency.py`` at its load (docs/benchmarks/latency.md): RocksDB's one-tick
#: micro-batch is shorter, the HDFS-backed store's cost per changed row lower.
STATE_STORES: dict[StateStoreKind, dict[str, str]] = {
    "hdfs": {_PROVIDER: _PROVIDERS + "HDFSBackedStateStoreProvider", _CHANGELOG: "false"},
    "rocksdb": {_PROVIDER: _PROVIDERS + "RocksDBStateStoreProvider", _CHANGELOG: "true"},
}


def use_state_store(spark: SparkSession, kind: StateStoreKind) -> None:
    """Make streaming queries started next on ``spark`` keep their state in ``kind``.

    Spark fixes a query's store when it starts (in its checkpoint's offset log, so a restart
    from the checkpoint keeps the store it was created with whatever is set here).
    """
    for key, value in STATE_STORES[kind].items():
        spark.conf.set(key, value)


def latest_per_key(rows: DataFrame, dataset: Dataset) -> DataFrame:
    """Keep, per key, the row with the largest ``_version`` (streaming: emits changed keys).

    Tombstones (``_deleted``) are kept like any row, so a delete wins over older upserts and
    loses to newer ones; readers of the state skip them.
    """
    values = sf.struct(*dataset.value_columns, VERSION, DELETED)
    latest = sf.max_by(values, sf.col(VERSION)).alias("latest")
    return rows.groupBy(dataset.key).agg(latest).select(dataset.key, "latest.*")


def read_state(
    spark: SparkSession, checkpoint: str, dataset: Dataset, batch_id: int | None = None
) -> DataFrame:
    """The state after micro-batch ``batch_id`` (default: the last committed one), as rows.

    Raises:
        pyspark.errors.PySparkException: no batch has been committed yet.
    """
    reader = spark.read.format("statestore")
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    store = reader.load(checkpoint)
    # max_by keeps (value, ordering) per key; the value struct holds the dataset's columns.
    columns = [*dataset.value_columns, VERSION, DELETED]
    return store.select(
        sf.col(f"key.{dataset.key}").alias(dataset.key),
        *(sf.col(f"value.valueWithExtremumOrdering.{c}").alias(c) for c in columns),
    )


def live_rows(state: DataFrame) -> DataFrame:
    """The rows of a state that are not tombstones."""
    return state.where(~sf.col(DELETED))


def current_state(
    spark: SparkSession, checkpoint: str, dataset: Dataset, changes: DataFrame, batch_id: int
) -> DataFrame:
    """The state as of the end of micro-batch ``batch_id``, from inside that micro-batch.

    The state store only exposes committed batches, so this reads batch ``batch_id - 1`` and lays
    this batch's changed rows over it.
    """
    if batch_id == 0:
        return live_rows(changes)
    before = read_state(spark, checkpoint, dataset, batch_id - 1)
    kept = before.join(changes.select(dataset.key), on=dataset.key, how="left_anti")
    return live_rows(kept.unionByName(changes))
