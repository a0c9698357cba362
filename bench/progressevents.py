"""What a Spark streaming progress event costs the publisher's driver: as PySpark hands it to a
Python listener, and as ``fanout.publisher.listener`` reads it.

Run ``.venv/bin/python bench/progressevents.py`` (``--quick``: one short run, nothing written);
it writes ``bench/results/progressevents.json`` and prints one JSON object as its last line.

Part one, in this process: a streaming query shaped like the publisher's (a source whose rows
are counted in an observed metric with samples, as ``sources.refusals`` counts refused rows,
then state kept per key) runs ``--seconds`` at 10 micro-batches a second, ``--runs`` times; one
py4j listener reads each progress event both ways, one after the other: PySpark's
``QueryProgressEvent.fromJObject`` (each field a call into the JVM, each observed row pickled
there) and Spark's own JSON parsed by ``StreamingQueryProgress.fromJson`` (one call). Reported:
each way's median milliseconds an event per run, their median and spread, and the ratio.

Part two (``--publisher``): one ``fanout publisher`` of ``--agents`` agents, its ``/metrics``
scraped once (which adds the refused-rows count to what hears the events), its process tree's
cores and micro-batches over ``--window`` seconds: the figure ``bench/checkouts.py`` compares
across checkouts (``--measure publisher.cores``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import pyspark.sql.functions as sf
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import QueryProgressEvent, StreamingQueryProgress

from fanout.launch import Children
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.cpu import process_tree
from fanout.testing.machine import describe, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "progressevents.json"
BATCHES = "fanout_publisher_micro_batches_total"


class BothWays:
    """A py4j listener timing each progress event read both ways (milliseconds)."""

    def __init__(self) -> None:
        self.fields: list[float] = []
        self.json: list[float] = []

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 (the JVM interface's names)
        """Nothing to read."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        """Read the event as PySpark does, then as ``publisher.listener`` does."""
        began = time.perf_counter()
        QueryProgressEvent.fromJObject(jevent)
        middle = time.perf_counter()
        StreamingQueryProgress.fromJson(json.loads(jevent.progress().json()))
        self.fields.append((middle - began) * 1e3)
        self.json.append((time.perf_counter() - middle) * 1e3)

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        """Nothing to read."""

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        """Nothing to read."""

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"
        ]


def one_run(spark: SparkSession, seconds: float) -> dict[str, float]:
    """One query of ``seconds``; each way's median milliseconds an event."""
    both = BothWays()
    jvm = spark.sparkContext._jvm
    assert jvm is not None and spark.sparkContext._gateway is not None
    ensure_callback_server_started(spark.sparkContext._gateway)  # type: ignore[no-untyped-call]
    wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(both)
    spark._jsparkSession.streams().addListener(wrapper)
    rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1000).load()
    observed = rows.observe(
        "fanout_files:bench",
        sf.count_if(rows.value % 97 == 0).alias("rejected"),
        sf.min_by(rows.value.cast("string"), rows.value).alias("sample"),
        sf.slice(sf.collect_list(rows.value.cast("string")), 1, 10).alias("samples"),
    )
    state = observed.groupBy((observed.value % 100).alias("key")).agg(sf.max("timestamp"))
    query = (
        state.writeStream.outputMode("update")
        .trigger(processingTime="0.1 seconds")
        .format("noop")
        .start()
    )
    time.sleep(seconds)
    query.stop()
    time.sleep(1.0)  # the listener bus drains what the query queued
    spark._jsparkSession.streams().removeListener(wrapper)
    events = len(both.fields)
    return {
        "events": events,
        "fields_ms": round(statistics.median(both.fields), 2),
        "json_ms": round(statistics.median(both.json), 2),
    }


async def publisher_cores(agents: int, window: float) -> dict[str, float]:
    """One publisher's process tree's cores and micro-batches a second over ``window``."""
    with tempfile.TemporaryDirectory(prefix="fanout-bench-progress-") as directory:
        where = Path(directory)
        args = ["--port", "0", "--state-dir", str(where / "state"), "--agents", str(agents)]
        async with Children() as children:
            child = await children.start("publisher", args, where / "publisher.log")
            first = await asyncio.to_thread(scrape, child.url)  # registers the refusals' count
            await asyncio.sleep(10)  # past the first micro-batches' planning
            before, began = (
                process_tree(child.process.pid),
                await asyncio.to_thread(scrape, child.url),
            )
            await asyncio.sleep(window)
            after, ended = (
                process_tree(child.process.pid),
                await asyncio.to_thread(scrape, child.url),
            )
            await child.stop()
    batches = [name for name in first if name.startswith(BATCHES)]
    done = sum(ended[name] - began[name] for name in batches)
    return {"cores": round(after.cores_since(before), 3), "micro_batches_per_s": done / window}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="each run's query")
    parser.add_argument("--publisher", action="store_true", help="part two: a publisher's cores")
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="one 5 s run, nothing written")
    args = parser.parse_args()
    started, calibration = describe(), calibrate()
    result: dict[str, Any] = {"machine": started, "calibration": calibration}
    if args.publisher:
        result["publisher"] = asyncio.run(publisher_cores(args.agents, args.window))
    else:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("fanout-bench-progressevents")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            runs = [
                one_run(spark, 5.0 if args.quick else args.seconds)
                for _ in range(1 if args.quick else args.runs)
            ]
        finally:
            spark.stop()
        fields = statistics.median(run["fields_ms"] for run in runs)
        parsed = statistics.median(run["json_ms"] for run in runs)
        result |= {
            "runs": runs,
            "fields_ms_per_event": fields,
            "fields_spread": round(
                (max(r["fields_ms"] for r in runs) - min(r["fields_ms"] for r in runs)) / fields, 3
            ),
            "json_ms_per_event": parsed,
            "json_spread": round(
                (max(r["json_ms"] for r in runs) - min(r["json_ms"] for r in runs)) / parsed, 3
            ),
            "fields_over_json": round(fields / parsed, 1),
        }
    write_results(result, None if args.quick or args.publisher else RESULTS)


if __name__ == "__main__":
    main()
