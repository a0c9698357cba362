"""Benchmark relay tiers and splits (issue 27, deliverable 7): the publisher's egress with 8 edge
relays on it (flat) against the same 8 edge relays behind 2 mid relays (tiered), the same
subscribers; the latency the tier adds; and the time and pause to move subscribers in a split.

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
  mode ``latest`` at 10 pushes/s (``fanout.client``), each deployment's from a process of its
  own (``--subscriber-processes 2``; 1: both from this one, as runs before 2026-11-29 did: that
  process stamped the tiered side's pushes after decoding the flat side's of the same tick).

Per run, once every view had its first push and ``SETTLE`` seconds more, a window of
``--window`` seconds measures what the publisher sent to each deployment's relays
(``fanout_publisher_relay_bytes_sent_total`` by relay name: the flat edges, or the mid relays),
per micro-batch; each update's latency from its tick's wall-clock time at the publisher to its
arrival here (p50, p99); and, for each view and tick both deployments delivered, how much later
the tiered one arrived (``tier_latency_*_ms``: the hop a tier adds, paired tick by tick). The
results are the median of ``--runs`` runs with their spread (min, max); each run's own figures
are kept under ``runs``.

**The split case** (``--split-subscribers``, 2,000 by default, so that about 1,000 move; 0:
skip it): per run, a Redis Cluster (``fanout.testing.redis``), a relay ``g0`` with
``--registry --split-above subscribers=N-1 --split-dwell SPLIT_DWELL`` and a standby ``g1``
(``--standby``), on a publisher of its own (started for the run). ``N`` ``every`` views (the
seeded boxes, spread over 20 connections entering at the standby, which redirects them all
to ``g0``) make ``g0`` split once the dwell has passed: it hands about half its cells to
``g1``, and ``fanout.client.following`` moves their views.
Measured: ``split_moved`` (views that moved); ``split_seconds``, from the first redirect a
subscriber received (the split's command reaching the subscribers) to the last moved view's
first update at ``g1``; ``split_pause_p50_ms`` / ``split_pause_p99_ms`` over the moved views,
each the gap between its last update before the move and its first after, minus its normal
interval (the median gap between its arrivals before the move, updates received together as
one: ``BURST_GAP``); ``split_pause_stayed_*``, the
views that stayed measured alike over the split (their longest gap then: what the loaded giver
and publisher cost every view, moved or not); ``split_views_ended``: views
that ended during the run, each a failure of the split, with why (``split_views_ended_why``:
error -> views) and ``split_slow_consumers``: connections the two relays closed as slow; and
``lost``, ``duplicated``, ``reordered``: every view's updates (moved or not) audited against the
publisher's log (``fanout.testing.audit``).

Where the pause goes (``phases``, ``split_phase_*``): per moved view, ``quiet`` from its last
update at the giver to its redirect, ``rehome`` from the redirect to the standby's answer,
``first`` from that answer to its first update there; ``split_handover_ms`` from the giver's
assignment to the first redirect (the standby warming the parts while the giver serves them);
from the standby's own figures, sampled every 0.25 s, when it acquired and asked the log; and
the publisher's micro-batch interval; ``split_phase_late_*``, how much later a moved view got
its first seq at the standby than the views that stayed got it at the giver, and
``split_behind``, the share of moved views the giver had not yet sent a seq the others had when
it redirected them (each moved view's updates go to ``moved-views.json`` in the run's log
folder, those of the views that stayed to ``stayed-views.json``). The tier's hop is broken
down by the relays' histograms (``hop_*_mean_ms``: a batch's write, and its read to its swap,
where a mid relay forwards it) and, tick by tick, by the relays' own record of each tick
(``GET /v1/admin/batches``, joined by ``tierhops``: ``hops`` per run, where the slowest 1% of
paired updates waited; each paired update's stages go to ``hops-N.jsonl`` in the log folder).
Each run's headline figures go to stderr as it ends (the JSON comes once all have).
``scheduling``: each role's main threads' time on a CPU and waiting for one over the window
(``/proc/PID/schedstat``). ``--relay-nice N`` / ``--subscriber-nice N``: every second tier run
puts its relays / subscriber processes at priority ``N`` (an A/B in one run, ``by_nice``).
Every run reports the machine's one-minute load average beside its figures
(``load_average``, ``split_load_average``: min and max while it ran): the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

import tierhops
from fanout.background import Background
from fanout.client import LiveView, SubscriptionError, Update, connect
from fanout.client.following import ClusterSubscriber
from fanout.launch import Child, Children, running
from fanout.metrics import scrape
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "cluster.json"
SPLIT_RESULTS = Path(__file__).parent / "results" / "cluster_split.json"
EDGES = 8
MIDS = 2
SETTLE = 5.0
WORLD = 1000.0
#: Seconds the giver must stay past its threshold before it splits (its subscribers' normal
#: interval is measured meanwhile).
SPLIT_DWELL = 10.0
#: The split case's registry lease (s): long enough that a relay stalled by a loaded machine
#: (load 80 stalled them past 3 s) does not lapse and redirect every view, which is not what
#: is measured; a split's handover waits on the map, never on the lease.
SPLIT_LEASE = 10.0
#: The shortest garbage collection of a subscriber process the tier runs note (s).
GC_NOTED = 0.005
#: Connections the split case's subscribers share.
SPLIT_CONNECTIONS = 20


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
    publisher: Child, logs: Path, nice: int = 0
) -> AsyncIterator[tuple[list[Child], list[Child], list[Child]]]:
    """Both deployments side by side on one publisher, every relay at priority ``nice``
    (``setpriority``: below 0, ahead of the machine's other processes); yields (flat edges,
    tiered edges, mid relays)."""
    async with Children() as children:

        async def relay(name: str, *args: str) -> Child:
            child = await children.start(
                "relay", [*args, "--port", "0", "--name", name], logs / f"{name}.log"
            )
            if nice:
                os.setpriority(os.PRIO_PROCESS, child.pid, nice)
            return child

        flat = [await relay(f"flat{e}", "--publisher", publisher.url) for e in range(EDGES)]
        mids = [
            await relay(f"mid{m}", "--publisher", publisher.url, "--serve-relays")
            for m in range(MIDS)
        ]
        tiered = [await relay(f"edge{e}", "--upstream", mids[e % MIDS].url) for e in range(EDGES)]
        yield flat, tiered, mids


#: The relays' histograms the tier's hop is broken down by (``fanout_relay_`` + name).
HOP_PHASES = ("batch_write_seconds", "batch_read_to_swap_seconds")


def histograms(relays: list[Child]) -> dict[str, tuple[float, float]]:
    """Each of ``HOP_PHASES``' (sum, count) over ``relays`` now."""
    out = dict.fromkeys(HOP_PHASES, (0.0, 0.0))
    for relay in relays:
        samples = scrape(relay.url)
        for name in HOP_PHASES:
            total, count = out[name]
            out[name] = (
                total + samples.get(f"fanout_relay_{name}_sum", 0.0),
                count + samples.get(f"fanout_relay_{name}_count", 0.0),
            )
    return out


