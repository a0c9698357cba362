"""What ``bench/cluster.py``'s split case samples while the split runs: both relays' figures, the
publisher's micro-batches and the machine's load, with the wall-clock time."""

import asyncio
import contextlib
import itertools
import os
import time
from typing import Any

from fanout.launch import Child
from fanout.metrics import scrape

#: What the split case samples of each relay while the split runs (``fanout_relay_`` + name).
WATCHED = (
    "subscriptions",
    "primitives",
    "primitives_pending",
    "primitives_acquired_total",
    "curiosity_asked_total",
    "curiosity_asked_seqs_total",
    "pushes_total",
    "splits_total",
    "parts_received",
)


class Timeline:
    """Both relays' ``WATCHED`` figures, the publisher's micro-batches and the machine's load
    average every ``every`` s, with the wall-clock time: when the standby acquired its cells
    and asked the log, and the load the split ran under."""

    def __init__(self, publisher: Child, relays: dict[str, Child], every: float = 0.25) -> None:
        self.publisher, self.relays, self.every = publisher, relays, every
        self.samples: list[dict[str, Any]] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            for name, relay in self.relays.items():
                with contextlib.suppress(OSError):
                    got = await asyncio.to_thread(scrape, relay.url)
                    row = {key: got.get(f"fanout_relay_{key}", 0.0) for key in WATCHED}
                    self.samples.append({"at": time.time(), "relay": name, **row})
            with contextlib.suppress(OSError):
                got = await asyncio.to_thread(scrape, self.publisher.url)
                batches = sum(
                    value
                    for name, value in got.items()
                    if name.startswith("fanout_publisher_micro_batches")
                )
                self.samples.append({"at": time.time(), "micro_batches": batches})
            self.samples.append({"at": time.time(), "load": os.getloadavg()[0]})
            await asyncio.sleep(self.every)

    def first(self, relay: str, key: str, above: float, since: float = 0.0) -> float:
        """When ``relay``'s ``key`` was first seen above ``above`` (nan: never)."""
        for sample in self.samples:
            if sample.get("relay") == relay and sample["at"] >= since and sample[key] > above:
                return float(sample["at"])
        return float("nan")

    def last_change(self, relay: str, key: str, since: float) -> float:
        """When ``relay``'s ``key`` last changed after ``since`` (nan: never)."""
        rows = [s for s in self.samples if s.get("relay") == relay and s["at"] >= since]
        at = float("nan")
        for before, after in itertools.pairwise(rows):
            if after[key] != before[key]:
                at = float(after["at"])
        return at

    def value(self, relay: str, key: str, at: float) -> float:
        """``relay``'s ``key`` as last sampled at or before ``at``."""
        rows = [s for s in self.samples if s.get("relay") == relay and s["at"] <= at]
        return float(rows[-1][key]) if rows else float("nan")

    def micro_batch_seconds(self, start: float, end: float) -> float:
        """The publisher's mean interval between micro-batches from ``start`` to ``end``."""
        rows = [s for s in self.samples if "micro_batches" in s and start <= s["at"] <= end]
        if len(rows) < 2 or rows[-1]["micro_batches"] == rows[0]["micro_batches"]:
            return float("nan")
        count = float(rows[-1]["micro_batches"] - rows[0]["micro_batches"])
        return float(rows[-1]["at"] - rows[0]["at"]) / count

    def loads(self, start: float, end: float) -> list[float]:
        """The one-minute load averages sampled between ``start`` and ``end``."""
        return [s["load"] for s in self.samples if "load" in s and start <= s["at"] <= end]
