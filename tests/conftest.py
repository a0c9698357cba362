"""Shared fixtures: one Spark session for the whole test session (starting one costs seconds),
and helpers that tests in several directories use."""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

from fanout.testing import jvmarchive

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
#: Every Spark JVM the tests start (the session below, each publisher) compiles with C1 only: a
#: publisher's start to its ready line took 36% less CPU (11.2-12.2 s against 17.4-18.7 s, four
#: starts alternated, a 2,000-agent publisher), and its CPU over the next 20 s was the same; the
#: session's JVM under tests/publisher/test_mirror.py and test_microbatch.py took 30-33 s of CPU
#: against 53 s. C2's faster code never pays back its compiling in a test's short life. The
#: ``java`` launcher reads this variable (Spark's settings do not see it); a user's own value is
#: kept.
#: ``make test`` also maps Spark's classes from an archive into them (``fanout.testing.jvmarchive``,
#: made next to the interpreter running the tests): a publisher's start 6.0-6.5 s against 9.8-12.0.
os.environ.setdefault(
    "JDK_JAVA_OPTIONS",
    f"-XX:TieredStopAtLevel=1 {jvmarchive.options(jvmarchive.SUITE_ARCHIVE)}"
    if jvmarchive.SUITE_ARCHIVE.is_file()
    else "-XX:TieredStopAtLevel=1",
)
#: Every Spark JVM the tests start has the JVM's own elastic heap: an embedded driver's heap is
#: fixed and touched whole at its start (``publisher/spark.py``'s ``JAVA_OPTIONS``: 4 GiB resident
#: at once, and a young generation as large as it likes), and the suite has several JVMs at a
#: time on a 24 GiB machine. These are the JVM's defaults, given after fanout's (the last wins);
#: ``tests/integration/test_spark_settings.py`` starts a publisher without them.
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS",
    "-XX:InitialRAMPercentage=1.5625 -XX:MaxHeapFreeRatio=70 -XX:-AlwaysPreTouch",
)


#: A suite started in the background (``nohup make test &``: a shell starts background jobs with
#: SIGINT ignored) would hand that on to every process it starts, which tests send Ctrl-C to (a
#: ``cat`` of a blocked ``?delta,wait`` read, the mount): Python's own handler again, so that
#: the processes the tests start get SIGINT's default action.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: The lane of the test modules that start a Spark publisher (those marked ``integration`` in their
#: source, less those also marked ``no_spark_publisher`` or ``second_lane``): one worker runs them
#: one after another.
PUBLISHER_LANE = "one Spark publisher at a time"
#: The second lane: modules marked ``second_lane`` too (light ones, whose waits allow for another
#: publisher beside theirs), handed out last, when the modules that start no publisher are done.
SECOND_LANE = "a second Spark publisher, at the end"


def lane(source: str) -> str | None:
    """``PUBLISHER_LANE`` for a test module whose ``source`` marks it ``integration`` and not
    ``no_spark_publisher``, ``SECOND_LANE`` if it is marked ``second_lane`` too; None for any
    other (it goes whole to whichever worker is free)."""
    if "pytest.mark.integration" not in source or "pytest.mark.no_spark_publisher" in source:
        return None
    return SECOND_LANE if "pytest.mark.second_lane" in source else PUBLISHER_LANE


def rank(scope: str, source: str) -> int:
    """Which work xdist hands out first (lowest): the publisher lane (the longest), then the other
    modules that start processes, then the rest (by their number of tests, as xdist orders), and
    the second lane last: it runs beside the end of the first lane, on the worker the rest freed."""
    if scope == PUBLISHER_LANE:
        return 0
    if scope == SECOND_LANE:
        return 3
    return 1 if "pytest.mark.integration" in source else 2


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``make test``: ``-n auto``) each test module goes whole to one worker
    (its module fixtures made once), and the modules that start a Spark publisher (``lane``) all
    to the same one, one after another: the long ones' waits assume one Spark publisher on the
    machine at a time (two at once on 2 cores, at random, made timeouts). The light ones, marked
    ``second_lane``, go last to the other worker, beside the first lane's end, which alone took
    twice as long as all the rest. A module that starts other processes (relays, brokers, a
    crowd) but no publisher is marked ``no_spark_publisher`` too and runs beside the lane. The
    longest work is handed out first (``rank``). (``xdist_group`` marks cannot say any of this:
    pytest 9 ignores the node ids xdist rewrites for them.)"""
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    @functools.cache
    def source(module: str) -> str:
        path = root / module
        return path.read_text(encoding="utf-8") if path.is_file() else ""

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]  # an untyped base class
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return lane(source(module)) or module

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first unit: the work queue is complete, order it once
                first = sorted(self.workqueue, key=lambda scope: rank(scope, source(scope)))
                for scope in first:  # a stable sort: xdist's order within each rank
                    self.workqueue.move_to_end(scope)
                self.ordered = True
            super()._assign_work_unit(node)

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
