"""Benchmark the publisher's batch log on both backends; print one JSON object.

Run ``.venv/bin/python bench/log.py``; it also writes ``bench/results/log.json``. PostgreSQL runs
on a throwaway server this script starts (``fanout.testing.postgres``: ``initdb``/``pg_ctl`` from
PATH or Debian's ``/usr/lib/postgresql/VERSION/bin``) with the server's default durability
(``fsync = on``), or on the server named by ``FANOUT_BENCH_POSTGRES`` (a DSN). Per backend:

* ``append_per_s``, ``append_mb_per_s``, ``append_ms_p50``/``p99``: appending
  ``ENTRIES`` micro-batches of ``ROWS`` changed rows each (the ``agents`` columns plus
  ``_version`` and ``_deleted``), each append committed durably (fsynced) before the next.
  MB are the entries' Arrow IPC bytes, 10^6 bytes.
* ``small_append_per_s``: the same with 10-row entries: the per-commit cost alone.
* ``read_entries_per_s``, ``read_mb_per_s``, ``read_rows_per_s``: one replay of every entry
  (``read(first, last)``), rows decoded into Arrow tables.

``ipc_encode_mb_per_s`` is Arrow IPC encoding alone, the floor under every append. Every number
is the median of ``REPEATS`` rounds (the machines are shared and noisy). The SQLite file lives in
the working directory, not in a temporary folder that might be in memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from fanout.publisher.log import BatchLog, LogEntry, encode_rows, open_log
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.postgres import throwaway_postgres

ROWS = 10_000
ENTRIES = 150
SMALL_ROWS = 10
SMALL_ENTRIES = 300
REPEATS = 3
RESULTS = Path(__file__).parent / "results" / "log.json"


def changed_rows(seq: int, rows: int) -> pa.Table:
    """One micro-batch of the ``agents`` dataset: ``rows`` agents moved at tick ``seq``."""
    rng = np.random.default_rng(seq)
    ids = rng.choice(1_000_000, size=rows, replace=False).astype(np.int64)
    return pa.table(
        {
            "id": ids,
            "x": rng.uniform(0, 1000, rows),
            "y": rng.uniform(0, 1000, rows),
            "kind": (ids % 7).astype(np.int32),
            "tick": np.full(rows, seq, np.int64),
            "ts": np.full(rows, 1.7e9 + seq / 10),
            "_version": np.full(rows, seq, np.int64),
            "_deleted": rng.random(rows) < 0.01,
        }
    )


def bench_appends(log: BatchLog, dataset: str, tables: list[pa.Table]) -> dict[str, float]:
    """Append every table as one entry; rates and latency percentiles."""
    latencies = []
    start = time.perf_counter()
    for seq, rows in enumerate(tables):
        began = time.perf_counter()
        log.append(LogEntry(dataset, 1, seq, seq, 1.7e9 + seq / 10, rows))
        latencies.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    size = sum(encode_rows(rows).size for rows in tables)
    latencies.sort()
    return {
        "per_s": round(len(tables) / elapsed, 1),
        "mb_per_s": round(size / elapsed / 1e6, 1),
        "ms_p50": round(statistics.median(latencies) * 1e3, 2),
        "ms_p99": round(latencies[int(len(latencies) * 0.99)] * 1e3, 2),
    }


def bench_backend(url: str) -> dict[str, object]:
    """Every measurement on the log at ``url`` (an empty log): the median of ``REPEATS`` rounds."""
    tables = [changed_rows(seq, ROWS) for seq in range(ENTRIES)]
    small = [changed_rows(seq, SMALL_ROWS) for seq in range(SMALL_ENTRIES)]
    with open_log(url) as log:
        rounds = [bench_round(log, f"agents-{round_}", tables, small) for round_ in range(REPEATS)]
    return {name: statistics.median(one[name] for one in rounds) for name in rounds[0]}


def bench_round(
    log: BatchLog, dataset: str, tables: list[pa.Table], small: list[pa.Table]
) -> dict[str, float]:
    """One round of appends (big and small entries) and one replay, on fresh datasets."""
    size = sum(encode_rows(rows).size for rows in tables)
    big = bench_appends(log, dataset, tables)
    tiny = bench_appends(log, f"{dataset}-small", small)
    start = time.perf_counter()
    read = list(log.read(dataset, 1, 0, len(tables) - 1))
    elapsed = time.perf_counter() - start
    if [entry.rows for entry in read] != tables:
        raise AssertionError(f"{dataset}: the replay differs from what was appended")
    return {
        "append_per_s": big["per_s"],
        "append_mb_per_s": big["mb_per_s"],
        "append_ms_p50": big["ms_p50"],
        "append_ms_p99": big["ms_p99"],
        "small_append_per_s": tiny["per_s"],
        "small_append_ms_p50": tiny["ms_p50"],
        "read_entries_per_s": round(len(tables) / elapsed, 1),
        "read_mb_per_s": round(size / elapsed / 1e6, 1),
        "read_rows_per_s": round(len(tables) * ROWS / elapsed),
    }


def bench_encode() -> float:
    """MB per second of Arrow IPC encoding alone."""
    tables = [changed_rows(seq, ROWS) for seq in range(20)]
    start = time.perf_counter()
    size = sum(encode_rows(rows).size for rows in tables)
    return float(round(size / (time.perf_counter() - start) / 1e6, 1))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    results: dict[str, object] = {
        "machine": describe(),
        "calibration": calibrate(),
        "rows_per_entry": ROWS,
        "entries": ENTRIES,
        "rounds": REPEATS,
        "entry_mb": round(encode_rows(changed_rows(0, ROWS)).size / 1e6, 3),
        "ipc_encode_mb_per_s": bench_encode(),
    }
    with tempfile.TemporaryDirectory(prefix="fanout-bench-log-", dir=Path.cwd()) as folder:
        results["sqlite"] = bench_backend(f"sqlite:///{Path(folder).resolve()}/log.db")
    dsn = os.environ.get("FANOUT_BENCH_POSTGRES")
    if dsn:
        results["postgresql"] = bench_backend(dsn)
    else:
        with throwaway_postgres() as dsn:
            results["postgresql"] = bench_backend(dsn)
    write_results(results, RESULTS)


if __name__ == "__main__":
    main()
