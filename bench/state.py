"""Spark's floor under the publisher pipeline: micro-batches of the source and the state alone.

Run ``.venv/bin/python bench/state.py`` (``--quick`` for fewer micro-batches); it prints one JSON
object and writes ``bench/results/state.json``.

``bench/pipeline.py`` measures the whole pipeline; this measures the part no code of fanout's can
go below, with nothing after it: the ``agents`` simulation source feeding the pipeline's own
``latest_per_key`` (Spark's built-in stateful aggregation, update mode) into Spark's ``noop``
sink, on ``local[2]`` with the publisher's embedded settings (``pipeline.spark_session``), with
``AGENTS`` keys in state. No matching, no collecting to the driver, no log, no delivery.

Cases:

* ``source``: the source alone (no state), for the part of a micro-batch that is reading;
* ``hdfs``: the state in Spark's default HDFS-backed state store (the publisher's default);
* ``rocksdb``: the state in RocksDB with changelog checkpointing.

For each case the state is first loaded with every agent (one micro-batch of ``AGENTS`` rows),
then the stream runs flat out — the simulation's clock is far ahead, so every micro-batch is as
large as its admission limit — at each of ``TICKS_PER_BATCH`` ticks of ``ROWS_PER_TICK`` rows
(every agent moving once every ``AGENTS / ROWS_PER_TICK`` ticks, as in ``bench/pipeline.py``'s
latency step). Reported per micro-batch size: the median of Spark's ``triggerExecution`` (the
whole micro-batch) over the measured micro-batches, and the rows per second that makes.

What it bounds:

* **latency**: a tick's rows reach a relay at the earliest when a micro-batch holding them ends,
  and a micro-batch holds at least one tick: the shortest one-tick micro-batch here is a floor
  under every tick's tick-to-relay latency, so under its p50 (``floors.latency_p50_ms``);
* **throughput**: the best rows per second of the source and the state store together (the
  fastest micro-batch of any size), with nothing after them, is a ceiling over the pipeline's
  sustained updates per second (``floors.updates_per_s``).

Both are taken on the pipeline's side (its fastest micro-batch, not the median), so the
conclusions drawn from them are conservative.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.spark import spark_session
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.sparkstate import HDFS, ROCKSDB, run

RESULTS = Path(__file__).parent / "results" / "state.json"

AGENTS = 1_000_000
ROWS_PER_TICK = 10_000
TICKS_PER_BATCH = (1, 2, 5, 20, 50, 100)
MASTER = "local[2]"
#: Micro-batches run and not counted after each (re)start: Spark's first ones are slower.
SKIP = 2
#: Tests of the target against these floors.
TARGET_UPDATES_PER_S = 300_000
TARGET_P50_MS = 300.0


def measure_case(
    spark: SparkSession, case: str, workdir: Path, measured: int
) -> list[dict[str, Any]]:
    """Load every agent into a fresh checkpoint, then time micro-batches of each size."""
    spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
    for key, value in (ROCKSDB if case == "rocksdb" else HDFS).items():
        spark.conf.set(key, value)
    checkpoint = workdir / case
    shutil.rmtree(checkpoint, ignore_errors=True)
    period = AGENTS // ROWS_PER_TICK
    # The clock's origin far enough back that every size below always has data waiting.
    base = SimulationParams(
        agents=AGENTS,
        period=period,
        rate=10.0,
        partitions=2,
        start_time=time.time() - 10_000_000,
    )
    stateful = case != "source"
    # Ticks 1..period move every agent once: the state then holds all of them.
    load = replace(base, max_ticks=period)
    loaded = run(spark, load, checkpoint, stateful=stateful, batches=None)
    sizes = []
    for ticks in TICKS_PER_BATCH:
        params = replace(base, max_ticks_per_batch=ticks)
        runs = run(spark, params, checkpoint, stateful=stateful, batches=SKIP + measured)[SKIP:]
        durations = [r["durationMs"]["triggerExecution"] for r in runs]
        input_rows = [r["numInputRows"] for r in runs]
        median_ms = statistics.median(durations)
        sizes.append(
            {
                "ticks_per_batch": ticks,
                "rows_per_batch": int(statistics.median(input_rows)),
                "batches": len(runs),
                "trigger_ms_median": median_ms,
                "trigger_ms_min": min(durations),
                "add_batch_ms_median": statistics.median(
                    r["durationMs"].get("addBatch", 0) for r in runs
                ),
                "rows_per_s": round(statistics.median(input_rows) / (median_ms / 1000)),
                "rows_per_s_best": round(
                    max(r / d * 1000 for r, d in zip(input_rows, durations, strict=True))
                ),
            }
        )
        print(json.dumps({"case": case, **sizes[-1]}), flush=True)
    return [{"load_ms": loaded[0]["durationMs"]["triggerExecution"] if loaded else None}, *sizes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8, help="measured micro-batches per size")
    parser.add_argument("--cases", nargs="+", default=["source", "hdfs", "rocksdb"])
    parser.add_argument("--quick", action="store_true", help="3 micro-batches per size")
    args = parser.parse_args()
    measured = 3 if args.quick else args.batches
    workdir = Path(tempfile.mkdtemp(prefix="fanout-bench-state-"))
    spark = spark_session(MASTER, app_name="fanout-bench-state")
    started, calibration = describe(), calibrate()
    try:
        cases = {case: measure_case(spark, case, workdir, measured) for case in args.cases}
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    stateful = [size for case in ("hdfs", "rocksdb") if case in cases for size in cases[case][1:]]
    # Both bounds on the pipeline's side: its fastest one-tick micro-batch, its best rate.
    one_tick = [s["trigger_ms_min"] for s in stateful if s["ticks_per_batch"] == 1]
    floors = {
        "latency_p50_ms": min(one_tick) if one_tick else None,
        "updates_per_s": max((s["rows_per_s_best"] for s in stateful), default=None),
    }
    results = {
        "floors": floors,
        "targets": {
            "updates_per_s": TARGET_UPDATES_PER_S,
            "latency_p50_ms": TARGET_P50_MS,
            "updates_per_s_reachable": floors["updates_per_s"] is not None
            and floors["updates_per_s"] >= TARGET_UPDATES_PER_S,
            "latency_p50_reachable": floors["latency_p50_ms"] is not None
            and floors["latency_p50_ms"] <= TARGET_P50_MS,
        },
        "cases": {
            case: {"load_ms": sizes[0]["load_ms"], "sizes": sizes[1:]}
            for case, sizes in cases.items()
        },
        "setup": {
            "agents": AGENTS,
            "rows_per_tick": ROWS_PER_TICK,
            "master": MASTER,
            "measured_batches": measured,
            "skipped_batches": SKIP,
        },
        "machine": started,
        "calibration": calibration,
    }
    write_results(results, None if args.quick else RESULTS)


if __name__ == "__main__":
    main()
