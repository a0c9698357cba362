"""Benchmark relay tiers (issue 27, deliverable 7 in part): the publisher's egress with 8 edge
relays on it (flat) against the same 8 edge relays behind 2 mid relays (tiered), the same
subscribers; and the latency the tier adds.

Run ``.venv/bin/python bench/cluster.py`` (``--runs``, ``--subscribers``, ``--window`` seconds,
``--agents``); it prints one JSON object and writes ``bench/results/cluster.json``. Everything
runs on this machine, sharing its cores, so it reports ratios and differences, not capacity:

* **publisher**: the real ``fanout publisher`` (``fanout.launch``, Spark ``local[*]``) with the
  built-in ``agents`` simulation; one publisher serves every run.
* **relays**: real ``fanout relay`` processes, both deployments side by side on the one
  publisher, so that they see the same micro-batches under the same load. Flat: ``EDGES`` relays
  with ``--publisher`` (named ``flat*``). Tiered: ``MIDS`` relays with ``--publisher
  --serve-relays`` (``mid*``) and ``EDGES`` edge relays with ``--upstream`` (``edge*``), each
  mid relay serving ``EDGES / MIDS`` of them. They are started for each run and stopped after.
* **subscribers**: ``--subscribers`` box views (seeded: sides 50 to 150 in the 1,000 x 1,000
  world) on each deployment, spread over its edge relays round robin as a load balancer would,
  mode ``latest`` at 10 pushes/s, from this process (``fanout.client``).

Per run, once every view had its first push and ``SETTLE`` seconds more, a window of
``--window`` seconds measures what the publisher sent to each deployment's relays
(``fanout_publisher_relay_bytes_sent_total`` by relay name: the flat edges, or the mid relays),
per micro-batch; each update's latency from its tick's wall-clock time at the publisher to its
arrival here (p50, p99); and, for each view and tick both deployments delivered, how much later
the tiered one arrived (``tier_latency_*_ms``: the hop a tier adds, paired tick by tick). The
results are the median of ``--runs`` runs with their spread (min, max); each run's own figures
are kept under ``runs``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from fanout.client import LiveView, connect
from fanout.launch import Child, start
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "cluster.json"
EDGES = 8
MIDS = 2
SETTLE = 5.0
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


@contextlib.asynccontextmanager
async def deployment(
    publisher: Child, logs: Path
) -> AsyncIterator[tuple[list[Child], list[Child]]]:
    """Both deployments side by side on one publisher; yields (flat edges, tiered edges)."""
    started: list[Child] = []

    async def relay(name: str, *args: str) -> Child:
        child = await start("relay", [*args, "--port", "0", "--name", name], logs / f"{name}.log")
        started.append(child)
        return child

    try:
        flat = [await relay(f"flat{e}", "--publisher", publisher.url) for e in range(EDGES)]
        mids = [
            await relay(f"mid{m}", "--publisher", publisher.url, "--serve-relays")
            for m in range(MIDS)
        ]
        tiered = [await relay(f"edge{e}", "--upstream", mids[e % MIDS].url) for e in range(EDGES)]
        yield flat, tiered
    finally:
        for child in reversed(started):
            await child.stop()


def counters(publisher: Child) -> dict[str, float]:
    """The publisher's bytes sent to the flat edges, to the mid relays, and its micro-batches."""
    samples = scrape(publisher.url)
    out = {"flat": 0.0, "tiered": 0.0, "micro_batches": 0.0}
    for name, value in samples.items():
        if name.startswith("fanout_publisher_relay_bytes_sent_total"):
            out["flat" if 'name="flat' in name else "tiered"] += value
        elif name.startswith("fanout_publisher_micro_batches"):
            out["micro_batches"] += value
    return out


class Arrivals:
    """When each view's update of each tick arrived (wall clock), and its latency."""

    def __init__(self) -> None:
        self.at: dict[tuple[int, int], float] = {}
        self.latencies: list[float] = []
        self.measuring = False

    async def drain(self, index: int, view: LiveView) -> None:
        async for update in view:
            if self.measuring and not update.full:
                self.at[(index, update.tick)] = update.received_at
                self.latencies.append((update.received_at - update.tick_time) * 1000)


async def run(publisher: Child, views: list[Box], window: float, logs: Path) -> dict[str, Any]:
    """One run: both deployments, the same views on each, one window measured."""
    async with deployment(publisher, logs) as (flat, tiered), contextlib.AsyncExitStack() as stack:
        sides = {}
        for side, edges in (("flat", flat), ("tiered", tiered)):
            clients = [await stack.enter_async_context(connect(edge.url)) for edge in edges]
            sides[side] = [
                await clients[i % len(clients)].subscribe(box, rate=10)
                for i, box in enumerate(views)
            ]
        everything = sides["flat"] + sides["tiered"]
        await asyncio.wait_for(asyncio.gather(*(v.wait_updates(1) for v in everything)), 300)
        await asyncio.sleep(SETTLE)
        arrivals = {side: Arrivals() for side in sides}
        tasks = [
            asyncio.create_task(arrivals[side].drain(i, view))
            for side, live in sides.items()
            for i, view in enumerate(live)
        ]
        before = await asyncio.to_thread(counters, publisher)
        for side in arrivals.values():
            side.measuring = True
        await asyncio.sleep(window)
        for side in arrivals.values():
            side.measuring = False
        after = await asyncio.to_thread(counters, publisher)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    batches = max(after["micro_batches"] - before["micro_batches"], 1)
    flat_at, tiered_at = arrivals["flat"].at, arrivals["tiered"].at
    extra = [(tiered_at[k] - flat_at[k]) * 1000 for k in flat_at.keys() & tiered_at.keys()]
    result: dict[str, Any] = {
        "micro_batches": after["micro_batches"] - before["micro_batches"],
        "egress_flat_bytes": (after["flat"] - before["flat"]) / batches,
        "egress_tiered_bytes": (after["tiered"] - before["tiered"]) / batches,
        "paired_updates": len(extra),
    }
    result["egress_ratio"] = result["egress_tiered_bytes"] / max(result["egress_flat_bytes"], 1)
    for side, seen in arrivals.items():
        result[f"latency_{side}_p50_ms"] = _percentile(seen.latencies, 50)
        result[f"latency_{side}_p99_ms"] = _percentile(seen.latencies, 99)
    result["tier_latency_p50_ms"] = _percentile(extra, 50)
    result["tier_latency_p99_ms"] = _percentile(extra, 99)
    return result


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="fanout-cluster-"))
    views = boxes(args.subscribers)
    publisher = await start(
        "publisher",
        ["--port", "0", "--state-dir", str(logs / "publisher"), "--agents", str(args.agents)],
        logs / "publisher.log",
    )
    runs = []
    try:
        for _ in range(args.runs):
            runs.append(await run(publisher, views, args.window, logs))
    finally:
        await publisher.stop()
    keys = [
        "egress_flat_bytes",
        "egress_tiered_bytes",
        "egress_ratio",
        "latency_flat_p50_ms",
        "latency_tiered_p50_ms",
        "tier_latency_p50_ms",
        "tier_latency_p99_ms",
    ]
    return {
        "edges": EDGES,
        "mids": MIDS,
        "subscribers_per_deployment": args.subscribers,
        "agents": args.agents,
        "window_seconds": args.window,
        "runs": runs,
        **{key: spread([run[key] for run in runs]) for key in keys},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    result = asyncio.run(bench(args))
    write_results(
        {**result, "machine": describe(), "calibration": calibration},
        None if args.no_save else RESULTS,
    )


if __name__ == "__main__":
    main()
