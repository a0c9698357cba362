"""Memory over a long run (issue 45, item 5): every process's resident memory sampled while
subscribers churn, read slowly or stop reading, and links are partitioned and healed.

Run ``.venv/bin/python bench/memory.py --duration 3600``; it prints one JSON object, writes
``bench/results/memory.json`` and prints a one-line summary last. ``--duration 120 --warmup 30``
is a short run. Processes on this machine (docs/benchmarks/memory.md): a Spark publisher (the
``agents`` simulation, 10 ticks/s), a relay on it dialing through a proxy (``flat``), a mid
relay (``mid``) and an edge below it dialing through a proxy (``edge``), each relay with its
default slow-consumer settings (``--queue-limit`` 64, ``--stall-timeout`` 10 s). In this process:

* ``--followers`` ``every`` subscribers (``fanout.client``) on ``flat`` and ``edge``; every
  ``--churn`` seconds one drops its connection and resumes on the other relay;
* ``--slow`` subscribers that read one message every ``--slow-every`` seconds (a 4 KiB receive
  window), and ``--stopped`` that read their first push and then stop reading: the relay closes
  them after its stall timeout; each is replaced by a new one ``--stop-hold`` seconds after it
  stopped (so that stalled connections come and go all run long);
* every ``--partition-every`` seconds one of the two proxied links is partitioned (both ways or
  one; a tenth of them cut) for 0.5 to 6 s, then healed.

Every 2 s the resident memory of each process is read (the publisher's Python and its Spark JVM
apart). After ``--warmup`` seconds, each process's ``growth_pct_per_hour`` is the least-squares
slope of its samples (MiB per hour) as a percentage of their mean (``late_growth_pct_per_hour``:
the same over the second half of them: a plateau reached late); a role's is its worst process.
``slow_subscriber_bound_kib`` is what a subscriber that stops reading can cost a relay by its
configuration (``bench/stalled.py`` measures it with 1,000 of them).

``--trace-mid DIR`` runs the mid relay under ``tracemalloc`` (``--trace-frames`` deep), writing a
snapshot to DIR every ``--trace-every`` seconds; the JSON's ``mid_traced`` has the allocation
sites that grew most from the first snapshot after warm-up to the last (its relay runs slower),
and glibc's arenas at each (``--trace-frames 0``: those alone). ``--mid-env KEY=VALUE`` adds to
the mid relay's environment (an allocator setting, A/B). docs/benchmarks/memory.md has results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from asyncio.subprocess import DEVNULL, PIPE
from pathlib import Path
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed

from fanout.client import LiveView, SubscriptionError, connect
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, rss, tree, tree_rss, write_results
from fanout.testing.ports import LOOPBACK
from fanout.testing.proxy import Proxy, proxy
from fanout.testing.wait import eventually
from fanout.views import Box
from memtrace import TRACED, jvm_ceiling, traced_growth  # bench/memtrace.py
from stalled import TRANSPORT_BYTES  # bench/stalled.py: the same stalled subscribers
from stalled import subscriber as raw_subscriber

RESULTS = Path(__file__).parent / "results" / "memory.json"
WORLD = 1000.0
KEEPALIVE = 2.0  # the proxied relays' --upstream-keepalive: a partition is noticed within 4 s
QUEUE_LIMIT = 64  # the relays' --queue-limit (their default, given so the bound says it)
EXPECTED = (OSError, SubscriptionError, TimeoutError, ConnectionClosed)
TARGET_PCT_PER_HOUR = 5.0
SETUP: tuple[str, ...] = ("duration", "warmup", "agents", "followers", "slow", "stopped")
SETUP += ("slow_every", "stop_hold", "churn", "partition_every", "seed")


class Deployment:
    """The publisher, the three relays, and the two proxies the partitions cut."""

    def __init__(
        self,
        children: Children,
        stack: contextlib.AsyncExitStack,
        root: Path,
        traced: list[str] | None = None,
        mid_env: list[str] | None = None,
        *,
        relay_args: list[str] | None = None,
        publisher_traced: list[str] | None = None,
        publisher_args: list[str] | None = None,
    ) -> None:
        self.children, self.stack, self.root = children, stack, root
        self.traced = traced  # TRACED's arguments for the mid relay (None: not traced)
        self.mid_env = mid_env or []  # KEY=VALUE added to the mid relay's environment
        self.relay_args = relay_args or []  # added to every relay's command line
        self.publisher_traced = publisher_traced  # TRACED's arguments for the publisher
        self.publisher_args = publisher_args or []  # added to its command line
        self.links: dict[str, Proxy] = {}
        self.relays: dict[str, Child] = {}

    async def start(self, agents: int) -> None:
        args = ["--port", "0", "--state-dir", str(self.root / "publisher")]
        args += ["--agents", str(agents), "--world", str(WORLD), *self.publisher_args]
        log = self.root / "publisher.log"
        if self.publisher_traced is None:
            self.publisher = await self.children.start("publisher", args, log)
        else:
            command = [sys.executable, "-c", TRACED, *self.publisher_traced, "publisher", *args]
            self.publisher = await self.children.spawn("publisher", command, log, 600.0)
        keep = ("--upstream-keepalive", str(KEEPALIVE))
        flat = await self._proxy("flat", self.publisher.url)
        await self._relay("flat", "--publisher", f"ws://{flat.address}", *keep)
        mid = await self._relay(
            "mid", "--publisher", self.publisher.url, "--serve-relays", mid=True
        )
        tier = await self._proxy("edge", mid.url)
        await self._relay("edge", "--upstream", f"ws://{tier.address}", *keep)

    async def _proxy(self, name: str, url: str) -> Proxy:
        port = int(url.rsplit(":", 1)[1])
        self.links[name] = await self.stack.enter_async_context(proxy((LOOPBACK, port)))
        return self.links[name]

    async def _relay(self, name: str, *args: str, mid: bool = False) -> Child:
        every = [*args, "--port", "0", "--name", name, "--queue-limit", str(QUEUE_LIMIT)]
        every += ["--workers", "1"]  # one process measured
        every += self.relay_args
        log = self.root / f"{name}.log"
        if not mid or (self.traced is None and not self.mid_env):
            child = await self.children.start("relay", every, log)
        else:  # the mid relay with its environment, traced: env K=V python -c TRACED ...
            run = ["-m", "fanout"] if self.traced is None else ["-c", TRACED, *self.traced]
            command = ["env", *self.mid_env, sys.executable, *run, "relay", *every]
            child = await self.children.spawn("relay", command, log)
        self.relays[name] = child
        return child

    def processes(self) -> dict[str, tuple[str, int]]:
        """Each process sampled, by name: (its role, its pid)."""
        named = {"publisher": ("publisher", self.publisher.pid)}
        named |= {
            name: ("mid" if name == "mid" else "relay", c.pid) for name, c in self.relays.items()
        }
        return named | {"bench": ("bench", os.getpid())}


class Memory:
    """Every process's resident memory every 2 s: (seconds since the start, name, bytes)."""

    def __init__(self, deployment: Deployment) -> None:
        self.d = deployment
        self.samples: list[tuple[float, str, int]] = []
        self.loads: list[float] = []
        self.began = time.monotonic()
        self.ceiling: dict[str, float] = {}  # the Spark JVM's, MiB (memtrace.jvm_ceiling)

    def start_clock(self) -> None:
        """Count time from now: the samples taken so far get negative times (warm-up)."""
        now = time.monotonic()
        shift = now - self.began
        self.samples = [(at - shift, name, size) for at, name, size in self.samples]
        self.began = now

    async def run(self) -> None:
        while True:
            at = time.monotonic() - self.began
            for name, (_, pid) in self.d.processes().items():
                if name == "publisher":  # its Python, and its Spark JVM (a child) apart
                    python = rss(pid)
                    self.samples.append((at, "publisher-python", python))
                    self.samples.append((at, "publisher-jvm", tree_rss(pid) - python))
                    self.samples.append((at, name, tree_rss(pid)))
                elif name == "bench":
                    self.samples.append((at, name, rss(pid)))  # not its children: its own
                else:
                    self.samples.append((at, name, tree_rss(pid)))
            self.loads.append(os.getloadavg()[0])
            if len(self.loads) % 10 == 1:  # every 20 s: the JVM's own view of its heap
                await self._heap()
            await asyncio.sleep(2.0)

    async def _heap(self) -> None:
        """The Spark JVM's heap used and committed (``jstat -gc``), as two more series."""
        jvm = [p for p in tree(self.d.publisher.pid) if _comm(p) == "java"]
        if not jvm or (jstat := shutil.which("jstat")) is None:
            return
        process = await asyncio.create_subprocess_exec(
            jstat, "-gc", str(jvm[0]), stdout=PIPE, stderr=DEVNULL
        )
        out, _ = await process.communicate()
        lines = out.decode().split("\n")
        if process.returncode or len(lines) < 2:
            return
        gc = dict(zip(lines[0].split(), (float(v) for v in lines[1].split()), strict=False))
        at = time.monotonic() - self.began
        used = sum(gc.get(k, 0.0) for k in ("S0U", "S1U", "EU", "OU")) * 1024
        committed = sum(gc.get(k, 0.0) for k in ("S0C", "S1C", "EC", "OC")) * 1024
        self.samples.append((at, "publisher-jvm-heap-used", int(used)))
        self.samples.append((at, "publisher-jvm-heap-committed", int(committed)))
        self.samples.append((at, "publisher-jvm-old-used", int(gc.get("OU", 0.0) * 1024)))
        self.samples.append((at, "publisher-jvm-own", rss(jvm[0])))  # without Spark's workers
        if not self.ceiling:  # what its flags let it hold (bench/memtrace.py)
            self.ceiling = await asyncio.to_thread(jvm_ceiling, jvm[0])

    def growth(self, warmup: float) -> dict[str, dict[str, float]]:
        """Per process: the mean, first and last, peak after ``warmup`` (MiB), the least-squares
        slope (MiB/hour) and it as a percentage of the mean per hour."""
        found = {}
        for name in sorted({name for _, name, _ in self.samples}):
            points = [(at, b / 2**20) for at, n, b in self.samples if n == name and at >= warmup]
            if len(points) < 3:
                continue
            hours = np.array([at / 3600 for at, _ in points])
            mib = np.array([m for _, m in points])
            slope = float(np.polyfit(hours, mib, 1)[0])
            late = hours >= (hours[0] + hours[-1]) / 2  # the second half after warm-up
            late_slope = float(np.polyfit(hours[late], mib[late], 1)[0]) if late.sum() > 1 else 0.0
            found[name] = {
                "after_warmup_mib": round(float(mib.mean()), 1),
                "first_mib": round(float(mib[0]), 1),
                "last_mib": round(float(mib[-1]), 1),
                "peak_mib": round(float(mib.max()), 1),
                "slope_mib_per_hour": round(slope, 2),
                "growth_pct_per_hour": round(100 * slope / float(mib.mean()), 2),
                "late_growth_pct_per_hour": round(100 * late_slope / float(mib.mean()), 2),
            }
        return found


