"""Compare Python builds on the relay's core: ``bench/relaycore.py`` under each, in one run.

Run ``.venv/bin/python bench/interpreters.py --python A/bin/python --python B/bin/python``
(each a virtual environment with ``requirements.lock`` installed; ``--runs N``, default 5); it
prints one JSON object and writes ``bench/results/relaycore-interpreters.json``. The first
``--python`` is the baseline the others are compared with.

The relay's event loop is plain Python (scheduling, coverage planning, framing; the compiled
kernels cut and pack rows), so how the interpreter itself was compiled shows in every push.
Each round runs, for each interpreter in turn (the order reversed every other round, so that
neither always runs first on a machine whose load drifts):

* ``loop_s``: a plain Python loop (dict lookups, integer arithmetic, ``str``), the calibration:
  it measures the interpreter alone;
* ``bench/relaycore.py --no-save``: ``serve_us_per_push``, ``move_us``, ``subscribe_us``;
* with ``--relay N``, also one trial of ``bench/relay.py --only N --group 1``: the whole relay
  process over real sockets (asyncio, websockets, ingest), its publisher and its clients all
  under that interpreter: ``relay_cpu_us_per_push`` and ``pump_cpu_us_per_push`` (CPU time,
  which other processes on the machine do not inflate as they do latency) and ``p99_ms``.

Every interpreter imports fanout from this checkout's ``src/`` (``PYTHONPATH``), so all run the
same code and the same compiled kernels. Reported per measure: the median of the runs, their
minimum and maximum, and ``spread_pct``, (max - min) / median; ``speedup``: the baseline's
median over each interpreter's (above 1: faster than the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path
from typing import Any

from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "relaycore-interpreters.json"
MEASURES = ("loop_s", "serve_us_per_push", "move_us", "subscribe_us")
RELAY_MEASURES = ("relay_cpu_us_per_push", "pump_cpu_us_per_push", "p99_ms")
LOOP = """
import time

def work(n):
    total, seen = 0, {}
    for i in range(n):
        key = i % 97
        seen[key] = seen.get(key, 0) + i
        total += len(str(i)) if i & 1 else key
    return total

started = time.perf_counter()
work(2_000_000)
print(time.perf_counter() - started)
"""


def run_once(python: str, subscribers: int, ticks: int) -> dict[str, float]:
    """One calibration loop and one ``bench/relaycore.py`` run under ``python``."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    loop = subprocess.run(
        [python, "-c", LOOP], capture_output=True, text=True, check=True, env=env, timeout=600
    )
    core = subprocess.run(
        [
            *(python, str(HERE / "relaycore.py"), "--no-save"),
            *("--subscribers", str(subscribers), "--ticks", str(ticks)),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=1800,
    )
    result = json.loads(core.stdout)
    return {"loop_s": round(float(loop.stdout), 3), **{m: result[m] for m in MEASURES[1:]}}


def run_relay(python: str, subscribers: int) -> dict[str, float]:
    """One ``bench/relay.py`` trial of ``subscribers`` distinct views under ``python``."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    trial = subprocess.run(
        [python, str(HERE / "relay.py"), "--only", str(subscribers), "--group", "1"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=900,
    )
    result = json.loads(trial.stdout)
    return {m: result[m] for m in RELAY_MEASURES}


def summary(values: list[float]) -> dict[str, Any]:
    """Median, minimum, maximum and spread of one measure's runs."""
    median = statistics.median(values)
    return {
        "median": round(median, 3),
        "min": min(values),
        "max": max(values),
        "spread_pct": round((max(values) - min(values)) / median * 100, 1),
        "runs": values,
    }


def interpreter(python: str) -> dict[str, Any]:
    """What ``bench/interpreter.py`` says of ``python``: its build and whether it is optimized."""
    found = subprocess.run(
        [python, str(HERE / "interpreter.py")], capture_output=True, text=True, check=False
    )
    description: dict[str, Any] = json.loads(found.stdout)
    return {"python": python, **description}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python", action="append", required=True, help="an interpreter (repeat; first: baseline)"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per interpreter (default: 5)")
    parser.add_argument("--subscribers", type=int, default=2000)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument(
        "--relay", type=int, default=0, help="also a bench/relay.py trial of N subscribers"
    )
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    pythons: list[str] = args.python
    runs: dict[str, list[dict[str, float]]] = {python: [] for python in pythons}
    load = describe()
    calibration = calibrate()  # of the interpreter running this script
    for round_ in range(args.runs):
        for python in pythons if round_ % 2 == 0 else reversed(pythons):
            run = run_once(python, args.subscribers, args.ticks)
            if args.relay:
                run.update(run_relay(python, args.relay))
            runs[python].append(run)
    results: list[dict[str, Any]] = []
    names = MEASURES + RELAY_MEASURES if args.relay else MEASURES
    baseline = {m: statistics.median(r[m] for r in runs[pythons[0]]) for m in names}
    for python in pythons:
        measures = {m: summary([r[m] for r in runs[python]]) for m in names}
        speedup = {m: round(baseline[m] / measures[m]["median"], 2) for m in names}
        results.append({**interpreter(python), **measures, "speedup": speedup})
    machine = describe()
    machine["load_average_1m_at_start"] = load["load_average_1m"]
    write_results(
        {
            "subscribers": args.subscribers,
            "ticks": args.ticks,
            "relay_subscribers": args.relay,
            "runs": args.runs,
            "interpreters": results,
            "machine": machine,
            "calibration": calibration,
        },
        None if args.no_save else RESULTS,
    )


if __name__ == "__main__":
    main()
