"""``bench/cluster.py``'s tier case: the flat and the tiered deployment side by side on one
publisher, their subscribers (in a process per deployment, or in this one), and one run's
window: the publisher's egress to each, latencies, the tier's hop tick by tick (``tierhops``)."""

import asyncio
import contextlib
import gc
import multiprocessing
import os
import time
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

import tierhops
from fanout.client import LiveView, connect
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.views import Box

EDGES = 8
MIDS = 2
SETTLE = 5.0
#: The shortest garbage collection of a subscriber process the tier runs note (s).
GC_NOTED = 0.005


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
                "relay",
                [*args, "--port", "0", "--name", name, "--workers", "1"],
                logs / f"{name}.log",
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
        result[f"latency_{side}_p50_ms"] = percentile(seen.latencies, 50)
        result[f"latency_{side}_p99_ms"] = percentile(seen.latencies, 99)
    result["tier_latency_p50_ms"] = percentile(extra, 50)
    result["tier_latency_p99_ms"] = percentile(extra, 99)
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


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (nan if none)."""
    return float(np.percentile(values, q)) if values else float("nan")
