"""Benchmark the postgres source's capture: what each capture costs the table's writers, and how
fast each reader turns changes into Arrow batches.

Run ``.venv/bin/python bench/postgres.py`` (``--quick`` for a short run); it prints one JSON
object last and writes ``bench/results/postgres.json``. It starts a throwaway PostgreSQL server
of this machine's (as the tests do: Debian's ``postgresql`` package, ``wal_level = logical``),
so nothing else is needed.

Measures, on one table ``(order_id bigint key, customer text, amount double)`` per measurement:

* ``writes_per_s``: single-row ``INSERT ... ON CONFLICT UPDATE`` transactions per second, by 1
  and by 4 concurrent writers (threads, one connection each, random keys), with no capture, with
  the trigger (``capture = "trigger"``) and with logical decoding (``capture = "logical"``);
  while captured, a reader in another process drains the changes as fast as it can, as the
  publisher would with ``trigger = 0`` (reads and commits, 10,000 at a time), so the server's
  and the reader's work compete with the writers for this machine's cores; ``_unread``: the
  capture installed and its stream started, no reader (what the writers' own transactions
  pay). The configurations' tables and readers are set up once; the writers then take turns
  of 2 s at each table, the order rotated every turn, until each has had ``--seconds``; that
  is one run of ``--runs``; the median and the spread (min, max) over runs.
* ``*_writer_cost_ratio``: writes per second without capture / with it, per run (the same
  run's baseline), the median over runs; the headline is the worse of 1 and 4 writers.
* ``read_changes_per_s``: changes each reader reads and converts to Arrow per second
  (Spark not involved).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from fanout.publisher.sources.postgres import install
from fanout.publisher.sources.postgres_logical import LogicalStreamReader
from fanout.publisher.sources.postgres_reader import ConnectedReader, ReaderOptions
from fanout.publisher.sources.postgres_trigger import TriggerStreamReader
from fanout.testing.calibration import calibrate
from fanout.testing.capture import COLUMNS, SCHEMA
from fanout.testing.machine import describe, write_results
from fanout.testing.postgres import throwaway_postgres

RESULTS = Path(__file__).parent / "results" / "postgres.json"
#: Measured configurations: no capture; each capture drained by a reader; each unread.
CONFIGURATIONS = ("none", "trigger", "logical", "trigger_unread", "logical_unread")
#: Seconds of one configuration's turn at writing.
SLICE = 2.0
_names = itertools.count()


def fresh_table(url: str, capture: str) -> str:
    name = f"bench_orders_{next(_names)}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            f"CREATE TABLE {name} (order_id bigint PRIMARY KEY, customer text, amount float8)"
        )
    if capture != "none":
        install(url, name, "order_id", COLUMNS, capture)
    return name


def stream_reader(url: str, table: str, capture: str, batch: int) -> ConnectedReader:
    if capture == "logical":
        options = ReaderOptions(url, table, "", batch, "order_id", "logical")
        return LogicalStreamReader(options, SCHEMA)
    return TriggerStreamReader(ReaderOptions(url, table, "", batch, "order_id"), SCHEMA)


def drain(url: str, table: str, capture: str, ready: Any, stop: Any) -> None:
    """Read and commit the table's changes as the publisher does, until ``stop`` is set."""
    reader = stream_reader(url, table, capture, 10_000)
    offset = reader.initialOffset()
    ready.set()
    while not stop.is_set():
        batches, end = reader.read(offset)
        if end == offset:
            time.sleep(0.1)
            continue
        sum(b.num_rows for b in batches)
        reader.commit(end)
        offset = end
    reader.stop()


class Captured:
    """A fresh table captured as ``configuration`` says, drained by a reader in another
    process unless ``_unread`` (its stream started, so a slot exists, but never read)."""

    def __init__(self, url: str, configuration: str) -> None:
        self.url, self.configuration = url, configuration
        self.capture, _, unread = configuration.partition("_")
        self.table = fresh_table(url, self.capture)
        spawn = multiprocessing.get_context("spawn")
        ready, self.stop_reading = spawn.Event(), spawn.Event()
        self.reading: Any = None
        if self.capture != "none" and not unread:
            self.reading = spawn.Process(
                target=drain, args=(url, self.table, self.capture, ready, self.stop_reading)
            )
            self.reading.start()
            if not ready.wait(300):
                raise RuntimeError(f"the {self.capture} reader did not start")
        elif self.capture != "none":
            reader = stream_reader(url, self.table, self.capture, 1)
            reader.initialOffset()
            reader.stop()

    def close(self) -> None:
        if self.reading is not None:
            self.stop_reading.set()
            self.reading.join(60)
        if self.capture == "logical":  # its slot would keep WAL for the rest of the run
            install(self.url, self.table, "order_id", COLUMNS, "trigger")


