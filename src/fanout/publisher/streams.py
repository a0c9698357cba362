"""Opening a dataset's source as a stream.

``stream(spark, dataset, ...)`` opens a dataset's source as a streaming DataFrame of the declared
columns plus ``_version`` and ``_deleted`` (see ``publisher.datasets``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyspark.sql.functions as sf
from pyspark.sql import DataFrame, SparkSession

from fanout.publisher.datasets import (
    DELETED,
    VERSION,
    Dataset,
    FilesSource,
    PostgresSource,
    SimulationSource,
)
from fanout.publisher.sources.files import files_stream
from fanout.publisher.sources.postgres import postgres_stream
from fanout.publisher.sources.producerlog import LOG_FILE
from fanout.publisher.sources.producers import ingest_stream


def stream(spark: SparkSession, dataset: Dataset, start_time: float, state_dir: Path) -> DataFrame:
    """The dataset's rows as a stream with ``_version`` and ``_deleted``.

    Args:
        spark: the session.
        dataset: what to open.
        start_time: the stream's clock origin (the simulation's tick 0), fixed per stream.
        state_dir: the dataset's state directory (where an ingest dataset's log lives).
    """
    source = dataset.source
    if isinstance(source, SimulationSource):
        params = replace(source.params, start_time=start_time)
        rows = spark.readStream.format("fanout_simulation").options(**params.to_options()).load()
        return rows.withColumn(VERSION, sf.col("tick")).withColumn(DELETED, sf.lit(False))
    if isinstance(source, FilesSource):
        return files_stream(spark, dataset)
    if isinstance(source, PostgresSource):
        return postgres_stream(spark, dataset)
    return ingest_stream(spark, dataset, ingest_log_path(state_dir))


def ingest_log_path(state_dir: Path) -> Path:
    """Where an ingest dataset's log lives."""
    state_dir.mkdir(parents=True, exist_ok=True)
    return state_dir / LOG_FILE
