"""The session's one progress listener (``publisher.listener``) on real streaming queries: each
handler hears the queries it asked for, what it hears is Spark's own account of the micro-batch
(``StreamingQuery.recentProgress``, read by PySpark apart from the listener), a handler that
fails leaves the others hearing, the publisher's ``ProgressLog`` sums what it heard, and an
event Spark wrote without a source's rate is heard (one PySpark cannot read is logged)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyspark.sql.functions as sf
import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress

from fanout.publisher.listener import listener, stop_listening
from fanout.publisher.progress import ProgressLog
from fanout.testing.wait import eventually_sync


@pytest.fixture
def session(spark: Any) -> Iterator[Any]:
    """A session of its own (its own stream manager and listener), its listener stopped after."""
    own = spark.newSession()
    yield own
    for query in own.streams.active:
        query.stop()
    stop_listening(own)


def _start(spark: Any, name: str) -> Any:
    rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 50).load()
    counted = rows.observe(f"seen:{name}", sf.count(rows.value).alias("n"))
    return (
        counted.writeStream.queryName(name)
        .trigger(processingTime="0.1 seconds")
        .format("noop")
        .start()
    )


def _until(heard: Callable[[], list[StreamingQueryProgress]], count: int) -> None:
    """Wait until what ``heard`` says holds ``count`` micro-batches with rows (read anew)."""
    deadline = time.monotonic() + 120
    while sum(1 for p in heard() if p.numInputRows) < count:
        assert time.monotonic() < deadline, f"{len(heard())} events heard"
        time.sleep(0.1)


def test_each_handler_hears_what_it_asked_as_spark_told_it(
    session: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ones: list[StreamingQueryProgress] = []
    every: list[StreamingQueryProgress] = []
    failures: list[str] = []

    def failing(progress: StreamingQueryProgress) -> None:
        failures.append(progress.name)
        raise RuntimeError("a handler's own failure")

    heard = listener(session)
    heard.add("one", "ones", ones.append)
    heard.add(None, "failing", failing)
    heard.add(None, "every", every.append)
    progress = ProgressLog("one", "one")
    heard.add("one", "progress", progress.heard)
    one, two = _start(session, "one"), _start(session, "two")
    _until(lambda: ones, 3)
    _until(lambda: [p for p in every if p.name == "two"], 3)
    heard.discard(None, "every")
    one.stop()
    two.stop()

    assert {p.name for p in ones} == {"one"}  # a query's handler hears that query only
    assert {p.name for p in every} == {"one", "two"}
    assert failures  # the failing handler was called, and every handler after it still heard
    # Spark's own account, read by PySpark from the query itself (not through the listener).
    told = {p["batchId"]: p for p in one.recentProgress}
    for event in ones:
        if event.batchId in told:
            spark_said = told[event.batchId]
            assert event.numInputRows == spark_said["numInputRows"]
            assert event.durationMs == spark_said["durationMs"]
            assert event.observedMetrics["seen:one"]["n"] == event.numInputRows
    assert any(event.batchId in told for event in ones)
    # ProgressLog sums Spark's phases over what it heard (the same events as ``ones``, once
    # the listener has drained what the stopped queries had queued).
    eventually_sync(
        lambda: (
            progress.phase_seconds["triggerExecution"],
            sum(event.durationMs.get("triggerExecution", 0) for event in ones) / 1e3,
        ),
        lambda sums: sums[0] == pytest.approx(sums[1]),
    )
    assert progress.fastest_ms is not None and progress.fastest_ms > 0
    _rates_left_out_and_bad_json(heard, json.loads(ones[-1].json), caplog)


class _Event:
    """What the JVM hands the listener: an event whose progress says ``text`` as its JSON."""

    def __init__(self, text: str) -> None:
        self.text = text

    def progress(self) -> Any:
        return self

    def json(self) -> str:
        return self.text


def _rates_left_out_and_bad_json(heard: Any, spark_said: dict[str, Any], caplog: Any) -> None:
    """Spark leaves a NaN or infinite rate out of a source's JSON: heard, that rate NaN. JSON
    PySpark cannot read: logged, not raised; the next event heard."""
    got: list[StreamingQueryProgress] = []
    heard.add(None, "late", got.append)
    for source in spark_said["sources"]:
        del source["inputRowsPerSecond"], source["processedRowsPerSecond"]
    heard.onQueryProgress(_Event(json.dumps(spark_said)))
    assert len(got) == 1 and got[0].batchId == spark_said["batchId"]
    assert math.isnan(got[0].sources[0].inputRowsPerSecond)
    assert got[0].sources[0].numInputRows == spark_said["sources"][0]["numInputRows"]
    heard.onQueryProgress(_Event('{"id": "not a progress"}'))
    assert "could not be read" in caplog.text and len(got) == 1
    heard.onQueryProgress(_Event(json.dumps(spark_said)))
    assert len(got) == 2
