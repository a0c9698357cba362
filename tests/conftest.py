"""Shared fixtures: one Spark session for the whole test session (SPARK-NOTES.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

# No per-example deadlines: the machines are shared and noisy, and speed is the benchmarks' job.
settings.register_profile("fanout", deadline=None)
settings.load_profile("fanout")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the UI off and few shuffle partitions."""
    from pyspark.sql import SparkSession

    from fanout.publisher.sources.simulation import SimulationDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("fanout-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(SimulationDataSource)
    yield session
    session.stop()