class Load:
    """The subscribers: churning followers, slow readers, readers that stop."""

    def __init__(self, d: Deployment, rng: random.Random, args: argparse.Namespace) -> None:
        self.d, self.rng, self.args = d, rng, args
        self.urls = [d.relays["flat"].url, d.relays["edge"].url]
        self.counts = {"updates": 0, "churns": 0, "moves": 0, "slow_read": 0}
        self.counts |= {"slow_closed": 0, "stopped_opened": 0}
        self.errors: dict[str, int] = {}
        self.sessions: list[asyncio.Task[LiveView | None]] = []

    def box(self) -> Box:
        x, y = self.rng.uniform(0, WORLD - 150), self.rng.uniform(0, WORLD - 150)
        return Box((x, y), (x + 150, y + 150))

    async def follow(self, number: int) -> None:
        """An ``every`` subscriber that moves to the other relay when its connection breaks
        or it churns, and resumes its view there; it keeps a count, not its updates."""
        box, view, turn = self.box(), None, number
        while True:
            session = asyncio.create_task(self._follow(self.urls[turn % 2], box, view))
            self.sessions.append(session)
            try:
                await asyncio.wait({session})
            except asyncio.CancelledError:
                session.cancel()
                raise
            finally:
                self.sessions.remove(session)
            if not session.cancelled() and session.exception() is None:
                view = session.result()
            elif not session.cancelled():
                error = session.exception()
                if not isinstance(error, EXPECTED):
                    raise error  # type: ignore[misc]
                self.errors[type(error).__name__] = self.errors.get(type(error).__name__, 0) + 1
            turn += 1
            self.counts["moves"] += 1
            await asyncio.sleep(0.5)

    async def _follow(self, url: str, box: Box, view: LiveView | None) -> LiveView | None:
        async with connect(url, name="memory") as subscriber:
            live = await subscriber.subscribe(box, mode="every", resume=view)
            try:
                async for _ in live:
                    self.counts["updates"] += 1
            except asyncio.CancelledError:
                return live  # churned: resume it elsewhere
            except SubscriptionError as error:
                self.errors[error.code] = self.errors.get(error.code, 0) + 1
                return live if error.code == "closed" else None
        return live

    async def churn(self) -> None:
        while True:
            await asyncio.sleep(self.args.churn)
            if self.sessions:
                self.rng.choice(self.sessions).cancel()
                self.counts["churns"] += 1

    async def slow(self, number: int) -> None:
        """Reads one message every ``--slow-every`` seconds; a new one if the relay closes it."""
        while True:
            url = self.urls[number % 2]
            try:
                async with asyncio.timeout(30):
                    websocket = await raw_subscriber(url, number, self.box(), 4096)
                while True:
                    await asyncio.sleep(self.args.slow_every)
                    await websocket.recv()
                    self.counts["slow_read"] += 1
            except EXPECTED as error:
                self.counts["slow_closed"] += 1
                self.errors[type(error).__name__] = self.errors.get(type(error).__name__, 0) + 1
                await asyncio.sleep(1.0)

    async def stopped(self, number: int) -> None:
        """Reads the first push, stops reading for ``--stop-hold`` s, then goes away."""
        while True:
            url = self.urls[number % 2]
            try:
                async with asyncio.timeout(30):
                    websocket = await raw_subscriber(url, 10_000 + number, self.box(), 4096)
            except EXPECTED:
                await asyncio.sleep(1.0)
                continue
            self.counts["stopped_opened"] += 1
            websocket.transport.pause_reading()
            await asyncio.sleep(self.args.stop_hold)
            websocket.transport.abort()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def partitions(d: Deployment, rng: random.Random, every: float, log: list[Any]) -> None:
    """One link at a time partitioned (or cut) for 0.5 to 6 s, then healed."""
    began = time.monotonic()
    while True:
        await asyncio.sleep(every)
        name = rng.choice(sorted(d.links))
        link, way = d.links[name], rng.choice(["both", "both", "up", "down"])
        cut, length = rng.random() < 0.1, rng.uniform(0.5, 6.0)
        log.append({"at_s": round(time.monotonic() - began), "link": name, "way": way})
        if cut:
            log[-1]["way"] = "cut"
            link.cut()
        else:
            link.partition(way)  # type: ignore[arg-type]
        await asyncio.sleep(length)
        link.heal()


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="fanout-memory-"))
    traced, publisher_traced = _traced(args, args.trace_mid), _traced(args, args.trace_publisher)
    async with Children() as children, contextlib.AsyncExitStack() as stack:
        d = Deployment(
            children,
            stack,
            root,
            traced,
            args.mid_env,
            relay_args=args.relay_arg,
            publisher_traced=publisher_traced,
            publisher_args=args.publisher_arg,
        )
        await d.start(args.agents)
        memory, load = Memory(d), Load(d, rng, args)
        cut: list[Any] = []
        tasks = [asyncio.create_task(memory.run())]
        tasks += [asyncio.create_task(load.follow(n)) for n in range(args.followers)]
        # The rest starts, and the clock with it, once updates flow to the followers (Spark's first
        # micro-batches take a while on a loaded machine); samples before count as warm-up.
        await eventually(lambda: load.counts["updates"] >= args.followers, timeout=600, every=1)
        memory.start_clock()
        tasks += [asyncio.create_task(load.slow(n)) for n in range(args.slow)]
        tasks += [asyncio.create_task(load.stopped(n)) for n in range(args.stopped)]
        tasks += [asyncio.create_task(load.churn())]
        tasks += [asyncio.create_task(partitions(d, rng, args.partition_every, cut))]
        try:
            deadline = time.monotonic() + args.duration
            while (left := deadline - time.monotonic()) > 0:
                await asyncio.sleep(min(60.0, left))
                progress = {"at_s": round(time.monotonic() - memory.began)} | load.counts
                print(json.dumps({"progress": progress}), file=sys.stderr, flush=True)
            metrics = {name: scrape(child.url) for name, child in d.relays.items()}
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    found = summary(args, memory, load, cut, metrics)
    if args.trace_mid is not None:
        found["mid_traced"] = traced_growth(args.trace_mid, memory.began + args.warmup)
    if args.trace_publisher is not None:
        since = memory.began + args.warmup
        found["publisher_traced"] = traced_growth(args.trace_publisher, since)
    return found


