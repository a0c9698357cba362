"""Compare two checkouts of fanout on one benchmark, in one run, alternating (an A/B).

Run ``.venv/bin/python bench/checkouts.py --base ../fanout-old --runs 5 --measure
serve_us_per_push --measure move_us -- relaycore.py --no-save``: each round runs the benchmark
script (a path under each checkout's ``bench/``) once from the base checkout and once from this
one, in alternating order (so that neither always runs first on a machine whose load drifts),
with the same interpreter (this one) and each checkout's own sources first on ``PYTHONPATH``
(their compiled kernels must be built in place: ``make setup`` in each). The last line of a
benchmark's output is its JSON object; ``--measure`` names the numbers compared (a dotted path
into that object, e.g. ``trials.0.relay_cpu_us_per_push``).

Prints one JSON object: per checkout (its commit) and measure the median of the runs and the
spread ((max - min) / median), ``ratio`` = this checkout's median / the base's (below 1:
this one is smaller, e.g. faster) and ``paired_ratio``, the median of each round's own ratio
(the two runs of a round share the machine's load of that moment); the machine and a calibration
score measured in the same run. ``--base-args`` and ``--this-args`` add arguments to one side
only: ``--base . --base-args=--loop=asyncio`` compares two switches of this one checkout.
Writes ``bench/results/checkouts-<script>.json`` (``--name``: ``checkouts-<name>.json``) unless
``--no-save``.
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

HERE = Path(__file__).resolve().parent
THIS = HERE.parent


def commit(checkout: Path) -> str:
    """The checkout's commit (short), with ``+`` if it has uncommitted changes (besides
    ``bench/results/``, which the benchmark itself may write)."""
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dirty = subprocess.run(
        [
            *("git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"),
            *("--", ".", ":!bench/results"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return head + ("+" if dirty else "")


def run(checkout: Path, script: list[str]) -> dict[str, Any]:
    """One run of the benchmark from ``checkout``; its JSON object (the output's last one)."""
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    path = checkout / "bench" / script[0]
    done = subprocess.run(
        [sys.executable, str(path), *script[1:]],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{path} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    start = done.stdout.rfind("\n{")
    result: dict[str, Any] = json.loads(done.stdout[start + 1 if start >= 0 else 0 :])
    return result


def pick(result: Any, path: str) -> float:
    """The number at a dotted path (``trials.0.p99_ms``) of a benchmark's JSON object."""
    for part in path.split("."):
        result = result[int(part)] if isinstance(result, list) else result[part]
    return float(result)


def summary(values: list[float]) -> dict[str, Any]:
    """Median, spread and the values themselves."""
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median else 0.0
    return {"median": round(median, 3), "spread": round(spread, 3), "runs": values}


def main() -> None:
    """Parse the arguments, run the rounds, print and save the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout compared with")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--measure", action="append", required=True, help="a dotted JSON path")
    parser.add_argument("--base-args", default="", help="more arguments for the base's runs")
    parser.add_argument("--this-args", default="", help="more arguments for this one's runs")
    parser.add_argument("--name", help="results file checkouts-NAME.json (default: the script)")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    args = parser.parse_args()
    script = [part for part in args.script if part != "--"] if args.script else []
    if not script:
        parser.error("name the benchmark script after --, e.g. -- relaycore.py")
    calibration = calibrate()
    checkouts = {"base": args.base.resolve(), "this": THIS}
    extra = {"base": args.base_args.split(), "this": args.this_args.split()}
    values: dict[str, dict[str, list[float]]] = {
        name: {m: [] for m in args.measure} for name in checkouts
    }
    for round_ in range(args.runs):
        order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
        for name in order:
            result = run(checkouts[name], [*script, *extra[name]])
            for measure in args.measure:
                values[name][measure].append(pick(result, measure))
            print(f"round {round_ + 1} {name}: {json.dumps(values[name])}", file=sys.stderr)
    compared: dict[str, dict[str, Any]] = {
        name: {"commit": commit(path), **{m: summary(values[name][m]) for m in args.measure}}
        for name, path in checkouts.items()
    }
    ratio = {
        m: divided(compared["this"][m]["median"], compared["base"][m]["median"])
        for m in args.measure
    }
    paired = {m: paired_ratio(values["this"][m], values["base"][m]) for m in args.measure}
    name = args.name or Path(script[0]).stem
    write_results(
        {
            "script": script,
            "args": extra,
            "runs": args.runs,
            "checkouts": compared,
            "ratio": ratio,
            "paired_ratio": paired,
            "machine": describe(),
            "calibration": calibration,
        },
        None if args.no_save else HERE / "results" / f"checkouts-{name}.json",
    )


def divided(this: float, base: float) -> float | None:
    """``this / base``, rounded; None where the base is 0 (a measure such as the share of
    ticks delivered, 0 in a trial that failed: no ratio, the runs are still written)."""
    return round(this / base, 3) if base else None


def paired_ratio(this: list[float], base: list[float]) -> float | None:
    """The median of each round's own ratio, over the rounds whose base is not 0."""
    ratios = [t / b for t, b in zip(this, base, strict=True) if b]
    return round(statistics.median(ratios), 3) if ratios else None


if __name__ == "__main__":
    main()
