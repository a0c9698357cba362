"""The CPU price of glibc allocator settings (``fanout.allocator``) on the relay's hot path.

Run ``.venv/bin/python bench/allocator.py --pairs 4``: ``bench/relaycore.py`` (its workload:
2,000 subscribers, 100,000 moving entities) in a fresh process per trial, glibc's defaults and
each ``--setting`` (an environment variable glibc reads at start, the same as ``mallopt``;
default ``MALLOC_MMAP_THRESHOLD_=131072``, what ``RelayConfig.process.mmap_threshold`` sets)
alternating, so that a loaded machine weighs on both alike. Reports each trial's
``serve_cpu_us_per_push`` (thread CPU time, less disturbed by other processes than wall time),
the load beside it, and each setting's median ratio to the default of its pair. It prints one
JSON object and writes ``bench/results/allocator.json`` (not with ``--no-save``).
``malloc_trim(0)`` is not priced here: ``bench/memory.py`` reports each relay's trims.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results

RESULTS = Path(__file__).parent / "results" / "allocator.json"
MEASURES = ("serve_cpu_us_per_push", "move_cpu_us", "serve_us_per_push")


def trial(setting: str | None) -> dict[str, Any]:
    """One ``bench/relaycore.py`` run with ``setting`` (KEY=VALUE) in its environment."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if setting is not None:
        key, _, value = setting.partition("=")
        env[key] = value
    load = os.getloadavg()[0]
    command = [sys.executable, str(Path(__file__).parent / "relaycore.py"), "--no-save"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    found = json.loads(out[out.index("{") :])
    return {"setting": setting or "default", "load": round(load, 2)} | {
        key: found[key] for key in MEASURES
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pairs", type=int, default=4, help="rounds of default then settings")
    parser.add_argument(
        "--setting", action="append", help="KEY=VALUE (repeat; default MALLOC_MMAP_THRESHOLD_)"
    )
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    settings = args.setting or ["MALLOC_MMAP_THRESHOLD_=131072"]
    calibration, machine = calibrate(), describe()
    rounds = []
    for number in range(args.pairs):
        rows = [trial(None)] + [trial(setting) for setting in settings]
        print(json.dumps({"round": number, "trials": rows}), file=sys.stderr, flush=True)
        rounds.append(rows)
    ratios = {
        setting: [
            round(r[i + 1]["serve_cpu_us_per_push"] / r[0]["serve_cpu_us_per_push"], 3)
            for r in rounds
        ]
        for i, setting in enumerate(settings)
    }
    result = {
        "benchmark": "allocator",
        "workload": "bench/relaycore.py defaults (2,000 subscribers, 20 ticks)",
        "serve_cpu_ratio_to_default": ratios,
        "median_ratio": {s: round(statistics.median(v), 3) for s, v in ratios.items()},
        "rounds": rounds,
        "machine": machine,
        "calibration": calibration,
    }
    write_results(result, None if args.no_save else RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
