"""Soak gapless delivery under faults: N random fault injections while ``every`` subscribers
follow box views, then an audit of every subscriber against the publisher's log (issue 5).

Run ``.venv/bin/python bench/soak.py --faults 10``; it prints one JSON object and writes
``bench/results/soak.json``.

Processes on this machine: the real publisher (Spark ``local[*]``, the ``agents`` simulation at 10
ticks/s), ``--relays`` real relays, and in this process ``--subscribers`` subscribers
(``fanout.client``, ``mode="every"``) with box views spread over the world, each on one relay.
Every ``--interval`` seconds one fault, drawn at random (seeded):

* ``kill_relay``: SIGKILL a relay, start it again on the same port 2 s later;
* ``stop_relay``: SIGSTOP a relay for 2-5 s, then SIGCONT;
* ``kill_publisher``: SIGKILL the publisher, start it again from its state directory on the same
  port (Spark restarts from its checkpoint; relays reconnect and resume).

A subscriber whose connection breaks moves to the next relay and resumes with its view (its
resume token), as ``fanout subscribe --relay A,B,C --mode every`` does. After the last fault the
run waits until every subscriber has reached the publisher's last logged seq, then audits each
one against the log (``fanout.testing.audit``):

* ``published``: seqs the publisher logged from the first to the last any subscriber received;
* ``delivered``: updates received (pushes and no-updates), over all subscribers;
* ``expected``: per subscriber, the seqs from its first to its last update, summed;
* ``lost`` / ``duplicated`` / ``reordered``: seqs never received, received twice, received after
  a later one; ``mismatched``: updates whose rows differ from the logged change; ``resyncs``:
  announced restarts (the log no longer held what a subscriber missed). All must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fanout.client import LiveView, SubscriptionError, Update, connect
from fanout.launch import Child, start
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.wait import NotYet, eventually
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "soak.json"
WORLD = 1000.0


class Follower:
    """An ``every`` subscriber that moves to the next relay when its connection breaks."""

    def __init__(self, box: Box, relays: list[str], first: int) -> None:
        self.box = box
        self.relays = relays
        self.turn = first
        self.view: LiveView | None = None
        self.updates: list[Update] = []
        self.moves = 0
        self.refusals: list[str] = []

    async def run(self) -> None:
        """Follow until cancelled."""
        while True:
            url = self.relays[self.turn % len(self.relays)]
            try:
                async with connect(url, name="soak") as subscriber:
                    self.view = await subscriber.subscribe(self.box, mode="every", resume=self.view)
                    async for update in self.view:
                        self.updates.append(update)
            except (OSError, SubscriptionError, TimeoutError) as exc:
                if isinstance(exc, SubscriptionError) and exc.code != "closed":
                    self.refusals.append(str(exc))
            self.turn += 1
            self.moves += 1
            await asyncio.sleep(0.5)

    @property
    def seq(self) -> int:
        """The last seq received."""
        return self.updates[-1].seq if self.updates else -1


class Deployment:
    """The publisher and relays, restartable on their ports."""

    def __init__(self, root: Path, agents: int, relays: int) -> None:
        self.root = root
        self.agents = agents
        self.count = relays
        self.publisher: Child | None = None
        self.relays: list[Child] = []
        self.port = 0

    async def start(self) -> None:
        self.publisher = await self._publisher(0)
        self.port = int(self.publisher.url.rsplit(":", 1)[1])
        for number in range(self.count):
            self.relays.append(await self._relay(number, 0))

    async def _publisher(self, port: int) -> Child:
        args = ["--port", str(port), "--state-dir", str(self.root / "publisher")]
        args += ["--agents", str(self.agents), "--log-level", "info"]
        return await start("publisher", args, self.root / "publisher.log")

    async def _relay(self, number: int, port: int) -> Child:
        url = f"ws://127.0.0.1:{self.port}"
        args = ["--publisher", url, "--port", str(port), "--name", f"relay-{number}"]
        return await start(
            "relay", [*args, "--log-level", "info"], self.root / f"relay-{number}.log"
        )

    async def kill_relay(self, number: int) -> None:
        relay = self.relays[number]
        relay.kill()
        await relay.process.wait()
        await asyncio.sleep(2.0)
        self.relays[number] = await self._relay(number, int(relay.url.rsplit(":", 1)[1]))

    async def stop_relay(self, number: int, seconds: float) -> None:
        relay = self.relays[number]
        relay.pause()
        await asyncio.sleep(seconds)
        relay.resume()

    async def kill_publisher(self) -> None:
        assert self.publisher is not None
        self.publisher.kill()
        await self.publisher.process.wait()
        self.publisher = await self._publisher(self.port)

    async def stop(self) -> None:
        for child in [*self.relays, *([self.publisher] if self.publisher else [])]:
            child.resume()
            await child.stop()


def last_logged(log: Path, epoch: int) -> int:
    with SqliteLog(log) as stored:
        bounds = stored.bounds("agents", epoch)
    return -1 if bounds is None else bounds[1]


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="fanout-soak-"))
    deployment = Deployment(root, args.agents, args.relays)
    await deployment.start()
    urls = [relay.url for relay in deployment.relays]
    followers = []
    for number in range(args.subscribers):
        x, y = rng.uniform(0, WORLD - args.side), rng.uniform(0, WORLD - args.side)
        box = Box((x, y), (x + args.side, y + args.side))
        followers.append(Follower(box, urls, number % len(urls)))
    tasks = [asyncio.create_task(f.run()) for f in followers]
    began = time.monotonic()
    faults: list[dict[str, Any]] = []
    try:
        await asyncio.sleep(args.interval)
        for _ in range(args.faults):
            kind = rng.choice(["kill_relay", "stop_relay", "kill_publisher"])
            number = rng.randrange(len(urls))
            at = round(time.monotonic() - began, 1)
            if kind == "kill_relay":
                await deployment.kill_relay(number)
                faults.append({"at_s": at, "fault": kind, "relay": number})
            elif kind == "stop_relay":
                seconds = rng.uniform(2.0, 5.0)
                await deployment.stop_relay(number, seconds)
                faults.append({"at_s": at, "fault": kind, "relay": number, "s": round(seconds, 1)})
            else:
                await deployment.kill_publisher()
                faults.append({"at_s": at, "fault": kind})
            print(json.dumps({"progress": faults[-1]}), file=sys.stderr, flush=True)
            await asyncio.sleep(args.interval)
        log = root / "publisher" / "log.db"
        epochs = [f.updates[0].epoch for f in followers if f.updates]
        if not epochs:
            raise SystemExit(
                "no subscriber received any update: the faults came faster than the publisher"
                " restarts (try a longer --interval)"
            )
        epoch = epochs[0]
        target = last_logged(log, epoch)
        # Those still behind after ``--settle`` seconds are counted, not waited for.
        with contextlib.suppress(NotYet):
            await eventually(
                lambda: min(f.seq for f in followers) >= target, timeout=args.settle, every=0.5
            )
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await deployment.stop()
    duration = time.monotonic() - began
    return report(args, followers, faults, log=log, target=target, duration=duration)


def report(
    args: argparse.Namespace,
    followers: list[Follower],
    faults: list[dict[str, Any]],
    *,
    log: Path,
    target: int,
    duration: float,
) -> dict[str, Any]:
    totals = {"delivered": 0, "expected": 0, "lost": 0, "duplicated": 0, "reordered": 0}
    totals |= {"mismatched": 0, "resyncs": 0, "behind_at_end": 0}
    problems: list[str] = []
    first, last = None, -1
    with SqliteLog(log) as stored:
        for follower in followers:
            found = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
            )
            totals["delivered"] += found.delivered
            totals["expected"] += found.last - found.first + 1 if found.delivered else 0
            for name in ("lost", "duplicated", "reordered", "mismatched"):
                totals[name] += getattr(found, name)
            totals["resyncs"] += found.restarts
            totals["behind_at_end"] += int(found.last < target)
            problems += found.problems[:2]
            first = found.first if first is None else min(first, found.first)
            last = max(last, found.last)
    return {
        "benchmark": "soak",
        "faults": len(faults),
        "published": 0 if first is None else last - first + 1,
        **totals,
        "clean": not any(totals[n] for n in ("lost", "duplicated", "reordered", "mismatched")),
        "subscribers": len(followers),
        "relays": args.relays,
        "agents": args.agents,
        "moves": sum(f.moves for f in followers),
        "refusals": [r for f in followers for r in f.refusals][:5],
        "problems": problems[:10],
        "fault_log": faults,
        "duration_s": round(duration, 1),
        "machine": describe(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=10, help="fault injections (default: 10)")
    parser.add_argument("--interval", type=float, default=8.0, help="seconds between faults")
    parser.add_argument("--subscribers", type=int, default=24, help="every-mode subscribers")
    parser.add_argument("--relays", type=int, default=3, help="relay processes (default: 3)")
    parser.add_argument("--agents", type=int, default=10_000, help="simulated agents")
    parser.add_argument("--side", type=float, default=150.0, help="side of each box view")
    parser.add_argument("--settle", type=float, default=120.0, help="seconds to catch up at end")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the fault plan")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    result = asyncio.run(soak(args)) | {"calibration": calibration}
    write_results(result, None if args.no_save else RESULTS)
    return 0 if result["clean"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
