"""Where a micro-batch's time goes inside Spark: the same stream, ended in different ways.

Run ``.venv/bin/python bench/microbatch.py`` (``--quick`` for fewer micro-batches); it writes
``bench/results/microbatch.json`` and prints one JSON object as its last line.

``bench/latency.py`` measures tick to subscriber through the whole system; this isolates the
part of a micro-batch that runs inside Spark and is fanout's own — what ``foreachBatch`` does
with the changed rows — at ``bench/latency.py``'s load (100,000 agents, 10,000 updates/s: 1,000
rows a tick), in one process, one run, so the cases compare with each other:

* ``noop``: the source and the state update, the changed rows written to Spark's ``noop``
  sink from inside ``foreachBatch`` (the floor: nothing of fanout's);
* ``collect``: the changed rows collected to Arrow, no matching;
* ``match``: the pipeline's own step 1 (``microbatch.match_changes``) against ``PRIMS`` fixed
  100 x 100 boxes on one relay, as the publisher runs it: the rows collected, then matched in
  the driver (``matching.local``);
* ``match-spark``: step 1 with Spark's broadcast join (``matching.regions``), adaptive query
  execution off and the shape tables not cached (the publisher's settings since 032d632);
* ``match-before``: step 1 as the publisher ran it before this benchmark: Spark's join with
  AQE on (Spark's default) and the shape tables cached.

The machine is shared and its load swings within seconds, so the cases are not run one after
the other: one stream (its state first loaded with every agent) runs them in turn, micro-batch
by micro-batch, ``TICKS`` ticks per micro-batch (the simulation's clock far enough back that
every micro-batch is full). Reported per case: the median, fastest and slowest of Spark's
``triggerExecution`` and the median ``addBatch`` over its measured micro-batches, and each
case's median minus ``noop``'s. ``machine`` records the load average at the start and end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession

from fanout.publisher.datasets import Dataset, agents
from fanout.publisher.matching import Matcher, matcher_for
from fanout.publisher.matching.local import local_tables
from fanout.publisher.matching.regions import ShapeFrames
from fanout.publisher.microbatch import match_changes
from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.spark import spark_session
from fanout.testing import sparkstate
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "microbatch.json"
AGENTS = 100_000
PERIOD = 100
WORLD = 1000.0
MASTER = "local[2]"
PRIMS = 20
BOX_SIDE = 100.0
#: Ticks per micro-batch measured: one (the floor's size) and the size a 2 s micro-batch
#: takes at 10 ticks/s.
TICKS = (1, 20)
SKIP = 2


def boxes() -> list[tuple[int, int, Box]]:
    """``PRIMS`` fixed boxes on one relay, as ``bench/latency.py``'s subscribers hold."""
    rng = np.random.default_rng(10_000)
    out = []
    for prim in range(PRIMS):
        x, y = rng.uniform(0.0, WORLD - BOX_SIDE, size=2).tolist()
        out.append((0, prim, Box((x, y), (x + BOX_SIDE, y + BOX_SIDE))))
    return out