def _traced(args: argparse.Namespace, folder: Path | None) -> list[str] | None:
    """TRACED's arguments for a process traced into ``folder`` (None: not traced)."""
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return [str(folder), str(args.trace_every), str(args.trace_frames)]


def summary(
    args: argparse.Namespace,
    memory: Memory,
    load: Load,
    cut: list[Any],
    metrics: dict[str, dict[str, float]],
) -> dict[str, Any]:
    processes = memory.growth(args.warmup)
    roles: dict[str, dict[str, Any]] = {}
    for name, (role, _) in memory.d.processes().items():
        if name in processes and (
            role not in roles
            or processes[name]["growth_pct_per_hour"] > roles[role]["growth_pct_per_hour"]
        ):
            roles[role] = {**processes[name], "process": name}
    pushes = {
        name: m["fanout_relay_bytes_sent_total"] / max(1.0, m["fanout_relay_frames_sent_total"])
        for name, m in metrics.items()
    }
    largest = max(pushes["flat"], pushes["edge"])  # the mid relay's frames are batches
    served = ("publisher", "relay", "mid")
    return {
        "benchmark": "memory",
        "growth_pct_per_hour": {role: roles[role]["growth_pct_per_hour"] for role in roles},
        "within_target": all(roles[r]["growth_pct_per_hour"] < TARGET_PCT_PER_HOUR for r in served),
        "target_pct_per_hour": TARGET_PCT_PER_HOUR,
        "roles": roles,
        "processes": processes,
        "jvm_ceiling_mib": memory.ceiling,
        "slow_subscriber_bound_kib": round((QUEUE_LIMIT * largest + TRANSPORT_BYTES) / 1024, 1),
        "mean_push_bytes": {name: round(size) for name, size in pushes.items()},
        "queue_limit": QUEUE_LIMIT,
        "malloc_trims": {  # each relay's trims (fanout.allocator): how many, mean milliseconds
            name: [count, round(1000 * m["fanout_malloc_trim_seconds_sum"] / count, 3)]
            for name, m in metrics.items()
            if (count := m.get("fanout_malloc_trim_seconds_count", 0.0))
        },
        "slow_consumers_closed": {
            name: m.get("fanout_relay_slow_consumers_closed_total", 0.0)
            for name, m in metrics.items()
        },
        "load": load.counts,
        "subscription_errors": load.errors,
        "partitions": len(cut),
        "partitions_by_way": {
            w: sum(p["way"] == w for p in cut) for w in ("both", "up", "down", "cut")
        },
        "load_average_during": {
            "mean": round(sum(memory.loads) / max(1, len(memory.loads)), 2),
            "max": round(max(memory.loads, default=0.0), 2),
        },
        "setup": {key: getattr(args, key) for key in SETUP}
        | {
            "traced": args.trace_mid is not None,
            "publisher_traced": args.trace_publisher is not None,
            "mid_env": args.mid_env,
            "relay_args": args.relay_arg,
            "publisher_args": args.publisher_arg,
        },
        "samples_s_mib": {  # every 30 s: seconds since the load started, MiB
            name: [[round(at), round(b / 2**20, 1)] for at, n, b in memory.samples if n == name][
                ::15
            ]
            for name in processes
        },
        "machine": describe(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of load")
    parser.add_argument("--warmup", type=float, default=600.0, help="seconds left out of growth")
    parser.add_argument("--agents", type=int, default=10_000, help="simulated agents")
    parser.add_argument("--followers", type=int, default=12, help="every-mode subscribers")
    parser.add_argument("--slow", type=int, default=20, help="subscribers reading slowly")
    parser.add_argument("--slow-every", type=float, default=1.0, help="seconds between reads")
    parser.add_argument("--stopped", type=int, default=20, help="subscribers that stop reading")
    parser.add_argument("--stop-hold", type=float, default=60.0, help="seconds each is held")
    parser.add_argument("--churn", type=float, default=5.0, help="seconds between churns")
    parser.add_argument("--partition-every", type=float, default=20.0, help="seconds between")
    parser.add_argument("--seed", type=int, default=45, help="random seed of the plan")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    parser.add_argument("--trace-mid", type=Path, help="tracemalloc the mid relay: snapshots here")
    parser.add_argument(
        "--trace-publisher", type=Path, help="tracemalloc the publisher's Python: snapshots here"
    )
    parser.add_argument("--trace-every", type=float, default=60.0, help="seconds between them")
    parser.add_argument(
        "--mid-env", action="append", default=[], help="KEY=VALUE for the mid relay (repeat)"
    )
    parser.add_argument("--trace-frames", type=int, default=8, help="frames kept per allocation")
    parser.add_argument(
        "--relay-arg",
        action="append",
        default=[],
        help="added to every relay's command line, as --relay-arg=--trim-every=0 (repeat)",
    )
    parser.add_argument(
        "--publisher-arg",
        action="append",
        default=[],
        help="added to the publisher's command line, as --publisher-arg=--trim-every=0 (repeat)",
    )
    args = parser.parse_args()
    if args.warmup >= args.duration:
        raise SystemExit("--warmup must be shorter than --duration")
    calibration = calibrate()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    result = asyncio.run(bench(args)) | {"calibration": calibration}
    write_results(result, None if args.no_save else args.out)
    keys: tuple[str, ...] = ("growth_pct_per_hour", "within_target", "slow_subscriber_bound_kib")
    keys += ("slow_consumers_closed", "partitions", "load_average_during")
    print(json.dumps({key: result[key] for key in keys}))
    return 0 if result["within_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
