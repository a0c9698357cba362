"""Benchmark relay tiers and splits (issue 27, deliverable 7): the publisher's egress with 8 edge
relays on it (flat) against the same 8 edge relays behind 2 mid relays (tiered), the same
subscribers; the latency the tier adds; and the time and pause to move subscribers in a split.

Run ``.venv/bin/python bench/cluster.py`` (``--runs``, ``--subscribers``, ``--window`` seconds,
``--agents``, ``--split-subscribers``, ``--only-split``); it prints one JSON object and writes
``bench/results/cluster.json`` (``--only-split``: ``cluster_split.json``). Everything runs on
this machine, sharing its cores (a real ``fanout publisher`` and real ``fanout relay``
processes), so it reports ratios and differences, not capacity: the median of ``--runs`` runs
with their spread, each run's load average beside it. docs/benchmarks/cluster.md says how each
figure is measured and what it found; the parts: ``clustertiers`` (the tier case),
``clustersplit`` and ``clustertimeline`` (the split case), ``tierhops`` (the hop's stages).
"""

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from clustersplit import SPLIT_DWELL, split_run
from clustertiers import EDGES, MIDS, run
from fanout.launch import Child, running
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "cluster.json"
SPLIT_RESULTS = Path(__file__).parent / "results" / "cluster_split.json"
WORLD = 1000.0


def boxes(count: int, seed: int = 27) -> list[Box]:
    """``count`` seeded boxes, sides 50 to 150, inside the world."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        side = rng.uniform(50, 150)
        x, y = rng.uniform(0, WORLD - side, 2)
        out.append(Box((float(x), float(y)), (float(x + side), float(y + side))))
    return out


#: What ``progress`` says of each tier run and each split run.
TIER_SAID = (
    "relay_nice",
    "subscriber_nice",
    "tier_latency_p50_ms",
    "tier_latency_p99_ms",
    "tier_edge_hop_p99_ms",
    "load_average",
)
SPLIT_SAID = ("split_moved", "split_pause_p50_ms", "split_pause_p99_ms", "split_load_average")


def progress(what: str, result: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Say on stderr that a run ended, with its headline figures (the JSON comes at the end)."""
    said = {key: result.get(key) for key in keys}
    print(f"{dt.datetime.now(dt.UTC):%H:%M:%S} {what}: {json.dumps(said)}", file=sys.stderr)


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max."""
    return {"median": float(statistics.median(values)), "min": min(values), "max": max(values)}


def publishing(logs: Path, agents: int) -> contextlib.AbstractAsyncContextManager[Child]:
    """A real publisher whose state (and log) is under ``logs``, stopped when the block ends."""
    args = ["--port", "0", "--state-dir", str(logs / "publisher"), "--agents", str(agents)]
    return running("publisher", args, logs / "publisher.log")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="fanout-cluster-"))
    views = boxes(args.subscribers)
    runs, splits = [], []
    if not args.only_split:
        async with publishing(logs, args.agents) as publisher:
            for number in range(args.runs):
                # --relay-nice, --subscriber-nice: every second run (B) at those priorities.
                arm_b = number % 2 == 1
                runs.append(
                    await run(
                        publisher,
                        views,
                        args.window,
                        logs,
                        args.subscriber_processes,
                        number=number,
                        nice=args.relay_nice if arm_b else 0,
                        subscriber_nice=args.subscriber_nice if arm_b else 0,
                    )
                )
                progress(f"tier run {number + 1}/{args.runs}", runs[-1], TIER_SAID)
    # Each split run on a publisher of its own: its audit reads a log holding only that run
    # (one publisher's log, grown over runs, outlived its retention while a run audited).
    for number in range(args.runs if args.split_subscribers else 0):
        here = logs / f"split-{number}"
        async with publishing(here, args.agents) as publisher:
            split_views = boxes(args.split_subscribers, seed=28)
            splits.append(await split_run(publisher, split_views, here, number))
        progress(f"split run {number + 1}/{args.runs}", splits[-1], SPLIT_SAID)
    return {
        "edges": EDGES,
        "mids": MIDS,
        "subscribers_per_deployment": args.subscribers,
        "agents": args.agents,
        "window_seconds": args.window,
        "runs": runs,
        "split_subscribers": args.split_subscribers,
        "split_dwell_seconds": SPLIT_DWELL,
        "split_runs": splits,
        **summary(runs, splits),
    }


#: The figures of each tier run summarised over the runs (median, min, max) ...
KEYS = (
    "egress_flat_bytes",
    "egress_tiered_bytes",
    "egress_ratio",
    "latency_flat_p50_ms",
    "latency_tiered_p50_ms",
    "tier_latency_p50_ms",
    "tier_latency_p99_ms",
    "tier_edge_hop_p50_ms",
    "tier_edge_hop_p99_ms",
)
#: ... and of each split run.
SPLIT_KEYS = (
    "split_moved",
    "split_views_ended",
    "split_seconds",
    "split_pause_p50_ms",
    "split_pause_p99_ms",
    "split_pause_stayed_p50_ms",
    "split_pause_stayed_p99_ms",
    "split_phase_quiet_p50_ms",
    "split_phase_rehome_p50_ms",
    "split_phase_rehome_p99_ms",
    "split_phase_first_p50_ms",
    "split_phase_first_p99_ms",
    "split_phase_late_p50_ms",
    "split_phase_late_p99_ms",
    "split_behind",
    "split_handover_ms",
    "split_micro_batch_seconds",
    "lost",
    "duplicated",
    "reordered",
)


def summary(runs: list[dict[str, Any]], splits: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' figures as median, min and max, with the highest load average each run saw
    (``load_average_max``, ``split_load_average_max``); with ``--relay-nice`` or
    ``--subscriber-nice``, each arm's alike (``by_nice``: ``relays=N,subscribers=M``)."""
    out: dict[str, Any] = {}
    if runs:
        out |= {key: spread([run[key] for run in runs]) for key in KEYS}
        out["load_average_max"] = spread([run["load_average"]["max"] for run in runs])
        arms = sorted({(run["relay_nice"], run["subscriber_nice"]) for run in runs})
        if len(arms) > 1:
            out["by_nice"] = {
                f"relays={relays},subscribers={subs}": summary(
                    [r for r in runs if (r["relay_nice"], r["subscriber_nice"]) == (relays, subs)],
                    [],
                )
                for relays, subs in arms
            }
    if splits:
        out |= {key: spread([split[key] for split in splits]) for key in SPLIT_KEYS}
        out["split_load_average_max"] = spread(
            [split["split_load_average"]["max"] for split in splits]
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument(
        "--split-subscribers",
        type=int,
        default=2000,
        help="every views on the relay that splits (about half move); 0: no split case",
    )
    parser.add_argument(
        "--only-split",
        action="store_true",
        help="run the split case alone (results to bench/results/cluster_split.json)",
    )
    parser.add_argument(
        "--subscriber-processes",
        type=int,
        choices=(1, 2),
        default=2,
        help="the tier runs' subscribers: 2, a process per deployment; 1, both in this one",
    )
    parser.add_argument(
        "--relay-nice",
        type=int,
        default=0,
        help="A/B: every second tier run starts its relays at this priority (e.g. -5; root)",
    )
    parser.add_argument(
        "--subscriber-nice",
        type=int,
        default=0,
        help="A/B: every second tier run puts its subscriber processes at this priority",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    result = asyncio.run(bench(args))
    write_results(
        {**result, "machine": describe(), "calibration": calibration},
        None if args.no_save else SPLIT_RESULTS if args.only_split else RESULTS,
    )


if __name__ == "__main__":
    main()
