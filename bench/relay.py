"""Benchmark one relay process: 100,000 moving entities, N subscribers with moving box views.

Run ``.venv/bin/python bench/relay.py`` (``--quick`` for a short run; ``--only N`` one trial);
it prints one JSON object and writes ``bench/results/relay.json``. A scripted publisher
(``fanout.testing.world``, 10 ticks/s), the real relay in a process of its own and N picows
subscribers in ``--processes`` client processes share this machine's cores. A trial passes when
every subscriber got >= 95% of the ticks and p99 tick-swap-to-receipt <= 100 ms, none dropped;
``max_subscribers`` is the largest N that passes (doubled from ``--start``, then bisected), and
a last pair of trials compares distinct views with groups of ``--group`` sharing a view.
``--workers W`` also searches ``fanout relay --workers 1`` and ``--workers W`` run as commands,
latency from the publisher's send (their ratio: ``all_workers_ratio``; ``--alternate K``: K
pairs at ``--only N``, to ``bench/results/relay-workers.json``). docs/benchmarks/relay.md says what
each figure is and what it found; the parts: ``relayclients``, ``relayinstrument``,
``relaytrial``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.world import (
    TICK_RATE,
    VIEW_SIDE,
)
from relayclients import PUSH_RATE
from relaytrial import (
    ENTITIES,
    TARGET_DELIVERED,
    TARGET_P99_MS,
    Trial,
    run_trial,
    summary,
)

RESULTS = Path(__file__).parent / "results" / "relay.json"
#: ``--only N --workers W --alternate K``'s results.
WORKERS_RESULTS = RESULTS.with_name("relay-workers.json")


def search(args: argparse.Namespace, workers: int | None = None) -> tuple[int, list[Trial]]:
    """Double N until a trial fails, then bisect between the last pass and the first fail
    (``workers``: as ``run_trial``'s)."""
    trials: list[Trial] = []

    def trial(n: int) -> bool:
        result = run_trial(n, args, workers=workers)
        trials.append(result)
        print(json.dumps(summary(result)), file=sys.stderr, flush=True)
        return result.passed

    best, worst = 0, None
    n = args.start
    while n <= args.max:
        if not trial(n):
            worst = n
            break
        best = n
        n *= 2
    while worst is not None and worst - best > max(args.resolution * best, 1):
        middle = (best + worst) // 2
        if trial(middle):
            best = middle
        else:
            worst = middle
    return best, trials


def alternate(args: argparse.Namespace) -> dict[str, Any]:
    """``--only N --workers W --alternate K``: K pairs of trials at N, 1 worker then W, both run
    as the command (``CommandRelay``); their figures side by side and the medians' ratios."""
    arms: dict[int, list[Trial]] = {1: [], args.workers: []}
    for _ in range(args.alternate):
        for workers, trials in arms.items():
            trial = run_trial(args.only, args, group=args.group, workers=workers)
            trials.append(trial)
            print(json.dumps(summary(trial)), file=sys.stderr, flush=True)

    def median(workers: int, name: str) -> float:
        return float(np.median([getattr(t, name) for t in arms[workers]]))

    figures = ("relay_cpu", "relay_cpu_us_per_push", "p99_ms", "delivered_min", "pushes_per_s")
    medians = {w: {name: round(median(w, name), 3) for name in figures} for w in arms}
    return {
        "subscribers": args.only,
        "group": args.group,
        "workers": args.workers,
        "entities": args.entities,
        "moving": args.moving,
        "note": "each trial runs the relay as `fanout relay --workers W` (W = 1 or --workers);"
        " p99_ms is from the publisher's send; relay_cpu is the leader's and its workers'",
        "medians": medians,
        "passed": {w: [t.passed for t in arms[w]] for w in arms},
        "cpu_per_push_ratio": round(
            medians[args.workers]["relay_cpu_us_per_push"] / medians[1]["relay_cpu_us_per_push"],
            3,
        ),
        "trials": {w: [summary(t) for t in arms[w]] for w in arms},
        "machine": describe(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=ENTITIES)
    parser.add_argument(
        "--moving",
        type=float,
        default=1.0,
        help="fraction of the entities that move (default 1: every one, every tick; 0.001: a"
        " mostly idle world, where most views see no row change in a tick)",
    )
    parser.add_argument("--start", type=int, default=125, help="first N (default: 125)")
    parser.add_argument("--max", type=int, default=4096, help="largest N tried (default: 4096)")
    parser.add_argument("--resolution", type=float, default=0.125, help="bisect to this fraction")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--measure", type=float, default=10.0)
    parser.add_argument("--group", type=int, default=8, help="subscribers per shared view")
    parser.add_argument("--logs", default="/tmp/fanout-bench-relay", help="relay logs go here")
    parser.add_argument("--quick", action="store_true", help="short windows, coarse search")
    parser.add_argument(
        "--profile", action="store_true", help="profile the relay (cProfile files next to logs)"
    )
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the relay's event loop"
    )
    parser.add_argument(
        "--spy", help="py-spy the relay over the window into this file (.txt collapsed, .svg)"
    )
    parser.add_argument("--only", type=int, help="run one trial with this N and print it")
    parser.add_argument(
        "--workers",
        type=int,
        help="run the relay as `fanout relay --workers N` (leader and workers, measured from"
        " outside, latency from the publisher's send); a full run adds"
        " max_subscribers_all_workers, searched with N workers (default: the relay"
        " instrumented in one process)",
    )
    parser.add_argument(
        "--alternate",
        type=int,
        help="with --only and --workers: this many pairs of trials, 1 worker then --workers",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=WORKERS_RESULTS,
        help=f"where --alternate writes its results (default: {WORKERS_RESULTS.name})",
    )
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.measure, args.resolution = 2.0, 4.0, 0.5
    if args.only and args.alternate:
        calibration = calibrate()
        write_results({**alternate(args), "calibration": calibration}, args.output)
        return
    if args.only:
        trial = run_trial(args.only, args, group=args.group, workers=args.workers)
        print(json.dumps(summary(trial), indent=2))
        return
    calibration = calibrate()
    best, trials = search(args)
    all_workers = one_worker = None
    if args.workers is not None and args.workers > 1:
        # Both as the command, latency from the publisher's send: the ratio's like for like
        # (``max_subscribers`` is the instrumented process's, its latency from its own swap).
        one_worker, one_trials = search(args, workers=1)
        all_workers, worker_trials = search(args, workers=args.workers)
        trials += one_trials + worker_trials
    compare_at = max(best, args.start)
    distinct = run_trial(compare_at, args, group=1)
    shared = run_trial(compare_at, args, group=args.group)
    top = next((t for t in trials if (t.subscribers, t.workers, t.passed) == (best, 1, True)), None)
    results: dict[str, Any] = {
        "max_subscribers": best,
        # with --workers N > 1 (latency from the publisher's send, CPU of leader and workers)
        "max_subscribers_all_workers": all_workers,
        "max_subscribers_one_worker_from_send": one_worker,
        "all_workers_ratio": round(all_workers / one_worker, 3)
        if all_workers and one_worker
        else None,
        "workers": args.workers,
        "p99_ms": round(top.p99_ms, 1) if top else None,
        "bytes_per_update": round(top.bytes_per_update, 1) if top else None,
        "target_max_subscribers": 2000,
        "entities": args.entities,
        "moving": args.moving,
        "tick_rate": TICK_RATE,
        "push_rate": PUSH_RATE,
        "view_side": VIEW_SIDE,
        "client_processes": args.processes,
        "warmup_s": args.warmup,
        "measure_s": args.measure,
        "criteria": {"delivered_min": TARGET_DELIVERED, "p99_ms_max": TARGET_P99_MS},
        "trials": [summary(t) for t in trials],
        "sharing": {
            "subscribers": compare_at,
            "group": args.group,
            "distinct_views": summary(distinct),
            "shared_views": summary(shared),
            "relay_cpu_us_per_push_distinct": round(distinct.relay_cpu_us_per_push, 1),
            "relay_cpu_us_per_push_shared": round(shared.relay_cpu_us_per_push, 1),
            "pump_cpu_us_per_push_distinct": round(distinct.pump_cpu_us_per_push, 1),
            "pump_cpu_us_per_push_shared": round(shared.pump_cpu_us_per_push, 1),
        },
        "machine": describe(),
        "calibration": calibration,
    }
    write_results(results, RESULTS)


if __name__ == "__main__":
    main()
