"""Benchmark the postgres source's capture: what the trigger costs writers, and how fast the
reader turns changes into Arrow batches.

Run ``.venv/bin/python bench/postgres.py`` (``--quick`` for a short run); it prints one JSON
object and writes ``bench/results/postgres.json``. It starts a throwaway PostgreSQL server of
this machine's (as the tests do: Debian's ``postgresql`` package), so nothing else is needed.

Measures, on one table ``(order_id bigint key, customer text, amount double)``:

* ``writes_per_s``: single-row ``INSERT ... ON CONFLICT UPDATE`` transactions per second, by 1
  and by 4 concurrent writers (threads, one connection each, random keys), with the table
  captured and without; ``capture_cost_*``: the ratio without / with. Captured writers to one
  table commit one at a time (``sources.postgres`` rule 2): the 4-writer ratio shows what that
  costs next to the trigger's own work.
* ``read_changes_per_s``: changes the stream reader reads and converts to Arrow per second,
  ``maxRowsPerBatch`` at a time (Spark not involved).
"""

from __future__ import annotations

import argparse
import itertools
import random
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from fanout.publisher.sources.postgres import install
from fanout.publisher.sources.postgres_reader import ReaderOptions
from fanout.publisher.sources.postgres_trigger import TriggerStreamReader
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.postgres import throwaway_postgres

RESULTS = Path(__file__).parent / "results" / "postgres.json"
COLUMNS = {"order_id": "long", "customer": "string", "amount": "double"}
SCHEMA = StructType(
    [
        StructField("order_id", LongType()),
        StructField("customer", StringType()),
        StructField("amount", DoubleType()),
        StructField("_version", LongType()),
        StructField("_deleted", BooleanType()),
    ]
)
_names = itertools.count()


def fresh_table(url: str, captured: bool) -> str:
    name = f"bench_orders_{next(_names)}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            f"CREATE TABLE {name} (order_id bigint PRIMARY KEY, customer text, amount float8)"
        )
    if captured:
        install(url, name, "order_id", COLUMNS)
    return name


def writes_per_s(url: str, table: str, writers: int, seconds: float) -> float:
    """Single-row upsert transactions per second by ``writers`` concurrent connections."""
    done = [0] * writers
    stop = time.monotonic() + seconds

    def write(slot: int) -> None:
        rng = random.Random(slot)
        with psycopg.connect(url, autocommit=True) as db:
            while time.monotonic() < stop:
                key = rng.randrange(10_000)
                db.execute(
                    f"INSERT INTO {table} VALUES (%s, 'c', %s) ON CONFLICT (order_id)"
                    " DO UPDATE SET amount = EXCLUDED.amount",
                    (key, rng.random()),
                )
                done[slot] += 1

    threads = [threading.Thread(target=write, args=(slot,)) for slot in range(writers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.monotonic() - started)


def read_changes_per_s(url: str, changes: int, batch: int) -> dict[str, Any]:
    table = fresh_table(url, captured=True)
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            f"INSERT INTO {table} SELECT n, 'c' || n % 97, n * 0.5"
            f" FROM generate_series(1, {changes}) n"
        )
    reader = TriggerStreamReader(ReaderOptions(url, table, "unused", batch), SCHEMA)
    offset = reader.initialOffset()
    started, read = time.perf_counter(), 0
    while True:
        batches, offset = reader.read(offset)
        rows = sum(b.num_rows for b in batches)
        if not rows:
            break
        read += rows
    elapsed = time.perf_counter() - started
    reader.stop()
    return {"changes": read, "batch": batch, "per_s": round(read / elapsed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per write measurement")
    parser.add_argument("--changes", type=int, default=200_000, help="changes read")
    parser.add_argument("--quick", action="store_true", help="a short run (not written)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.changes = 2.0, 20_000
    machine, calibration = describe(), calibrate()
    with throwaway_postgres() as url:
        writes: dict[str, float] = {}
        for writers in (1, 4):
            for captured in (False, True):
                table = fresh_table(url, captured)
                label = f"{writers}_writers_{'captured' if captured else 'plain'}"
                writes[label] = round(writes_per_s(url, table, writers, args.seconds))
        reading = read_changes_per_s(url, args.changes, 100_000)
    results = {
        "benchmark": "postgres",
        "machine": machine,
        "calibration": calibration,
        "seconds_per_write_measurement": args.seconds,
        "writes_per_s": writes,
        "capture_cost_1_writer": round(writes["1_writers_plain"] / writes["1_writers_captured"], 2),
        "capture_cost_4_writers": round(
            writes["4_writers_plain"] / writes["4_writers_captured"], 2
        ),
        "read_changes_per_s": reading,
    }
    write_results(results, None if args.quick else RESULTS)


if __name__ == "__main__":
    main()
