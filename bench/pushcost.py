"""What one region push's rows cost the relay to cut and encode, in CPU time (issue 29: NULL
validity must not make pushes without NULLs dearer).

``.venv/bin/python bench/pushcost.py`` times ``relay.data.pushes``' cut of one push (the rows at 150
positions of a 100,000-row agents table, taken, transformed, encoded) under three transforms:
none, ``float32`` and a projection to ``x, y``; each the best of 7 rounds of 3,000 pushes, in
``time.process_time`` (CPU, not wall: the shared machine's load inflates it less). To compare
two checkouts, run it from each in turn with ``PYTHONPATH=CHECKOUT/src`` (``bench/checkouts.py``
does that for scripts both checkouts have). Prints one JSON object; writes
``bench/results/pushcost.json`` unless ``--no-save``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from fanout.relay.core.transforms import resolve
from fanout.relay.data import pushes
from fanout.relay.data.buffers import Table
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.wire.messages import DatasetInfo, Transform

RESULTS = Path(__file__).resolve().parent / "results" / "pushcost.json"
INFO = DatasetInfo(
    "agents",
    "id",
    {"id": "<i8", "x": "<f8", "y": "<f8", "kind": "<i4", "tick": "<i8", "ts": "<f8"},
    "space",
    ["x", "y"],
)
TRANSFORMS = {
    "none": None,
    "float32": Transform(precision="float32"),
    "project_xy": Transform(columns=["x", "y"]),
}


def measure(
    rows: int = 100_000, per_push: int = 150, pushes_per_round: int = 3000
) -> dict[str, float]:
    """CPU µs per push for each transform (best of 7 rounds)."""
    rng = np.random.default_rng(1)
    table = Table("id", INFO.columns)
    table.upsert(
        {
            "id": np.arange(rows),
            "x": rng.random(rows),
            "y": rng.random(rows),
            "kind": np.zeros(rows, np.int32),
            "tick": np.zeros(rows, np.int64),
            "ts": np.zeros(rows),
        },
        0,
    )
    positions = np.sort(rng.choice(rows, per_push, replace=False))
    out: dict[str, float] = {}
    for name, transform in TRANSFORMS.items():
        shape = resolve(transform, INFO)
        best = float("inf")
        for _ in range(7):
            started = time.process_time()
            for _ in range(pushes_per_round):
                pushes._rows(table, positions, shape, None)
            best = min(best, (time.process_time() - started) / pushes_per_round)
        out[f"{name}_cpu_us_per_push"] = round(best * 1e6, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    results = {**measure(), "machine": describe(), "calibration": calibrate()}
    write_results(results, None if args.no_save else RESULTS)


if __name__ == "__main__":
    main()
