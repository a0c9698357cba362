"""What a transducer costs the relay per tick, in CPU time (issue 44 item 3, docs/transducers.md).

``.venv/bin/python bench/transducers.py`` feeds one transduced subscription the pushes of a view
of 1,000 agents, a tenth of them moving each tick, and times ``Session.step`` (the window rebuilt
from the push, the transducer evaluated, its output diffed and encoded) for: ``window`` counting
agents per cell over the last 10 ticks, ``window`` over the newest tick only, and the Python
``crossings``; each the best of 5 rounds of 100 ticks, in ``time.process_time`` (CPU, not wall:
the shared machine's load inflates it less; DuckDB runs on the calling thread, ``threads = 1``).
Prints one JSON object; writes ``bench/results/transducers.json`` unless ``--no-save``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.transducers import Budget, Transducers
from fanout.transducers.crossings import Crossings
from fanout.transducers.session import Session
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Push
from fanout.wire.options import Transduce

RESULTS = Path(__file__).resolve().parent / "results" / "transducers.json"
SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("y", pa.float64())])
CELLS = "SELECT floor(x / 50)::BIGINT * 100 + floor(y / 50)::BIGINT AS cell, count(*) AS n"
CELLS += " FROM history GROUP BY cell"


def pushes(rows: int, ticks: int, moving: float) -> list[Push]:
    """A full push of ``rows`` agents, then ``ticks`` pushes moving a ``moving`` share of them."""
    rng = np.random.default_rng(44)
    ids = np.arange(rows)
    x, y = rng.random(rows) * 1000, rng.random(rows) * 1000
    none = encode_columns({})
    frames = [Push(1, 1, 0, 0, 0.0, True, encode_columns({"id": ids, "x": x, "y": y}), none, none)]
    for seq in range(1, ticks + 1):
        moved = np.sort(rng.choice(rows, int(rows * moving), replace=False))
        x[moved] += rng.normal(0, 5, len(moved))
        y[moved] += rng.normal(0, 5, len(moved))
        rows_moved = encode_columns({"id": ids[moved], "x": x[moved], "y": y[moved]})
        frames.append(Push(1, 1, seq, seq, float(seq), False, none, rows_moved, none))
    return frames


def per_tick(make: Any, frames: list[Push]) -> float:
    """CPU µs per tick of a session ``make()`` gives (best of 5 rounds)."""
    best = float("inf")
    for _ in range(5):
        session = make()
        session.step(frames[0])
        started = time.process_time()
        for frame in frames[1:]:
            session.step(frame)
        best = min(best, (time.process_time() - started) / (len(frames) - 1))
    return round(best * 1e6, 1)


def measure(rows: int = 1000, ticks: int = 100, moving: float = 0.1) -> dict[str, Any]:
    frames = pushes(rows, ticks, moving)
    transducers = Transducers(Budget(seconds=60))
    window = {"query": CELLS, "ticks": 10}
    newest = {"query": CELLS, "ticks": 1}
    cases = {
        "window_cells_10_ticks": lambda: transducers.start(Transduce("window", window), SCHEMA),
        "window_cells_1_tick": lambda: transducers.start(Transduce("window", newest), SCHEMA),
        "crossings": lambda: Session(
            Crossings({"column": "x", "above": 500}), SCHEMA, Budget(), time.perf_counter
        ),
    }
    out: dict[str, Any] = {"rows": rows, "ticks": ticks, "moving": moving}
    for name, make in cases.items():
        out[f"{name}_cpu_us_per_tick"] = per_tick(make, frames)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    results = {**measure(), "machine": describe(), "calibration": calibrate()}
    write_results(results, None if args.no_save else RESULTS)


if __name__ == "__main__":
    main()
