"""What a JVM source would save (issue 30): the simulation source's share of a micro-batch.

Run ``.venv/bin/python bench/source.py`` (``--rounds``, ``--batches``); it prints one JSON object
and writes ``bench/results/source.json``.

The one-tick micro-batch of the pipeline's source alone into Spark's ``noop`` sink is part of
the floor ``bench/latency.py`` measures (``source``, about a third of it). The ``agents``
simulation is a Python data source (``publisher.sources.simulation``): Spark starts a Python
worker per partition, which computes the rows in numpy and hands them over as Arrow. Positions
are a closed-form function of (seed, agent, tick), so the same work could be a Spark SQL
expression over a JVM source. Before building that, this measures what it would save, on
``local[2]`` with the publisher's embedded settings, one session, cases interleaved round by
round so that the machine's load falls on all of them alike:

* ``python``: the simulation source as the publisher runs it, one tick per micro-batch
  (``ROWS`` rows: the agents that move at one tick), no state;
* ``jvm``: Spark's ``rate-micro-batch`` source (a JVM source, ``ROWS`` rows per micro-batch)
  with the same columns computed by Spark SQL expressions of the same shape — per-agent
  constants from a 64-bit hash of (id, salt) (``xxhash64``, where the Python source uses
  splitmix64), a straight line with a sinusoidal wander folded into the world — so the JVM
  does the work the Python worker does;
* ``empty``: ``rate-micro-batch`` with one row and no expression: what any micro-batch costs
  Spark (planning, offsets and commit log, one task per partition).

Reported per case and size: the median and fastest ``triggerExecution`` over every measured
micro-batch of every round; ``saving_ms`` = python - jvm (what the JVM source would cut from a
one-tick micro-batch), ``python_over_empty_ms`` = python - empty (the source's whole own cost).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from fanout.publisher import streams
from fanout.publisher.datasets import agents
from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.spark import spark_session
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results

RESULTS = Path(__file__).parent / "results" / "source.json"

MASTER = "local[2]"
AGENTS = 100_000
#: Rows of one tick at 10,000 and at 100,000 offered updates/s (bench/latency.py's loads).
SIZES = (1_000, 10_000)
#: Micro-batches run and not counted after each start: Spark's first ones are slower.
SKIP = 2
CASES = ("python", "jvm", "empty")


def python_rows(spark: SparkSession, rows: int) -> DataFrame:
    """The simulation source, one tick (``rows`` moving agents) per micro-batch."""
    params = SimulationParams(
        agents=AGENTS,
        period=AGENTS // rows,
        rate=10.0,
        partitions=2,
        max_ticks_per_batch=1,
        admission="fixed",
        # The clock far ahead: every micro-batch has its one tick waiting.
        start_time=time.time() - 10_000_000,
    )
    dataset = agents(params)
    return streams.stream(spark, dataset, params.start_time, Path(tempfile.gettempdir()))


def jvm_rows(spark: SparkSession, rows: int) -> DataFrame:
    """The same columns from ``rate-micro-batch`` and Spark SQL expressions."""
    period = AGENTS // rows
    source = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", 2)
        .load()
    )
    unit = "(shiftrightunsigned(xxhash64(id, {salt}), 11) / 9007199254740992.0)"
    columns = [
        f"value div {rows} AS tick",
        f"(value % {rows}) * {period} + (value div {rows}) % {period} AS id",
    ]
    axes = []
    for axis, name in enumerate(("x", "y")):
        start = unit.format(salt=10 * axis + 1) + " * 1000.0"
        velocity = f"({unit.format(salt=10 * axis + 2)} * 2.0 - 1.0) * 20.0 * sqrt(2.0) / 2.0"
        amplitude = unit.format(salt=10 * axis + 3) + " * 20.0"
        omega = f"(0.2 + {unit.format(salt=10 * axis + 4)})"
        phase = unit.format(salt=10 * axis + 5) + " * 2.0 * pi()"
        seconds = "(tick / 10.0)"
        raw = f"{start} + {velocity} * {seconds} + {amplitude} * sin({omega} * {seconds} + {phase})"
        axes.append(f"1000.0 - abs(pmod({raw}, 2000.0) - 1000.0) AS {name}")
    frame = source.selectExpr(*columns)
    return frame.selectExpr(
        "id",
        *axes,
        f"CAST(floor({unit.format(salt=7)} * 4) AS INT) AS kind",
        "tick",
        "CAST(tick AS DOUBLE) / 10.0 AS ts",
    )


def empty_rows(spark: SparkSession) -> DataFrame:
    """One row per micro-batch, nothing computed."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 1)
        .option("numPartitions", 2)
        .load()
    )


def run(frame: DataFrame, checkpoint: Path, batches: int) -> list[dict[str, Any]]:
    """``batches`` micro-batches of ``frame`` into ``noop``; each one's progress."""
    query = (
        frame.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        while len(query.recentProgress) < batches and query.isActive:
            time.sleep(0.1)
        if query.exception() is not None:
            raise RuntimeError(f"the stream failed: {query.exception()}")
    finally:
        query.stop()
    return [
        {"trigger_ms": p.durationMs["triggerExecution"], "rows": p.numInputRows}
        for p in query.recentProgress
        if p.numInputRows > 0
    ][SKIP:batches]


def frame_of(spark: SparkSession, case: str, rows: int) -> DataFrame:
    if case == "python":
        return python_rows(spark, rows)
    if case == "jvm":
        return jvm_rows(spark, rows)
    return empty_rows(spark)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every case, interleaved")
    parser.add_argument("--batches", type=int, default=10, help="micro-batches per case a round")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fanout-bench-source-"))
    spark = spark_session(MASTER, app_name="fanout-bench-source")
    started, calibration = describe(), calibrate()
    timings: dict[str, list[dict[str, Any]]] = {}
    try:
        for round_ in range(args.rounds):
            for rows in SIZES:
                for case in CASES:
                    key = f"{case}@{rows}"
                    checkpoint = workdir / f"{key}-{round_}"
                    runs = run(frame_of(spark, case, rows), checkpoint, SKIP + args.batches)
                    timings.setdefault(key, []).extend(runs)
                    print(json.dumps({"round": round_, "case": key, "runs": len(runs)}), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    cases = {
        key: {
            "median_ms": statistics.median(r["trigger_ms"] for r in runs),
            "min_ms": min(r["trigger_ms"] for r in runs),
            "rows_per_batch": statistics.median(r["rows"] for r in runs),
            "batches": len(runs),
        }
        for key, runs in timings.items()
    }
    sizes = {}
    for rows in SIZES:
        python, jvm, empty = (cases[f"{case}@{rows}"]["median_ms"] for case in CASES)
        sizes[str(rows)] = {
            "saving_ms": round(python - jvm, 1),
            "jvm_over_python": round(jvm / python, 3),
            "python_over_empty_ms": round(python - empty, 1),
        }
    results = {
        "saving_ms_at_1000_rows": sizes["1000"]["saving_ms"],
        "saving_ms_at_10000_rows": sizes["10000"]["saving_ms"],
        "sizes": sizes,
        "cases": cases,
        "machine": {"before": started, "after": describe()},
        "calibration": calibration,
    }
    write_results(results, args.out)


if __name__ == "__main__":
    main()