def run_size(
    spark: SparkSession, cases: list[str], workdir: Path, measured: int, ticks: int
) -> list[dict[str, Any]]:
    """Load the state, then run ``measured`` micro-batches of ``ticks`` ticks per case, the
    cases in turn."""
    base = SimulationParams(
        agents=AGENTS,
        period=PERIOD,
        rate=10.0,
        world=WORLD,
        partitions=2,
        start_time=time.time() - 10_000_000,
        admission="fixed",
    )
    dataset = agents(base)
    checkpoint = workdir / f"ticks-{ticks}"
    sparkstate.run(spark, replace(base, max_ticks=PERIOD), checkpoint, stateful=True, batches=None)
    matcher = matcher_for(dataset)
    sinks = {case: _sink(spark, case, dataset, matcher) for case in cases}
    first: list[int] = []

    def each(changes: DataFrame, batch_id: int) -> None:
        if not first:
            first.append(batch_id)
        case = cases[(batch_id - first[0]) % len(cases)]
        # A foreachBatch's DataFrames belong to the stream's own copy of the session.
        changes.sparkSession.conf.set("spark.sql.adaptive.enabled", str(case in AQE).lower())
        sinks[case](changes)

    params = replace(base, max_ticks_per_batch=ticks)
    stream = sparkstate.rows(spark, params, stateful=True)
    writer = stream.writeStream.outputMode("update").option("checkpointLocation", str(checkpoint))
    total = len(cases) * (SKIP + measured)
    query = writer.foreachBatch(each).start()
    try:
        while len(query.recentProgress) < total and query.isActive:
            time.sleep(0.2)
        if query.exception() is not None:
            raise RuntimeError(f"the stream failed: {query.exception()}")
    finally:
        query.stop()
    runs: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for p in query.recentProgress[:total]:
        index = int(p.batchId) - first[0]
        if index >= len(cases) * SKIP:
            runs[cases[index % len(cases)]].append(
                {"durationMs": dict(p.durationMs), "numInputRows": p.numInputRows}
            )
    out = []
    for case, done in runs.items():
        trigger = [r["durationMs"]["triggerExecution"] for r in done]
        out.append(
            {
                "case": case,
                "ticks_per_batch": ticks,
                "rows_per_batch": int(statistics.median(r["numInputRows"] for r in done)),
                "batches": len(done),
                "median_ms": float(statistics.median(trigger)),
                "min_ms": float(min(trigger)),
                "max_ms": float(max(trigger)),
                "add_batch_median_ms": float(
                    statistics.median(r["durationMs"].get("addBatch", 0) for r in done)
                ),
            }
        )
        print(json.dumps(out[-1]), flush=True)
    return out


#: The cases run with adaptive query execution on (Spark's default; the publisher's is off).
AQE = ("match-before",)


def _sink(
    spark: SparkSession, case: str, dataset: Dataset, matcher: Matcher
) -> Callable[[DataFrame], object]:
    if case == "noop":
        return lambda changes: changes.write.format("noop").mode("overwrite").save()
    if case == "collect":
        return lambda changes: changes.toArrow()
    if case == "match":
        tables = local_tables(boxes())
        return lambda changes: match_changes(changes, dataset, matcher, tables)
    # Agents are a region dataset: their matcher's Spark tables are ShapeFrames (PRIMS boxes).
    frames = matcher.tables(spark, boxes())
    assert isinstance(frames, ShapeFrames)
    if case == "match-before":
        frames = dataclasses.replace(
            frames, bucketed=frames.bucketed.cache(), wide=frames.wide.cache()
        )
    return lambda changes: match_changes(changes, dataset, matcher, frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8, help="measured micro-batches per case")
    parser.add_argument(
        "--cases",
        nargs="+",
        default=["noop", "collect", "match-before", "match-spark", "match"],
    )
    parser.add_argument("--ticks", nargs="+", type=int, default=list(TICKS))
    parser.add_argument("--quick", action="store_true", help="3 micro-batches per case")
    parser.add_argument("--label", default="", help="results go to microbatch-LABEL.json")
    args = parser.parse_args()
    measured = 3 if args.quick else args.batches
    workdir = Path(tempfile.mkdtemp(prefix="fanout-bench-microbatch-"))
    spark = spark_session(MASTER, app_name="fanout-bench-microbatch")
    started, calibration = describe(), calibrate()
    try:
        cases = [
            result
            for ticks in args.ticks
            for result in run_size(spark, args.cases, workdir, measured, ticks)
        ]
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    summary: dict[str, Any] = {}
    for ticks in args.ticks:
        by_case = {c["case"]: c for c in cases if c["ticks_per_batch"] == ticks}
        if "noop" in by_case:
            floor = by_case["noop"]["median_ms"]
            summary[f"over_floor_ms_at_{ticks}_ticks"] = {
                case: round(c["median_ms"] - floor, 1) for case, c in by_case.items()
            }
    result = {
        "summary": summary,
        "cases": cases,
        "setup": {"agents": AGENTS, "period": PERIOD, "prims": PRIMS, "master": MASTER},
        "machine": started | {"load_average_1m_end": round(os.getloadavg()[0], 2)},
        "calibration": calibration,
    }
    path = RESULTS.with_name(f"microbatch-{args.label}.json") if args.label else RESULTS
    write_results(result, None if args.quick else path)


if __name__ == "__main__":
    main()
