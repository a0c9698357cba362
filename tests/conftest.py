"""Shared fixtures: one Spark session for the whole test session (starting one costs seconds),
and helpers that tests in several directories use."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

# No per-example deadlines: the machines are shared and noisy, and speed is the benchmarks' job.
settings.register_profile("fanout", deadline=None)
# CI (``.ci/run``) draws the same examples every run, so that a rare input cannot turn one
# submission's run red and not the next; runs elsewhere draw new ones (``--hypothesis-seed=N``
# repeats one), which is how the property tests keep finding bugs.
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("FANOUT_HYPOTHESIS_PROFILE", "fanout"))

#: A test that needs a program this machine lacks (nats-server, redis-server, Chromium, ...) skips
#: naming its Debian package, or fails on CI (FANOUT_CI, set by .ci/run): fanout.testing.needs.
pytest_plugins = ["fanout.testing.needs"]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``make test``: ``-n auto``) each test module goes whole to one worker,
    and the modules that start real processes (marked ``integration`` in their source) all to
    the same one, one after another, as they were written to: their waits assume one Spark
    publisher on the machine at a time. (``xdist_group`` marks cannot say it: pytest 9 ignores
    the node ids xdist rewrites for them.)"""
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    @functools.cache
    def starts_processes(module: str) -> bool:
        path = root / module
        return path.is_file() and "pytest.mark.integration" in path.read_text(encoding="utf-8")

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]  # an untyped base class
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "processes" if starts_processes(module) else module

    return Scheduling(config, log)


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


def _scaled(view: Any, factor: float) -> Any:
    """A region with every length times ``factor`` (exact for a power of two)."""
    from fanout.views.region import Box, RegionUnion, Sector, Sphere

    if isinstance(view, RegionUnion):
        return RegionUnion([_scaled(member, factor) for member in view.members])
    if isinstance(view, Box):
        return Box([v * factor for v in view.lo], [v * factor for v in view.hi])
    center = [v * factor for v in view.center]
    if isinstance(view, Sphere):
        return Sphere(center, view.radius * factor)
    assert isinstance(view, Sector), view
    return Sector(center, view.radius * factor, view.heading, view.half_angle)


@pytest.fixture(scope="session")
def scaled() -> Callable[[Any, float], Any]:
    """``scaled(region, factor)``: the region with every length times ``factor``."""
    return _scaled