def hop_phases(
    before: dict[str, dict[str, tuple[float, float]]],
    after: dict[str, dict[str, tuple[float, float]]],
) -> dict[str, float]:
    """Mean ms of each of ``HOP_PHASES`` per role (``mid``, ``edge_tiered``, ``edge_flat``)
    between two ``histograms`` reads: a batch's write, and its read to its swap (a mid relay
    forwards it to the relays below at its swap)."""
    out = {}
    for role in after:
        for name in HOP_PHASES:
            total = after[role][name][0] - before[role][name][0]
            count = after[role][name][1] - before[role][name][1]
            short = name.removeprefix("batch_").removesuffix("_seconds")
            out[f"hop_{role}_{short}_mean_ms"] = total / count * 1000 if count else float("nan")
    return out


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
    """When each view's update of each tick arrived (wall clock), and its latency; the
    subscriber process's garbage collections meanwhile (``gc``: wall-clock start and end, each
    of at least ``GC_NOTED`` s) and its scheduling (``sched``)."""

    def __init__(self) -> None:
        self.at: dict[tuple[int, int], float] = {}
        self.latencies: list[float] = []
        self.measuring = False
        self.gc: list[tuple[float, float]] = []
        #: The process's ``tierhops.schedstat`` as the window began and ended.
        self.sched: tuple[tuple[float, float, int], ...] = ((0.0, 0.0, 0), (0.0, 0.0, 0))
        self._collecting = 0.0

    def collected(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` entry: notes each collection while measuring."""
        if phase == "start":
            self._collecting = time.time()
        elif self.measuring and time.time() - self._collecting >= GC_NOTED:
            self.gc.append((self._collecting, time.time()))

    async def drain(self, index: int, view: LiveView) -> None:
        async for update in view:
            if self.measuring and not update.full:
                self.at[(index, update.tick)] = update.received_at
                self.latencies.append((update.received_at - update.tick_time) * 1000)


def _side_process(urls: list[str], views: list[Box], pipe: Connection) -> None:
    """A subscriber process of one deployment (``run``, two processes)."""
    asyncio.run(_side(urls, views, pipe))


async def _side(urls: list[str], views: list[Box], pipe: Connection) -> None:
    """``views`` over the edge relays at ``urls`` round robin; says ``ready`` once each had its
    first push, measures between the two messages it is sent next, then sends back when each
    update arrived and its latency (``Arrivals.at``, ``Arrivals.latencies``)."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(connect(url)) for url in urls]
        live = [
            await clients[i % len(clients)].subscribe(box, rate=10) for i, box in enumerate(views)
        ]
        await asyncio.wait_for(asyncio.gather(*(v.wait_updates(1) for v in live)), 300)
        arrivals = Arrivals()
        tasks = [asyncio.create_task(arrivals.drain(i, view)) for i, view in enumerate(live)]
        gc.callbacks.append(arrivals.collected)
        pipe.send("ready")
        await asyncio.to_thread(pipe.recv)
        arrivals.measuring, began = True, tierhops.schedstat()
        await asyncio.to_thread(pipe.recv)
        arrivals.measuring, ended = False, tierhops.schedstat()
        pipe.send((arrivals.at, arrivals.latencies, arrivals.gc, (began, ended)))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def sides_in_processes(
    sides: dict[str, list[str]], views: list[Box], nice: int = 0
) -> AsyncIterator[dict[str, Arrivals]]:
    """Each deployment's subscribers in a process of their own (``--subscriber-processes 2``):
    one process holding both would timestamp the tiered side's pushes after it has decoded the
    flat side's of the same tick, adding its own work to the hop. Yields the sides' arrivals,
    measuring, filled in when the block ends. The processes run at priority ``nice``."""
    spawn = multiprocessing.get_context("spawn")
    pipes, processes = {}, []
    for side, urls in sides.items():
        here, there = spawn.Pipe()
        process = spawn.Process(target=_side_process, args=(urls, views, there), daemon=True)
        process.start()
        if nice:
            assert process.pid is not None
            os.setpriority(os.PRIO_PROCESS, process.pid, nice)
        pipes[side] = here
        processes.append(process)
    try:
        for pipe in pipes.values():
            if await asyncio.to_thread(pipe.poll, 360) is False:
                raise TimeoutError("a subscriber process did not get its first pushes")
            assert await asyncio.to_thread(pipe.recv) == "ready"
        await asyncio.sleep(SETTLE)
        arrivals = {side: Arrivals() for side in sides}
        for pipe in pipes.values():
            pipe.send("measure")
        yield arrivals
        for pipe in pipes.values():
            pipe.send("stop")
        for side, pipe in pipes.items():
            got = arrivals[side]
            got.at, got.latencies, got.gc, got.sched = await asyncio.to_thread(pipe.recv)
    finally:
        for process in processes:
            await asyncio.to_thread(process.join, 30)
            if process.is_alive():
                process.kill()


@contextlib.asynccontextmanager
async def sides_here(
    sides: dict[str, list[str]], views: list[Box]
) -> AsyncIterator[dict[str, Arrivals]]:
    """Both deployments' subscribers in this process (``--subscriber-processes 1``, how runs
    before 2026-11-29 17:00 UTC measured); yields their arrivals, measuring."""
    async with contextlib.AsyncExitStack() as stack:
        held = {}
        for side, urls in sides.items():
            clients = [await stack.enter_async_context(connect(url)) for url in urls]
            held[side] = [
                await clients[i % len(clients)].subscribe(box, rate=10)
                for i, box in enumerate(views)
            ]
        everything = [view for live in held.values() for view in live]
        await asyncio.wait_for(asyncio.gather(*(v.wait_updates(1) for v in everything)), 300)
        await asyncio.sleep(SETTLE)
        arrivals = {side: Arrivals() for side in sides}
        tasks = [
            asyncio.create_task(arrivals[side].drain(i, view))
            for side, live in held.items()
            for i, view in enumerate(live)
        ]
        for arrival in arrivals.values():
            arrival.measuring = True
        yield arrivals
        for arrival in arrivals.values():
            arrival.measuring = False
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run(
    publisher: Child,
    views: list[Box],
    window: float,
    logs: Path,
    processes: int = 2,
    *,
    number: int = 0,
    nice: int = 0,
    subscriber_nice: int = 0,
) -> dict[str, Any]:
    """One run: both deployments, the same views on each, one window measured; the
    subscribers in ``processes`` processes (1: this one; 2: one per deployment). Each paired
    update's way through the relays goes to ``hops-NUMBER.jsonl`` in ``logs`` (``tierhops``);
    the relays run at priority ``nice``, the subscriber processes at ``subscriber_nice``."""
    async with deployment(publisher, logs, nice) as (flat, tiered, mids):
        roles = {"mid": mids, "edge_tiered": tiered, "edge_flat": flat}

        def read_histograms() -> dict[str, dict[str, tuple[float, float]]]:
            return {role: histograms(relays) for role, relays in roles.items()}

        sides = {"flat": [e.url for e in flat], "tiered": [e.url for e in tiered]}
        if processes == 2:
            subscribing = sides_in_processes(sides, views, subscriber_nice)
        else:
            subscribing = sides_here(sides, views)
        async with subscribing as arrivals:
            before = await asyncio.to_thread(counters, publisher)
            sched_before = {
                role: [tierhops.schedstat(r.pid) for r in rs] for role, rs in roles.items()
            }
            phases_before = await asyncio.to_thread(read_histograms)
            loads = [os.getloadavg()[0]]
            for _ in range(int(window)):
                await asyncio.sleep(1.0)
                loads.append(os.getloadavg()[0])
            await asyncio.sleep(window - int(window))
            sched_after = {
                role: [tierhops.schedstat(r.pid) for r in rs] for role, rs in roles.items()
            }
            after = await asyncio.to_thread(counters, publisher)
            phases_after = await asyncio.to_thread(read_histograms)
        listed = {
            role: [await asyncio.to_thread(tierhops.batches, r.url) for r in relays]
            for role, relays in roles.items()
        }
    batches = max(after["micro_batches"] - before["micro_batches"], 1)
    flat_at, tiered_at = arrivals["flat"].at, arrivals["tiered"].at
    extra = [(tiered_at[k] - flat_at[k]) * 1000 for k in flat_at.keys() & tiered_at.keys()]
    result: dict[str, Any] = {
        "micro_batches": after["micro_batches"] - before["micro_batches"],
        "egress_flat_bytes": (after["flat"] - before["flat"]) / batches,
        "egress_tiered_bytes": (after["tiered"] - before["tiered"]) / batches,
        "paired_updates": len(extra),
        "subscriber_processes": processes,
        "relay_nice": nice,
        "subscriber_nice": subscriber_nice,
        **hop_phases(phases_before, phases_after),
        # The machine's one-minute load average during the window (sampled every second).
        "load_average": {"min": min(loads), "max": max(loads)},
    }
    result["egress_ratio"] = result["egress_tiered_bytes"] / max(result["egress_flat_bytes"], 1)
    for side, seen in arrivals.items():
        result[f"latency_{side}_p50_ms"] = _percentile(seen.latencies, 50)
        result[f"latency_{side}_p99_ms"] = _percentile(seen.latencies, 99)
    result["tier_latency_p50_ms"] = _percentile(extra, 50)
    result["tier_latency_p99_ms"] = _percentile(extra, 99)
    found = tierhops.records(
        flat_at, tiered_at, listed["edge_flat"], listed["edge_tiered"], listed["mid"]
    )
    tierhops.save(found, logs / f"hops-{number}.jsonl")
    result["hops"] = tierhops.summary(found, {side: seen.gc for side, seen in arrivals.items()})
    # Each role's main threads on a CPU and waiting for one (a loaded machine's cost).
    result["scheduling"] = {
        role: tierhops.scheduling(sched_before[role], sched_after[role], window) for role in roles
    } | {
        f"subscribers_{side}": tierhops.scheduling([seen.sched[0]], [seen.sched[1]], window)
        for side, seen in arrivals.items()
        if processes == 2
    }
    # The hop as the edge relays pushed it (the subscriber processes left out: ``tierhops``).
    edge_hop = result["hops"].get("edge_hop_percentiles_ms", {})
    result["tier_edge_hop_p50_ms"] = edge_hop.get("50", float("nan"))
    result["tier_edge_hop_p99_ms"] = edge_hop.get("99", float("nan"))
    return result


class Timed(ClusterSubscriber):
    """A cluster subscriber noting when each redirect of a held view arrived, and when the
    relay it moved to answered its subscription there (wall clock)."""

    def __init__(self, entry: str, stack: contextlib.AsyncExitStack, moving: Background) -> None:
        super().__init__(entry, stack, moving)
        self.redirected_at: dict[int, float] = {}  # id of the view -> when
        self.held_at: dict[int, float] = {}  # id of the view -> when held where it moved

    def _moved(self, view: LiveView, location: str) -> None:
        self.redirected_at[id(view)] = time.time()
        super()._moved(view, location)

    async def _move(self, view: LiveView, location: str) -> None:
        await super()._move(view, location)
        self.held_at[id(view)] = time.time()


class Followed:
    """Every update of one ``every`` view, as received, and the view's moves."""

    def __init__(self, box: Box, view: LiveView) -> None:
        self.box, self.view = box, view
        self.updates: list[Update] = []
        self.error: SubscriptionError | None = None
        self.task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            async for update in self.view:
                self.updates.append(update)
        except SubscriptionError as error:
            self.error = error  # counted: a view that ended is a failure of the split

    def moved_after(self, redirected: float) -> int:
        """The index of its first update received after its redirect at ``redirected`` (a
        wall-clock time), -1 if none came yet."""
        for index, update in enumerate(self.updates):
            if update.received_at > redirected:
                return index
        return -1

    def pause_ms(self, redirected: float) -> float:
        """The gap across its move minus its normal interval (the module's docstring)."""
        at = [update.received_at for update in self.updates]
        first = self.moved_after(redirected)
        return max(at[first] - at[first - 1] - normal_interval(at[:first]), 0.0) * 1000


#: Updates a view receives within this many seconds of each other are one arrival: a loaded
#: relay sends a view the seqs it is behind by in one burst, and a burst's zero gaps are not a
#: subscriber's normal interval (with them, the median gap of a view served in bursts of two or
#: three seqs was 0, and its pause across a move the whole gap).
BURST_GAP = 0.05


def normal_interval(received: list[float]) -> float:
    """The median gap between a view's arrivals at ``received`` (wall clock, ascending), its
    updates received within ``BURST_GAP`` s of the one before counted with it; 0 if fewer than
    two arrivals."""
    arrivals: list[float] = []
    for at in received:
        if not arrivals or at - arrivals[-1] > BURST_GAP:
            arrivals.append(at)
    return float(np.median(np.diff(arrivals))) if len(arrivals) > 1 else 0.0


async def split_run(
    publisher: Child, views: list[Box], logs: Path, run_number: int
) -> dict[str, Any]:
    """One split: ``len(views)`` ``every`` views on a giver past its threshold, about half moved
    to a standby."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        common = ["--registry", f"redis://{host}:{port}", "--registry-lease", str(SPLIT_LEASE)]
        common += ["--split-above", f"subscribers={len(views) - 1}"]  # the last view tips it
        common += ["--split-dwell", str(SPLIT_DWELL), "--publisher", publisher.url, "--port", "0"]
        async with Children() as children:
            started: list[Child] = []
            for role, extra in (("g0", []), ("g1", ["--standby"])):
                name = f"{role}-{run_number}"
                log = logs / f"{name}.log"
                args = [
                    *common,
                    "--name",
                    name,
                    "--log-format",
                    "json",
                    "--log-level",
                    "info",
                    *extra,
                ]
                started.append(await children.start("relay", args, log))
            giver, standby = started
            result = await _split_measured(publisher, giver, standby, views)
    result.update(split_logged(logs / f"g0-{run_number}.log", result.pop("first_redirect")))
    # Each moved view's updates, redirect and answer, for a closer look than the percentiles.
    (logs / "moved-views.json").write_text(json.dumps(result.pop("views")))
    (logs / "stayed-views.json").write_text(json.dumps(result.pop("stayed")))
    with SqliteLog(logs / "publisher" / "log.db") as stored:
        counts = {"lost": 0, "duplicated": 0, "reordered": 0}
        for follower in result.pop("followers"):
            report = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
            )
            for name in counts:
                counts[name] += getattr(report, name)
    return {**result, **counts}


async def _split_measured(
    publisher: Child, giver: Child, standby: Child, views: list[Box]
) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack, Background() as moving:
        clusters = [Timed(standby.url, stack, moving) for _ in range(SPLIT_CONNECTIONS)]
        followers = []
        for i, box in enumerate(views[:-1]):
            view = await clusters[i % len(clusters)].subscribe(box, mode="every")
            followers.append(Followed(box, view))
        # Every view served and its normal interval seen before the last one tips the giver
        # past its threshold: the split comes a dwell later.
        await eventually(
            lambda: min(len(f.updates) for f in followers),
            lambda fewest: fewest >= 3,
            timeout=300,
            every=0.5,
            what="three updates of every view",
        )
        timeline = Timeline(publisher, {"giver": giver, "standby": standby})
        view = await clusters[0].subscribe(views[-1], mode="every")
        followers.append(Followed(views[-1], view))
        await eventually(
            lambda: scrape(giver.url).get("fanout_relay_splits_total", 0.0),
            lambda splits: splits >= 1,
            timeout=SPLIT_DWELL * 6 + 120,
            every=0.5,
            in_thread=True,
            what="the giver's split",
        )
        await eventually(
            lambda: scrape(standby.url).get("fanout_relay_parts_received", 0.0),
            timeout=60,
            in_thread=True,
            what="the standby's parts",
        )
        redirected: dict[int, float] = {}

        def waiting() -> list[Followed]:
            for cluster in clusters:
                redirected.update(cluster.redirected_at)
            return [
                f
                for f in followers
                if id(f.view) in redirected
                and (not f.view.moves or f.moved_after(redirected[id(f.view)]) < 0)
            ]

        # The giver redirects once the standby holds the parts warm (docs/cluster.md).
        await eventually(
            lambda: sum(len(cluster.redirected_at) for cluster in clusters),
            timeout=60,
            every=0.05,
            what="the split's first redirect",
        )
        await asyncio.sleep(3.0)  # the split's redirects reach the subscribers
        await eventually(
            waiting,
            lambda still: not still,
            timeout=180,
            every=0.2,
            what="every moved view's first update after its move",
        )
        await asyncio.sleep(3.0)  # a few more seqs after the move, for the audit
        slow = 0.0
        for relay in (giver, standby):
            closed = await asyncio.to_thread(scrape, relay.url)
            slow += closed.get("fanout_relay_slow_consumers_closed_total", 0.0)
        timeline.task.cancel()
        moving.cancel()
        for follower in followers:
            follower.task.cancel()
        await asyncio.gather(timeline.task, *(f.task for f in followers), return_exceptions=True)
        held: dict[int, float] = {}
        for cluster in clusters:
            held.update(cluster.held_at)
    moved = [f for f in followers if id(f.view) in redirected]
    first_redirect = min(redirected.values())
    last_served = max(f.updates[f.moved_after(redirected[id(f.view)])].received_at for f in moved)
    # A pause needs an update before the move (every view has had three: see above).
    pauses = [
        f.pause_ms(redirected[id(f.view)])
        for f in moved
        if f.moved_after(redirected[id(f.view)]) > 0
    ]
    rows = [
        {
            "pause_ms": f.pause_ms(redirected[id(f.view)]),
            "redirected": redirected[id(f.view)],
            "held": held.get(id(f.view)),
            "updates": [(u.seq, u.tick_time, u.received_at) for u in f.updates],
        }
        for f in moved
        if f.moved_after(redirected[id(f.view)]) > 0
    ]
    return {
        "views": rows,
        "stayed": [
            [(u.seq, u.tick_time, u.received_at) for u in f.updates]
            for f in followers
            if id(f.view) not in redirected
        ],
        "split_subscribers": len(views),
        "split_moved": len(moved),
        "split_views_ended": sum(f.error is not None for f in followers),
        # Why they ended (code: message -> views), so that a failure says what it was.
        "split_views_ended_why": dict(
            Counter(str(f.error) for f in followers if f.error is not None)
        ),
        # Connections the relays closed as slow consumers during the run (views ended so).
        "split_slow_consumers": slow,
        "split_seconds": last_served - first_redirect,
        "split_pause_p50_ms": _percentile(pauses, 50),
        "split_pause_p99_ms": _percentile(pauses, 99),
        **stayed_pauses(
            [f for f in followers if id(f.view) not in redirected], first_redirect, last_served
        ),
        **phases(moved, redirected, held, timeline),
        **late(moved, [f for f in followers if id(f.view) not in redirected], redirected),
        "first_redirect": first_redirect,
        "followers": followers,
    }


def stayed_pauses(stayed: list[Followed], start: float, end: float) -> dict[str, float]:
    """The views that stayed measured as the moved ones are, over the split (``start`` to
    ``end``, wall clock): each one's longest gap ending then, minus its normal interval before
    ``start`` (``split_pause_stayed_p50_ms``, ``_p99_ms``). What a loaded giver and publisher
    cost any view meanwhile, moved or not: the move's own share of a moved view's pause is
    what exceeds it."""
    pauses = []
    for f in stayed:
        at = [update.received_at for update in f.updates]
        normal = normal_interval([t for t in at if t <= start])
        gaps = [at[i] - at[i - 1] for i in range(1, len(at)) if start < at[i] <= end]
        if gaps:
            pauses.append(max(max(gaps) - normal, 0.0) * 1000)
    return {
        "split_pause_stayed_p50_ms": _percentile(pauses, 50),
        "split_pause_stayed_p99_ms": _percentile(pauses, 99),
    }


def phases(
    moved: list[Followed],
    redirected: dict[int, float],
    held: dict[int, float],
    timeline: Timeline,
) -> dict[str, Any]:
    """Where a moved view's pause goes (``split_phase_*``, each p50 and p99 over the moved
    views, ms): from its last update before the move to the redirect reaching it (``quiet``:
    the giver had stopped serving it, or had nothing new), the redirect to the new relay's
    answer (``rehome``: a connection there, the subscription answered), and that answer to its
    first update there (``first``: the cell acquired upstream, the missed seqs caught up). And
    from the standby's own figures, sampled (ms after the first redirect): its first new
    primitive, its last primitive pending, its first curiosity request; with the load."""
    quiet, rehome, first = [], [], []
    for f in moved:
        at = redirected[id(f.view)]
        index = f.moved_after(at)
        if index <= 0 or id(f.view) not in held:
            continue
        quiet.append((at - f.updates[index - 1].received_at) * 1000)
        rehome.append((held[id(f.view)] - at) * 1000)
        first.append((f.updates[index].received_at - held[id(f.view)]) * 1000)
    start = min(redirected.values())
    end = max(f.updates[f.moved_after(redirected[id(f.view)])].received_at for f in moved)
    acquired = timeline.value("standby", "primitives_acquired_total", start - 1.0)
    asked = timeline.value("standby", "curiosity_asked_total", start - 1.0)
    loads = timeline.loads(start - 5.0, end + 5.0) or [os.getloadavg()[0]]
    out: dict[str, Any] = {}
    for name, values in (("quiet", quiet), ("rehome", rehome), ("first", first)):
        out[f"split_phase_{name}_p50_ms"] = _percentile(values, 50)
        out[f"split_phase_{name}_p99_ms"] = _percentile(values, 99)
    out["split_standby_first_acquired_ms"] = (
        timeline.first("standby", "primitives_acquired_total", acquired, start - 1.0) - start
    ) * 1000
    out["split_standby_acquired"] = (
        timeline.value("standby", "primitives_acquired_total", end) - acquired
    )
    out["split_standby_last_pending_ms"] = (
        timeline.last_change("standby", "primitives_pending", start - 1.0) - start
    ) * 1000
    out["split_standby_first_curiosity_ms"] = (
        timeline.first("standby", "curiosity_asked_total", asked, start - 1.0) - start
    ) * 1000
    out["split_standby_curiosity_asked"] = (
        timeline.value("standby", "curiosity_asked_total", end) - asked
    )
    out["split_micro_batch_seconds"] = timeline.micro_batch_seconds(start - 5.0, end)
    out["split_load_average"] = {"min": min(loads), "max": max(loads)}
    return out


def late(
    moved: list[Followed], stayed: list[Followed], redirected: dict[int, float]
) -> dict[str, Any]:
    """How much later a moved view got its first seq at the standby than the views that stayed
    at the giver got the same seq (``split_phase_late_*``: p50 and p99, ms; the median arrival
    over the views that stayed), and the share of moved views whose first seq there the giver
    had pushed to the views that stayed before the redirect reached them (``split_behind``: the
    view was a seq or more behind when it moved)."""
    arrivals: dict[tuple[int, int], list[float]] = {}
    for f in stayed:
        for update in f.updates:
            arrivals.setdefault((update.epoch, update.seq), []).append(update.received_at)
    typical = {stamp: float(np.median(at)) for stamp, at in arrivals.items()}
    lateness, behind, counted = [], 0, 0
    for f in moved:
        index = f.moved_after(redirected[id(f.view)])
        if index <= 0:
            continue
        first = f.updates[index]
        there = typical.get((first.epoch, first.seq))
        if there is None:
            continue
        counted += 1
        lateness.append((first.received_at - there) * 1000)
        behind += there < redirected[id(f.view)]
    return {
        "split_phase_late_p50_ms": _percentile(lateness, 50),
        "split_phase_late_p99_ms": _percentile(lateness, 99),
        "split_behind": behind / counted if counted else float("nan"),
    }


def split_logged(giver_log: Path, first_redirect: float) -> dict[str, float]:
    """From the giver's JSON log: ms from its split's assignment (logged once written) to the
    first redirect a subscriber got (``split_handover_ms``: the standby warming the parts
    while the giver kept serving them; nan if not logged)."""
    for line in giver_log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if str(record.get("message", "")).startswith("split: "):
                at = dt.datetime.fromisoformat(record["time"]).timestamp()
                return {"split_handover_ms": (first_redirect - at) * 1000}
    return {"split_handover_ms": float("nan")}


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


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


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
