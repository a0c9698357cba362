"""Opening a dataset's source as a stream.

``stream(spark, dataset, ...)`` opens a dataset's source as a streaming DataFrame of the declared
columns plus ``_version`` and ``_deleted`` (see ``publisher.datasets``).
"""

from __future__ import annotations

from dataclasses import replace

import pyspark.sql.functions as sf
from pyspark.sql import DataFrame, SparkSession

from fanout.publisher.datasets import DELETED, VERSION, Dataset, SimulationSource


def stream(spark: SparkSession, dataset: Dataset, start_time: float) -> DataFrame:
    """The dataset's rows as a stream with ``_version`` and ``_deleted``.

    Args:
        spark: the session.
        dataset: what to open.
        start_time: the stream's clock origin (the simulation's tick 0), fixed per stream.

    Raises:
        ValueError: the dataset's source kind is not served by this publisher.
    """
    source = dataset.source
    if isinstance(source, SimulationSource):
        params = replace(source.params, start_time=start_time)
        rows = spark.readStream.format("fanout_simulation").options(**params.to_options()).load()
        return rows.withColumn(VERSION, sf.col("tick")).withColumn(DELETED, sf.lit(False))
    raise ValueError(f"dataset {dataset.name!r}: source {type(source).__name__} is not served yet")