def writes(url: str, table: str, writers: int, seconds: float) -> tuple[int, float]:
    """Single-row upsert transactions by ``writers`` concurrent connections for ``seconds``:
    how many, in how many seconds."""
    done = [0] * writers
    stop = time.monotonic() + seconds

    def write(slot: int) -> None:
        rng = random.Random()
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
    return sum(done), time.monotonic() - started


def writes_per_s(url: str, writers: int, seconds: float, runs: int) -> list[dict[str, float]]:
    """Per run, each configuration's writes per second by ``writers``: the configurations take
    turns of ``SLICE`` seconds (in an order rotated each turn) until each has had ``seconds``,
    so that the load of this shared machine falls on all of them alike."""
    tables = [Captured(url, configuration) for configuration in CONFIGURATIONS]
    try:
        found: list[dict[str, float]] = []
        for _ in range(runs):
            done = dict.fromkeys(CONFIGURATIONS, 0)
            spent = dict.fromkeys(CONFIGURATIONS, 0.0)
            for turn in range(max(1, round(seconds / SLICE))):
                shift = turn % len(tables)
                for captured in tables[shift:] + tables[:shift]:
                    count, elapsed = writes(url, captured.table, writers, SLICE)
                    done[captured.configuration] += count
                    spent[captured.configuration] += elapsed
            found.append({c: done[c] / spent[c] for c in CONFIGURATIONS})
        return found
    finally:
        for captured in tables:
            captured.close()


def read_changes_per_s(url: str, capture: str, changes: int, batch: int) -> dict[str, Any]:
    """Changes read and converted to Arrow per second, ``batch`` at a time (written in
    transactions of 1,000 rows)."""
    table = fresh_table(url, capture)
    reader = stream_reader(url, table, capture, batch)
    offset = reader.initialOffset()
    with psycopg.connect(url, autocommit=True) as db:
        for low in range(0, changes, 1000):
            with db.transaction(), db.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {table} VALUES (%s, 'c', %s)",
                    [(n, n * 0.5) for n in range(low, min(low + 1000, changes))],
                )
    started, read = time.perf_counter(), 0
    while True:
        batches, end = reader.read(offset)
        rows = sum(b.num_rows for b in batches)
        if not rows:
            break
        reader.commit(end)
        offset, read = end, read + rows
    elapsed = time.perf_counter() - started
    reader.stop()
    if capture == "logical":
        install(url, table, "order_id", COLUMNS, "trigger")
    return {"changes": read, "batch": batch, "per_s": round(read / elapsed)}


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per write measurement")
    parser.add_argument("--runs", type=int, default=3, help="rounds of every measurement")
    parser.add_argument("--changes", type=int, default=100_000, help="changes read")
    parser.add_argument("--quick", action="store_true", help="a short run (not written)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.runs, args.changes = 2.0, 1, 10_000
    machine, calibration = describe(), calibrate()
    rates: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    with throwaway_postgres() as url:
        for writers in (1, 4):
            for found in writes_per_s(url, writers, args.seconds, args.runs):
                for configuration, rate in found.items():
                    rates.setdefault(f"{writers}_writers_{configuration}", []).append(rate)
                    if configuration != "none":
                        label = f"{configuration}_{writers}_writers"
                        ratios.setdefault(label, []).append(found["none"] / rate)
        reading = {
            capture: read_changes_per_s(url, capture, args.changes, 10_000)
            for capture in ("trigger", "logical")
        }
    cost = {label: summary(values) for label, values in ratios.items()}
    results = {
        "benchmark": "postgres",
        "machine": machine,
        "calibration": calibration,
        "seconds_per_write_measurement": args.seconds,
        "runs": args.runs,
        "writes_per_s": {label: summary(values) for label, values in rates.items()},
        "writer_cost": cost,
        "read_changes_per_s": reading,
        "trigger_writer_cost_ratio": max(
            cost["trigger_1_writers"]["median"], cost["trigger_4_writers"]["median"]
        ),
        "logical_writer_cost_ratio": max(
            cost["logical_1_writers"]["median"], cost["logical_4_writers"]["median"]
        ),
        "trigger_unread_writer_cost_ratio": max(
            cost["trigger_unread_1_writers"]["median"], cost["trigger_unread_4_writers"]["median"]
        ),
        "logical_unread_writer_cost_ratio": max(
            cost["logical_unread_1_writers"]["median"], cost["logical_unread_4_writers"]["median"]
        ),
    }
    write_results(results, None if args.quick else RESULTS)


if __name__ == "__main__":
    main()
