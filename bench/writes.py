"""Writes at the speed of the wire (issue 40): the time from a write made through a relay to a
``latest`` watcher on that relay holding it (the live path), next to a ``confirmed`` watcher of
the same view (the publisher's micro-batch path), in one run.

One real deployment on loopback: ``fanout publisher`` with a ``topic`` dataset fed by producers
(Spark ``local[*]``) and two ``fanout relay``s on it. A writer writes ``--writes`` rows one after
the other through relay A (``Subscriber.publish``, each returning once durable), each a topic of
its own; a subscriber on A holds ``live/#`` twice, ``latest`` and ``confirmed``, one on relay B
``latest``. Per write: ``same_relay`` is the time from the call to A's ``latest`` view holding it,
``other_relay`` to B's (the publisher passes it on once durable: ``Written``), ``durable`` to
the call's return (the publisher's answer, once the write is in its log), ``confirmed`` to
the ``confirmed`` view (the micro-batches take the writes as they come). Afterwards: ``lost``
writes the confirmed view never held, ``duplicated`` updates of any view that sent a value it
already held, ``corrected`` rows either relay pushed to undo what it showed (``/metrics``).
Prints one JSON object last (median of ``--runs`` runs, spread, machine, calibration); writes it
to ``bench/results/writes.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fanout.client import LiveView, connect
from fanout.client.subscriber import Update
from fanout.launch import Children
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.deployment import publisher_and_relay
from fanout.testing.machine import describe, write_results
from fanout.views.topic import parse as topic

RESULTS = Path(__file__).parent / "results" / "writes.json"
CONFIG = """
[datasets.sensors]
key = "topic"
schema = { topic = "string", value = "double" }
index = "topic"
source = "ingest"
"""


class Arrivals:
    """When each (topic, value) first reached a view, and values sent to it again."""

    def __init__(self, view: LiveView) -> None:
        self.view = view
        self.seen: dict[tuple[str, float], float] = {}
        self.duplicated = 0
        self._arrived = asyncio.Condition()
        self.task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        held: dict[str, float] = {}
        async for update in self.view:
            now = time.perf_counter()
            for topic_name, value in sent(update):
                if held.get(topic_name) == value and not update.full:
                    self.duplicated += 1
                held[topic_name] = value
                self.seen.setdefault((topic_name, value), now)
            async with self._arrived:
                self._arrived.notify_all()

    async def at(self, topic_name: str, value: float, timeout: float = 120.0) -> float:
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: (topic_name, value) in self.seen)
        return self.seen[(topic_name, value)]


def sent(update: Update) -> list[tuple[str, float]]:
    """The (topic, value) rows an update entered or updated."""
    out = []
    for rows in (update.entered, update.updated):
        if rows:
            out += zip(rows["topic"].tolist(), rows["value"].tolist(), strict=True)
    return out


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def one_run(relays: list[str], args: argparse.Namespace, first: int) -> dict[str, Any]:
    here, there = relays
    async with (
        connect(here) as subscriber,
        connect(here) as writer,
        connect(there) as watcher,
    ):
        live = await subscriber.subscribe(topic("live/#"), dataset="sensors", rate=1000.0)
        confirmed = await subscriber.subscribe(
            topic("live/#"), dataset="sensors", rate=1000.0, confirmed=True
        )
        away = await watcher.subscribe(topic("live/#"), dataset="sensors", rate=1000.0)
        for view in (live, confirmed, away):  # their first pushes
            while not view.updates:
                await view.wait_updates()
        fast, slow, other = Arrivals(live), Arrivals(confirmed), Arrivals(away)
        before = [await asyncio.to_thread(scrape, url) for url in relays]
        same_relay, other_relay, durable, started = [], [], [], {}
        for number in range(first, first + args.writes):
            name, value = f"live/{number}", float(number)  # a topic of its own: never overridden
            started[name] = time.perf_counter()
            await writer.publish("sensors", [{"topic": name, "value": value}])
            durable.append((time.perf_counter() - started[name]) * 1000)
            same_relay.append((await fast.at(name, value) - started[name]) * 1000)
            other_relay.append((await other.at(name, value) - started[name]) * 1000)
        confirmed_ms, lost = [], 0
        for name, at in started.items():
            try:
                arrived = await slow.at(name, float(name.split("/")[1]), args.timeout)
                confirmed_ms.append((arrived - at) * 1000)
            except TimeoutError:
                lost += 1
        after = [await asyncio.to_thread(scrape, url) for url in relays]
        for arrivals in (fast, slow, other):
            arrivals.task.cancel()

    def counted(name: str) -> float:
        return sum(a.get(name, 0.0) - b.get(name, 0.0) for a, b in zip(after, before, strict=True))

    return {
        "same_relay_p50_ms": round(statistics.median(same_relay), 2),
        "same_relay_p99_ms": round(percentile(same_relay, 0.99), 2),
        "other_relay_p50_ms": round(statistics.median(other_relay), 2),
        "other_relay_p99_ms": round(percentile(other_relay, 0.99), 2),
        "durable_p50_ms": round(statistics.median(durable), 2),
        "confirmed_p50_ms": round(statistics.median(confirmed_ms), 1) if confirmed_ms else None,
        "confirmed_p99_ms": round(percentile(confirmed_ms, 0.99), 1) if confirmed_ms else None,
        "corrected": int(counted("fanout_relay_live_corrected_total")),
        "deduplicated": int(counted("fanout_relay_live_deduplicated_total")),
        "lost": lost,
        "duplicated": fast.duplicated + slow.duplicated + other.duplicated,
        "passed": int(counted("fanout_relay_live_passed_total")),
        "late": int(counted("fanout_relay_live_late_total")),
        "writes": args.writes,
    }


async def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    async with Children() as children:
        publisher, relay = await publisher_and_relay(children, root, CONFIG)
        other = await children.start(
            "relay", ["--publisher", publisher.url, "--port", "0"], root / "other-relay.log"
        )
        runs = []
        try:
            for run in range(args.runs):
                runs.append(await one_run([relay.url, other.url], args, 1 + run * args.writes))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
        finally:
            await other.stop()
            await relay.stop()
            await publisher.stop()
    summary: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs if run[key] is not None]
        if key == "writes" or not values:
            continue
        summary[key] = statistics.median(values)
        summary[f"{key}_spread"] = [min(values), max(values)]
    return {**summary, "load_average_1m_end": round(os.getloadavg()[0], 2), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writes", type=int, default=200, help="writes per run")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to confirm a write")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    with tempfile.TemporaryDirectory(prefix="fanout-bench-writes-") as root:
        result = asyncio.run(bench(args, Path(root)))
    write_results(
        {**result, "machine": describe(), "calibration": calibration},
        None if args.no_save else RESULTS,
    )


if __name__ == "__main__":
    main()
