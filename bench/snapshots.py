"""Snapshots for new primitives: Spark's state store against the driver's mirror.

Run ``.venv/bin/python bench/snapshots.py`` (``--quick`` for fewer micro-batches); it prints one
JSON object and writes ``bench/results/snapshots.json``.

A relay that acquires a primitive gets the rows inside it as of the micro-batch's tick
(``publisher.pipeline``). Two ways to cut them, both measured inside the same real micro-batches
of the ``agents`` simulation (``AGENTS`` keys in Spark's state, one tick of ``ROWS_PER_TICK``
changed rows per micro-batch, ``local[2]`` with the publisher's embedded settings):

* ``state_store``: what the pipeline does for a dataset it does not mirror: the state as of this
  micro-batch (``state.current_state``: the committed state store read back, this micro-batch's
  changes laid over it), matched against the fresh primitives (``matching``), collected as Arrow;
* ``mirror``: ``publisher.mirror``: bring the driver's copy up to this micro-batch with its
  changed rows (which the pipeline collects anyway), then cut the snapshots in numpy.

Each micro-batch snapshots ``PRIMS`` fresh boxes of side ``SIDE`` spread over ``RELAYS`` relays
(a round of moving views reaching new tiles), and the two answers are checked to be the same
rows. With ``--index sql`` the same dataset is a SQL table and the primitives are the same boxes
as SQL (``SELECT * FROM agents WHERE x BETWEEN .. AND y BETWEEN ..``), matched by Spark
predicates in the store and by ``SqlBox.match`` over Arrow in the mirror; the results go to
``bench/results/snapshots-sql.json``. Also reported: loading the mirror from micro-batch 0's
changes (a new stream) and from the state store (the first snapshot after a restart).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from fanout.publisher import streams
from fanout.publisher.datasets import agents
from fanout.publisher.delivery import rows_by_relay
from fanout.publisher.matching import matcher_for
from fanout.publisher.mirror import Mirror
from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.spark import spark_session
from fanout.publisher.state import current_state, latest_per_key
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views import Box, View
from fanout.views.sql import Sql

RESULTS = Path(__file__).parent / "results" / "snapshots.json"
RESULTS_SQL = Path(__file__).parent / "results" / "snapshots-sql.json"

AGENTS = 1_000_000
ROWS_PER_TICK = 10_000
WORLD = 1000.0
MASTER = "local[2]"
PRIMS = 20
RELAYS = 5
SIDE = 64.0
SEED = 3


def prims(rng: np.random.Generator, index: str) -> list[tuple[int, int, View]]:
    """``PRIMS`` boxes of side ``SIDE`` at random places, over ``RELAYS`` relays (as SQL
    primitives of the table ``agents`` when ``index`` is ``sql``)."""
    corners = rng.uniform(0, WORLD - SIDE, (PRIMS, 2))
    return [
        (number % RELAYS, number, box(x, y) if index == "space" else sql_box(x, y))
        for number, (x, y) in enumerate(corners.tolist())
    ]


def box(x: float, y: float) -> Box:
    return Box((x, y), (x + SIDE, y + SIDE))


def sql_box(x: float, y: float) -> View:
    where = f"x BETWEEN {x!r} AND {x + SIDE!r} AND y BETWEEN {y!r} AND {y + SIDE!r}"
    return Sql(f"SELECT * FROM agents WHERE {where}").primitives()[0]


def keys(snapshots: dict[int, pa.Table]) -> dict[int, list[int]]:
    return {relay: sorted(t.column("id").to_pylist()) for relay, t in snapshots.items()}


class Measure:
    """The ``foreachBatch`` handler: both ways, timed, in every micro-batch."""

    def __init__(
        self, spark: SparkSession, checkpoint: str, params: SimulationParams, index: str
    ) -> None:
        self.spark = spark
        self.checkpoint = checkpoint
        self.index = index
        self.dataset = replace(agents(params), index=index)
        self.matcher = matcher_for(self.dataset)
        self.mirror = Mirror(self.dataset.key, self.dataset.index_columns)
        self.rng = np.random.default_rng(SEED)
        self.rounds: list[dict[str, Any]] = []
        self.loads: dict[str, float] = {}
        self.restart_next = False

    def __call__(self, changes: DataFrame, batch_id: int) -> None:
        changes = changes.persist()
        try:
            self._measure(changes, batch_id)
        finally:
            changes.unpersist()

    def _measure(self, changes: DataFrame, batch_id: int) -> None:
        rows = changes.toArrow()  # the pipeline collects the changed rows in every micro-batch
        if batch_id == 0:
            began = time.perf_counter()
            self.mirror.apply(rows, batch_id)
            self.loads["from_micro_batch_0_ms"] = _ms(began)
            self.loads["rows"] = self.mirror.rows
            return
        fresh = prims(self.rng, self.index)
        began = time.perf_counter()
        state = current_state(self.spark, self.checkpoint, self.dataset, changes, batch_id)
        tables = self.matcher.tables(self.spark, fresh)
        try:
            expected = rows_by_relay(self.matcher.match(state, tables).toArrow())
        finally:
            tables.unpersist()
        store_ms = _ms(began)
        if self.restart_next:  # as after a restart: the state store read into the driver once
            began = time.perf_counter()
            restarted = Mirror(self.dataset.key, self.dataset.index_columns)
            live = current_state(self.spark, self.checkpoint, self.dataset, changes, batch_id)
            restarted.load(live.toArrow(), batch_id)
            self.loads["from_state_store_ms"] = _ms(began)
            if keys(restarted.snapshots(fresh)) != keys(expected):
                raise AssertionError(f"micro-batch {batch_id}: the loaded mirror disagrees")
            self.restart_next = False
        began = time.perf_counter()
        self.mirror.apply(rows, batch_id)
        applied = time.perf_counter()
        got = self.mirror.snapshots(fresh)
        ended = time.perf_counter()
        if keys(got) != keys(expected):
            raise AssertionError(f"micro-batch {batch_id}: the mirror disagrees with the store")
        self.rounds.append(
            {
                "batch_id": batch_id,
                "changed_rows": rows.num_rows,
                "snapshot_rows": sum(t.num_rows for t in got.values()),
                "state_store_ms": store_ms,
                "mirror_apply_ms": round((applied - began) * 1000, 2),
                "mirror_snapshots_ms": round((ended - applied) * 1000, 2),
            }
        )
        print(self.rounds[-1], file=sys.stderr, flush=True)


def run(spark: SparkSession, params: SimulationParams, checkpoint: str, measure: Measure) -> None:
    """Run the stream from ``checkpoint`` up to ``params.max_ticks``."""
    dataset = replace(agents(params), index=measure.index)
    source = streams.stream(spark, dataset, params.start_time, Path(tempfile.gettempdir()))
    query = (
        latest_per_key(source, dataset)
        .writeStream.outputMode("update")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(measure)
        .start()
    )
    try:
        query.processAllAvailable()  # micro-batches of at most max_ticks_per_batch ticks
    finally:
        query.stop()


def _ms(began: float) -> float:
    return round((time.perf_counter() - began) * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8, help="measured micro-batches")
    parser.add_argument("--quick", action="store_true", help="3 micro-batches")
    parser.add_argument("--index", choices=("space", "sql"), default="space")
    args = parser.parse_args()
    measured = 3 if args.quick else args.batches
    workdir = Path(tempfile.mkdtemp(prefix="fanout-bench-snapshots-"))
    spark = spark_session(MASTER, app_name="fanout-bench-snapshots")
    started, calibration = describe(), calibrate()
    period = AGENTS // ROWS_PER_TICK
    base = SimulationParams(
        agents=AGENTS,
        period=period,
        world=WORLD,
        rate=10.0,
        partitions=2,
        start_time=time.time() - 10_000_000,  # the clock far ahead: data always waiting
    )
    checkpoint = str(workdir / "checkpoint")
    measure = Measure(spark, checkpoint, base, args.index)
    try:
        # Ticks 1..period move every agent once: micro-batch 0 holds all of them.
        run(spark, replace(base, max_ticks=period, max_ticks_per_batch=period), checkpoint, measure)
        measure.restart_next = True
        one_tick = replace(base, max_ticks=period + measured, max_ticks_per_batch=1)
        run(spark, one_tick, checkpoint, measure)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    rounds = measure.rounds

    def median(name: str) -> float:
        return float(round(statistics.median(r[name] for r in rounds), 2))

    mirror_ms = median("mirror_apply_ms") + median("mirror_snapshots_ms")
    results = {
        "state_store_ms_median": median("state_store_ms"),
        "mirror_ms_median": round(mirror_ms, 2),
        "mirror_apply_ms_median": median("mirror_apply_ms"),
        "mirror_snapshots_ms_median": median("mirror_snapshots_ms"),
        "speedup_median": round(median("state_store_ms") / mirror_ms, 1),
        "mirror_load": measure.loads,
        "rounds": rounds,
        "setup": {
            "index": args.index,
            "agents": AGENTS,
            "rows_per_tick": ROWS_PER_TICK,
            "fresh_primitives": PRIMS,
            "relays": RELAYS,
            "box_side": SIDE,
            "world": WORLD,
            "master": MASTER,
        },
        "machine": started,
        "calibration": calibration,
    }
    path = RESULTS if args.index == "space" else RESULTS_SQL
    write_results(results, None if args.quick else path)


if __name__ == "__main__":
    main()
