"""Benchmark sharing (issue 4): the publisher's egress and CPU as subscribers grow, through
relays and directly.

Run ``.venv/bin/python bench/sharing.py`` (``--steps 100,1000,10000``, ``--duration`` seconds per
window, ``--compare-assign``, ``--assign``, ``--no-registry``, ``--registry-policy``, ``--widen``,
``--margin``, ``--overshoot``); it prints one JSON object and, with the default steps and
configuration, writes ``bench/results/sharing.json``. The default configuration is what a user
gets from ``fanout relay --publisher ... --registry ...`` with no tuning flag, subscribers
entering round robin. Processes, all on this machine and sharing its cores:

* **publisher**: the real ``fanout publisher`` (``fanout.launch``) on Spark ``local[2]``, serving
  the built-in ``agents`` simulation (``AGENTS`` agents in a 1,000 x 1,000 world, 10 ticks/s,
  each moving every ``PERIOD`` ticks, so every agent moves once a second) with a micro-batch
  every ``TRIGGER`` seconds: every micro-batch carries every agent once, and as long as Spark
  keeps up the micro-batch rate is the same in every case, so bytes per second compare. A
  publisher slowed down by its relays would show as fewer micro-batches per second (reported).
  One publisher serves every step; between steps its relays disconnect and their primitives
  are dropped.
* **subscribers**: N box views drawn around ``POINTS`` fixed points of interest (seeded): each
  subscriber picks a point, a side in [``VIEW_SIDE``/2, ``VIEW_SIDE``] and an offset of at most a
  quarter side, so its box contains the point; overlap grows with N. The first 100 subscribers
  of the 1,000 are those of the 100, and so on. Views do not move.
* **relay case**: ``RELAYS`` real relays (``fanout.relay.shell.server.RelayServer`` with the
  configuration ``fanout relay`` runs with: in a map of responsibility ``fit`` widening with
  margin 0.075, alone ``tiles`` with margin 0.5, grace 10 s: ``RelayConfig.planning``;
  ``--widen``, ``--margin`` and ``--overshoot`` change the widening policy as ``fanout relay``'s
  do), each in a process of its own, answering the benchmark's requests for
  ``RelayCore.stats()`` and CPU time.
  Subscriber ``i`` goes to relay ``i mod RELAYS`` (*spread*: what a load balancer does);
  ``--assign area`` puts each on the relay ``fanout.client.rank`` ranks first for its view
  (fanout's routing by area, grid side ``--area``), ``--assign key`` on the relay it ranks
  first for the subscriber's routing key, its point of interest (fanout's routing by key,
  ``fanout subscribe --route key --key point-P``), and ``--assign point`` point ``p``'s
  subscribers on relay ``p mod RELAYS`` (the benchmark's own assignment, balanced exactly).
  By default the relays share a map of responsibility in a Redis Cluster started for the run
  (``fanout relay --registry``, grid side ``--area``) and redirect each subscription to the
  relay responsible for its view's cell; the client process follows the redirects as
  ``fanout.client.following`` does (one more connection from a subscriber connection to each relay
  it is sent to), so subscribers entering round robin (``spread``) meet where the map says.
  ``--registry-policy forward`` forwards instead; ``--no-registry`` runs relays alone, each
  serving whoever enters it. ``relays_per_point``: over the points of interest, the mean
  number of relays their subscribers were served by (1: each place fetched by one relay).
  With ``--compare-assign [ASSIGN]`` the relay case is run a second time with that assignment
  (default ``point``): every point's subscribers on one relay, the founding document's "hosts
  specialised to a set of views with a high degree of overlap".
  The subscriptions (``Subscribe`` at ``PUSH_RATE`` pushes/s, real protocol, real WebSockets)
  are multiplexed, ``--per-connection`` to a connection, over connections opened by one client
  process that decodes only each frame's header.
* **direct case**: what the same subscribers would cost the publisher if each held its box at
  the publisher itself. The client process opens relay-role connections to the publisher and
  ``Acquire``s exactly each subscriber's box. The publisher sends a row once per connection
  even if several of its primitives hold it, so a connection holds at most one box per point
  of interest and points are far enough apart that boxes of different points never meet: no
  row is shared within a connection, and every subscriber's rows are paid for in full, as if it
  had a connection of its own. What this leaves out — the per-connection cost of N connections
  instead of about N / ``POINTS`` (empty batches, framing, one ``Batch`` built per connection) —
  makes the direct case cheaper than it would be, not dearer.

Per step and case, once every subscription has had its first push (relay case) or every
primitive its snapshot (direct case), and ``--settle`` seconds more, one window measures. A
window spans whole micro-batches: it opens ``WINDOW_EDGE`` seconds after the publisher logged
handing one over and closes as long after the one ``--duration`` / ``TRIGGER`` micro-batches
later, so that exactly those micro-batches' bytes fall inside it.

* ``egress_bytes_per_s``: bytes the publisher's control-plane sockets delivered, as the kernel
  counts them (``bytes_acked`` of every TCP connection to the publisher's port, from
  ``ss -ti``): batches, with their WebSocket framing, and nothing else of note (the relays
  send their acquires *to* it). The direct case also reports ``received_bytes_per_s``, the
  batch frames the client process counted, as a cross-check.
* ``publisher_cpu_s_per_s``: CPU seconds per second of the publisher's process tree (the Python
  driver, Spark's JVM, its child, and the Python workers the JVM forks), from
  ``/proc/<pid>/stat``: utime + stime, plus cutime + cstime for workers that have exited.
* ``primitives``: upstream primitives held at the publisher (relay case: the relays' own count;
  direct case: primitives whose snapshot arrived).
* ``primitives_acquired`` (relay case): primitives the relays acquired since they started for
  the step, each a snapshot the publisher cut; with ``enclose`` widening every growth of an
  enclosure is one.
* ``egress_bytes_per_micro_batch``, ``micro_batches_per_s`` (the window's micro-batches over
  its length); ``stages_ms``: median per-stage timings the publisher logged for them.
* relay case: the relays' CPU, pushes and no-updates per second, and the client process's CPU.

Headline: ``egress_ratio_relay`` and ``egress_ratio_direct`` are egress at the last step over
egress at the step before (10,000 / 1,000 by default); ``savings_at_10000`` is direct egress over
relay egress at the last step. Targets: ``egress_ratio_relay`` <= 1.2, ``savings_at_10000`` >= 50.
``per_micro_batch`` gives the same from bytes per micro-batch, which differences in Spark's pace
between windows (a shared machine) do not move, and whether each target is met by them.

A bound worth knowing when reading them: when every relay serves subscribers of every point
(relays alone, spread, from about 1,000 subscribers on), each relay holds at least one view
around every point, so relay egress is at least ``RELAYS`` x ``POINTS`` x one view's rows, and
savings at N cannot exceed N / (``RELAYS`` x ``POINTS``) — 50 at 10,000 — times (a view's
rows / the rows a relay holds around its point). Tiles widening makes that last factor well
below 1. In a map each point's subscribers meet at one relay, which lifts the bound by
``RELAYS``; ``bench/sharingmodel.py`` says where the bytes go, configuration by configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from fanout.client import rank
from fanout.client.routing import DEFAULT_SIDE
from fanout.launch import Child, Children
from fanout.relay.config import Cluster, Planning, RelayConfig, Upstream
from fanout.relay.core.planner import IN_A_MAP, WIDENINGS, Policy
from fanout.testing import frames
from fanout.testing.calibration import calibrate
from fanout.testing.cpu import process_tree, this_process
from fanout.testing.machine import describe, write_results
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.relays import RelayProcess, RelaySample
from fanout.testing.sharing import AGENTS, POINTS, RELAYS, VIEW_SIDE, WORLD, Views
from fanout.testing.wait import NotYet, eventually
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Acquire, Hello, Subscribe

RESULTS = Path(__file__).parent / "results" / "sharing.json"

DEFAULT_STEPS = (100, 1000, 10000)
TICK_RATE = 10.0
PERIOD = 10  # each agent moves once a second, so once per micro-batch: 20,000 updates/s
TRIGGER = 2.0  # seconds between micro-batches: Spark keeps up even on a busy machine
WINDOW_EDGE = 0.3  # seconds after a micro-batch is handed over that a window opens or closes
MASTER = "local[2]"
# Pushes/s per subscription: the relays' pushing is not what is measured, and at 10,000
# subscriptions a higher rate would take the cores the publisher needs.
PUSH_RATE = 0.1
PER_CONNECTION = 50  # subscriptions per subscriber connection
CONNECT_CONCURRENCY = 32
READY_TIMEOUT = 180.0
TARGET_EGRESS_RATIO = 1.2
TARGET_SAVINGS = 50.0

BATCH_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*agents batch (?P<seq>\d+) tick \d+:"
    r" (?P<changed>\d+) changed, (?P<relays>\d+) relays; (?P<rest>.*)$"
)
STAGE = re.compile(r"(?P<name>[a-z+]+) (?P<ms>\d+) ms")


def relay_plan(
    views: Views, count: int, assign: str, per_connection: int, area: float = DEFAULT_SIDE
) -> list[dict[str, Any]]:
    """Subscriber connections of the relay case: ``{"relay": r, "views": [[sub, box], ...]}``.

    ``assign``: ``spread`` (subscriber i on relay i mod RELAYS), ``point`` (point p's
    subscribers on relay p mod RELAYS), ``area`` (``fanout.client.rank`` with a grid of side
    ``area``) or ``key`` (``fanout.client.rank`` by the routing key ``point-P``); ranks are
    over stable relay names standing for their URLs.
    """
    names = [f"relay-{number}" for number in range(RELAYS)]
    by_relay: list[list[int]] = [[] for _ in range(RELAYS)]
    for index in range(count):
        if assign == "spread":
            relay = index % RELAYS
        elif assign == "point":
            relay = int(views.point[index]) % RELAYS
        else:
            box = Box(tuple(views.lo[index]), tuple(views.hi[index]))
            key = f"point-{views.point[index]}" if assign == "key" else None
            relay = names.index(rank(names, box, area, key)[0])
        by_relay[relay].append(index)
    plan = []
    for relay, members in enumerate(by_relay):
        for start_at in range(0, len(members), per_connection):
            chunk = members[start_at : start_at + per_connection]
            plan.append({"relay": relay, "views": [[i, views.box(i)] for i in chunk]})
    return plan


def direct_plan(views: Views, count: int) -> list[dict[str, Any]]:
    """Relay-role connections of the direct case: the k-th subscriber of each point goes to
    connection k, so no connection holds two boxes that meet (see the module docstring)."""
    seen = np.zeros(POINTS, dtype=np.int64)
    connections: list[list[int]] = []
    for index in range(count):
        point = int(views.point[index])
        rank = int(seen[point])
        seen[point] += 1
        if rank == len(connections):
            connections.append([])
        connections[rank].append(index)
    for members in connections:
        assert_disjoint(views, members)
    return [{"views": [[i, views.box(i)] for i in members]} for members in connections]


def assert_disjoint(views: Views, members: list[int]) -> None:
    """No two boxes of ``members`` meet (a row inside both would be sent only once)."""
    lo, hi = views.lo[members], views.hi[members]
    meets = np.all((lo[:, None, :] <= hi[None, :, :]) & (hi[:, None, :] >= lo[None, :, :]), axis=2)
    np.fill_diagonal(meets, False)
    if meets.any():
        raise AssertionError("two boxes on one direct connection meet")


# -- the client process -------------------------------------------------------------------------


@dataclass
class Received:
    """What the client process saw: every counted frame's time and size, first pushes, errors."""

    times: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    connections: list[int] = field(default_factory=list)
    total: int = 0
    started: set[int] = field(default_factory=set)  # subs with a push / prims with a snapshot
    complete: asyncio.Event = field(default_factory=asyncio.Event)
    errors: list[str] = field(default_factory=list)
    redirects: int = 0
    closed: list[str] = field(default_factory=list)
    cpu: list[tuple[float, float]] = field(default_factory=list)
    placed: dict[int, str] = field(default_factory=dict)  # sub -> the relay its pushes came from

    def record(self, connection: int, size: int) -> None:
        self.times.append(time.time())
        self.sizes.append(size)
        self.connections.append(connection)

    def start(self, ids: list[int]) -> None:
        self.started.update(ids)
        if len(self.started) >= self.total:
            self.complete.set()

    def error(self, head: frames.Head) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"{head.code}: {head.message} (ref {head.ref})")


async def subscriber_connection(
    number: int,
    url: str,
    views: list[Any] | asyncio.Queue[Any],
    *,
    rate: float,
    seen: Received,
    gate: asyncio.Semaphore,
) -> None:
    """One subscriber connection holding ``views`` (a list, or a queue of views redirected to
    it); counts pushes and no-updates. A redirected view is subscribed again over one more
    connection to the relay named (``fanout.client.following``'s way), opened at the first."""
    async with gate:
        websocket = await connect(url, max_size=None, compression=None, open_timeout=120)
    boxes: dict[int, Any] = {}
    followed: dict[str, asyncio.Queue[Any]] = {}
    async with websocket, asyncio.TaskGroup() as tasks:
        await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber", "bench")))
        await websocket.recv()  # welcome

        async def send(sub: int, lo: list[float], hi: list[float]) -> None:
            boxes[sub] = [lo, hi]
            request = Subscribe(sub, "agents", Box(tuple(lo), tuple(hi)), rate=rate)
            await websocket.send(codec.encode(request))

        async def sends(queue: asyncio.Queue[Any]) -> None:
            while True:
                sub, (lo, hi) = await queue.get()
                await send(sub, lo, hi)

        if isinstance(views, asyncio.Queue):
            tasks.create_task(sends(views))
        else:
            for sub, (lo, hi) in views:
                await send(sub, lo, hi)
        async for message in websocket:
            head = frames.head(message)
            if head.type in ("push", "no_update"):
                seen.record(number, len(message))
                seen.start([head.sub])
                seen.placed.setdefault(head.sub, url)
            elif head.type == "error" and head.code == "redirect" and head.location:
                seen.redirects += 1
                queue = followed.get(head.location)
                if queue is None:
                    queue = followed[head.location] = asyncio.Queue()
                    tasks.create_task(
                        subscriber_connection(
                            number, head.location, queue, rate=rate, seen=seen, gate=gate
                        )
                    )
                queue.put_nowait([head.ref, boxes[head.ref or 0]])
            elif head.type == "error":
                seen.error(head)


async def direct_connection(
    number: int, url: str, views: list[Any], *, seen: Received, gate: asyncio.Semaphore
) -> None:
    """One relay-role connection to the publisher acquiring exactly ``views``; counts batches."""
    async with gate:
        websocket = await connect(url, max_size=None, compression=None, open_timeout=120)
    async with websocket:
        hello = Hello(PROTOCOL_VERSION, "relay", f"bench-direct-{number}")
        await websocket.send(codec.encode(hello))
        for sub, (lo, hi) in views:
            acquire = Acquire(sub + 1, "agents", Box(tuple(lo), tuple(hi)))
            await websocket.send(codec.encode(acquire))
        async for message in websocket:
            head = frames.head(message)
            if head.type == "batch":
                seen.record(number, len(message))
                seen.start(head.snapshots)
            elif head.type == "error":
                seen.error(head)


async def run_clients(spec: dict[str, Any]) -> dict[str, Any]:
    """Open every connection of ``spec``, say ``ready`` on stdout, record until SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    total = sum(len(c["views"]) for c in spec["connections"])
    seen = Received(total=total)
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def one(number: int, connection: dict[str, Any]) -> None:
        views = connection["views"]
        try:
            if spec["mode"] == "direct":
                await direct_connection(number, spec["url"], views, seen=seen, gate=gate)
            else:
                url = spec["relays"][connection["relay"]]
                await subscriber_connection(
                    number, url, views, rate=spec["rate"], seen=seen, gate=gate
                )
        except Exception as exc:  # recorded; the coordinator reports it
            seen.closed.append(f"connection {number}: {type(exc).__name__}: {exc}")
        else:
            seen.closed.append(f"connection {number}: closed by the peer")

    tasks = [asyncio.create_task(one(n, c)) for n, c in enumerate(spec["connections"])]
    began = time.time()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(seen.complete.wait(), READY_TIMEOUT)
    ready = {"ready": len(seen.started), "total": total, "seconds": round(time.time() - began, 1)}
    print(json.dumps(ready), flush=True)
    while not stop.is_set():
        now = this_process()
        seen.cpu.append((now.at, now.seconds))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "ready": ready,
        "times": seen.times,
        "sizes": seen.sizes,
        "connections": seen.connections,
        "errors": seen.errors,
        "redirects": seen.redirects,
        "closed": seen.closed,
        "cpu": seen.cpu,
        "placed": seen.placed,
    }


# -- the relays ----------------------------------------------------------------------------------


@dataclass
class Relays:
    """The relay processes of one step (``fanout relay``'s server, ``fanout.testing.relays``)."""

    processes: list[RelayProcess]
    urls: list[str]

    @classmethod
    async def start(
        cls,
        publisher: str,
        logs: Path,
        policy: Policy | None,
        registry: str | None = None,
        side: float = DEFAULT_SIDE,
        *,
        registry_policy: str = "redirect",
    ) -> Relays:
        """Start ``RELAYS`` relays (in the map of ``registry`` if given; ``policy`` None: their
        default, ``RelayConfig.policy``); returns once each serves and is connected
        upstream."""
        processes = [
            RelayProcess(
                RelayConfig(
                    Upstream(publisher),
                    name=f"bench-relay-{index}",
                    planning=Planning(policy),
                    cluster=Cluster(registry, policy=registry_policy, side=side),
                ),
                log=logs / f"relay-{index}.log",
                level=logging.INFO,
            )
            for index in range(RELAYS)
        ]
        relays = cls(processes, [])
        try:
            relays.urls = [await asyncio.to_thread(process.ready) for process in processes]
        except BaseException:
            await relays.stop()
            raise
        return relays

    async def sample(self) -> list[RelaySample]:
        """The CPU time and counters of every relay."""
        return [await asyncio.to_thread(process.sample) for process in self.processes]

    async def stop(self) -> None:
        """Stop every relay (killing any that does not stop within 10 s)."""
        for process in self.processes:
            await asyncio.to_thread(process.stop)


# -- measuring the publisher ---------------------------------------------------------------------


def socket_bytes(port: int) -> dict[str, int]:
    """Bytes acknowledged so far on every established TCP connection from local ``port``,
    keyed by the peer's address (``ss -ti``: the kernel's own count)."""
    output = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts: dict[str, int] = {}
    peer = None
    for line in output.splitlines():
        if line and not line[0].isspace():
            peer = line.split()[-1]
        elif peer is not None and (found := re.search(r"bytes_acked:(\d+)", line)):
            counts[peer] = int(found[1])
    return counts


@dataclass
class Sample:
    """The publisher and relays at one moment."""

    at: float
    sockets: dict[str, int]
    cpu: float
    relays: list[RelaySample]


async def sample(publisher: Child, port: int, relays: Relays | None) -> Sample:
    """Sample the publisher's sockets and CPU and, if any, the relays."""
    relay_samples = await relays.sample() if relays else []
    return Sample(
        time.time(), socket_bytes(port), process_tree(publisher.pid).seconds, relay_samples
    )


def egress(before: Sample, after: Sample) -> int:
    """Bytes the publisher delivered between two samples, over every connection."""
    return sum(count - before.sockets.get(peer, 0) for peer, count in after.sockets.items())


def publisher_stages(log: Path, began: float, ended: float) -> dict[str, Any]:
    """Micro-batches the publisher logged in the window and their median stage timings."""
    stages: dict[str, list[float]] = {}
    batches = 0
    for line in log.read_text(errors="replace").splitlines():
        found = BATCH_LINE.search(line)
        if not found:
            continue
        at = dt.datetime.strptime(found["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if not began <= at < ended:
            continue
        batches += 1
        for stage in STAGE.finditer(found["rest"]):
            stages.setdefault(stage["name"], []).append(float(stage["ms"]))
    medians = {name: round(statistics.median(values), 1) for name, values in stages.items()}
    return {"logged_micro_batches": batches, "stages_ms": medians}


class BatchLines:
    """Follows the publisher's log for the line it writes once a micro-batch is handed over."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.seen = 0

    def _read(self) -> None:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        complete = data.rfind(b"\n") + 1
        self.seen += data[:complete].count(b"agents batch ")
        self.offset += complete

    def _count(self) -> int:
        self._read()
        return self.seen

    async def after(self, count: int, timeout: float = 120.0) -> None:
        """Return ``WINDOW_EDGE`` seconds after the ``count``-th micro-batch from now is sent.

        Raises:
            NotYet: the publisher did not log them within ``timeout`` seconds.
        """
        target = await asyncio.to_thread(self._count) + count
        await eventually(
            self._count,
            lambda seen: seen >= target,
            timeout=timeout,
            in_thread=True,
            what=f"{count} more micro-batches logged by the publisher",
        )
        await asyncio.sleep(WINDOW_EDGE)


# -- one step ------------------------------------------------------------------------------------


async def run_clients_process(spec: dict[str, Any], workdir: Path, name: str) -> ClientProcess:
    """Start the client process for ``spec``; returns once it says ``ready``."""
    spec_path, out = workdir / f"{name}.spec.json", workdir / f"{name}.out.json"
    spec_path.write_text(json.dumps(spec))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "clients",
        str(spec_path),
        str(out),
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT + 120)
    if not line:
        status = await process.wait()
        raise RuntimeError(f"{name}: the client process exited ({status}) before it was ready")
    return ClientProcess(process, out, json.loads(line))


@dataclass
class ClientProcess:
    """A running client process and what it said when ready."""

    process: asyncio.subprocess.Process
    out: Path
    ready: dict[str, Any]

    async def stop(self) -> dict[str, Any]:
        """SIGTERM it and read its records."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 60)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        return dict(json.loads(self.out.read_text()))


async def measure_step(
    *,
    case: str,
    count: int,
    publisher: Child,
    port: int,
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Any]:
    """One case (``relay``, ``direct`` or ``relay-by-`` the compared assignment) at ``count``
    subscribers."""
    views = Views.draw(max(args.steps))
    name = f"{case}-{count}"
    logs = workdir / name
    logs.mkdir(parents=True, exist_ok=True)
    relays: Relays | None = None
    clients: ClientProcess | None = None
    try:
        if case == "direct":
            connections = direct_plan(views, count)
            spec = {"mode": "direct", "url": publisher.url, "connections": connections}
        else:
            policy = relay_policy(args)
            relays = await Relays.start(
                publisher.url,
                logs,
                policy,
                args.registry_url,
                args.area,
                registry_policy=args.registry_policy,
            )
            assign = args.assign if case == "relay" else args.compare_assign
            connections = relay_plan(views, count, assign, args.per_connection, args.area)
            spec = {
                "mode": "relay",
                "relays": relays.urls,
                "rate": args.rate,
                "connections": connections,
            }
        clients = await run_clients_process(spec, workdir, name)
        await asyncio.sleep(args.settle)
        # The window spans whole micro-batches: it opens just after one was sent and closes
        # just after the ``batches``-th one after it, so exactly those are counted.
        batches = max(1, round(args.duration / TRIGGER))
        lines = BatchLines(publisher.log)
        await lines.after(1)
        before = await sample(publisher, port, relays)
        await lines.after(batches)
        after = await sample(publisher, port, relays)
        records = await clients.stop()
        clients = None
    finally:
        if clients is not None:
            await clients.stop()
        if relays is not None:
            await relays.stop()
    result = summarise(
        case=case,
        count=count,
        connections=len(connections),
        batches=batches,
        window=(before, after),
        records=records,
    )
    result |= publisher_stages(publisher.log, before.at, after.at)
    if case != "direct":
        result["relays_per_point"] = relays_per_point(views, records["placed"])
    print(json.dumps(result), file=sys.stderr, flush=True)
    await asyncio.sleep(2.0)  # the publisher drops the connections and their primitives
    return result


def relays_per_point(views: Views, placed: dict[str, str]) -> float | None:
    """Over the points of interest with a subscriber placed, the mean number of relays serving
    their subscribers (``placed``: subscriber, as JSON text, -> the relay's URL)."""
    served: dict[int, set[str]] = {}
    for sub, url in placed.items():
        served.setdefault(int(views.point[int(sub)]), set()).add(url)
    if not served:
        return None
    return round(statistics.mean(len(urls) for urls in served.values()), 3)


def summarise(
    *,
    case: str,
    count: int,
    connections: int,
    batches: int,
    window: tuple[Sample, Sample],
    records: dict[str, Any],
) -> dict[str, Any]:
    """The numbers of one window of ``batches`` micro-batches (see the module docstring)."""
    before, after = window
    wall = after.at - before.at
    times = np.array(records["times"], dtype=np.float64)
    sizes = np.array(records["sizes"], dtype=np.float64)
    inside = (times >= before.at) & (times < after.at)
    cpu = [(t, c) for t, c in records["cpu"] if before.at <= t <= after.at]
    clients_cpu = (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]) if len(cpu) > 1 else None
    sent = egress(before, after)
    result: dict[str, Any] = {
        "case": case,
        "subscribers": count,
        "connections": connections,
        "egress_bytes_per_s": round(sent / wall),
        "egress_bytes_per_micro_batch": round(sent / batches),
        "publisher_cpu_s_per_s": round((after.cpu - before.cpu) / wall, 3),
        "publisher_connections": len(after.sockets),
        "window_s": round(wall, 1),
        "micro_batches": batches,
        "micro_batches_per_s": round(batches / wall, 3),
        "ready": records["ready"],
        "clients_cpu_s_per_s": None if clients_cpu is None else round(clients_cpu, 3),
        "errors": records["errors"],
        "redirects": records.get("redirects", 0),
        "closed": [c for c in records["closed"] if "CancelledError" not in c],
    }
    if case == "direct":
        result |= {
            "primitives": records["ready"]["ready"],
            "batches_received_per_connection": round(float(inside.sum()) / connections, 1),
            "received_bytes_per_s": round(float(sizes[inside].sum()) / wall),
        }
    else:
        relays = [
            {key: a.stats[key] - b.stats.get(key, 0) for key in a.stats}
            for b, a in zip(before.relays, after.relays, strict=True)
        ]
        result |= {
            "primitives": sum(a.stats["primitives"] for a in after.relays),
            # since the relays started, at this step: each one a snapshot the publisher cut
            "primitives_acquired": sum(a.stats["primitives_acquired"] for a in after.relays),
            "batches_received_per_relay": statistics.mean(r["batches"] for r in relays),
            "relay_rows": [a.stats["rows"] for a in after.relays],
            "relays_cpu_s_per_s": round(
                sum(
                    a.cpu.seconds - b.cpu.seconds
                    for b, a in zip(before.relays, after.relays, strict=True)
                )
                / wall,
                3,
            ),
            "pushes_per_s": round(sum(r["pushes"] + r["no_updates"] for r in relays) / wall),
            "received_frames_per_s": round(float(inside.sum()) / wall),
        }
    return result


# -- the run -------------------------------------------------------------------------------------


async def start_publisher(
    children: Children, workdir: Path, args: argparse.Namespace
) -> tuple[Child, int]:
    """``fanout publisher`` with the simulation of this benchmark; returns it and its port."""
    arguments = [
        "--master",
        MASTER,
        "--port",
        "0",
        "--state-dir",
        str(workdir / "publisher"),
        "--agents",
        str(args.agents),
        "--world",
        str(WORLD),
        "--tick-rate",
        str(TICK_RATE),
        "--period",
        str(PERIOD),
        "--trigger",
        str(TRIGGER),
        "--log-level",
        "info",
    ]
    publisher = await children.start("publisher", arguments, workdir / "publisher.log")
    port = int(publisher.url.rsplit(":", 1)[1])
    # Let Spark's first micro-batches (which cover its start-up's ticks) go by; a slow start
    # shows in the steps' micro-batch rates, not as a failure.
    with contextlib.suppress(NotYet):
        await eventually(
            lambda: publisher.log.read_text(errors="replace").count("agents batch ") >= 10,
            timeout=120,
            every=1.0,
            in_thread=True,
        )
    await asyncio.sleep(args.settle)
    return publisher, port


def relay_policy(args: argparse.Namespace) -> Policy | None:
    """The relays' policy from ``--widen``, ``--margin`` and ``--overshoot`` as ``fanout relay``
    makes it from its flags (``cli.relay.policy_given``); None when none is given."""
    given = {
        name: getattr(args, name)
        for name in ("widen", "margin", "overshoot")
        if getattr(args, name) is not None
    }
    if not given:
        return None
    base = IN_A_MAP if args.registry and "widen" not in given else Policy()
    return dataclasses.replace(base, **given)


def effective_policy(args: argparse.Namespace) -> Policy:
    """The policy the relays plan with (``RelayConfig.planning``)."""
    given = relay_policy(args)
    if given is not None:
        return given
    return IN_A_MAP if args.registry else Policy()


def ratio(steps: list[dict[str, Any]], key: str = "egress_bytes_per_s") -> float | None:
    """``key`` at the last step over ``key`` at the step before."""
    if len(steps) < 2 or not steps[-2][key] or steps[-1][key] is None:
        return None
    return round(steps[-1][key] / steps[-2][key], 3)


def savings(
    direct: list[dict[str, Any]], relay: list[dict[str, Any]], key: str = "egress_bytes_per_s"
) -> float | None:
    """Direct egress over relay egress (``key``) at the last step."""
    if not relay[-1][key] or direct[-1][key] is None:
        return None
    return round(direct[-1][key] / relay[-1][key], 2)


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every step, each case in turn (so a drift of the machine touches all of them)."""
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    compared = f"relay-by-{args.compare_assign}"
    cases = ["relay", "direct"] + ([compared] if args.compare_assign else [])
    async with Children() as children:
        publisher, port = await start_publisher(children, workdir, args)
        results: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        try:
            for count in args.steps:
                for case in cases:
                    step = await measure_step(
                        case=case,
                        count=count,
                        publisher=publisher,
                        port=port,
                        args=args,
                        workdir=workdir,
                    )
                    results[case].append(step)
        finally:
            await publisher.stop()
    relay, direct = results["relay"], results["direct"]
    ratio_relay, saved = ratio(relay), savings(direct, relay)
    per_batch = "egress_bytes_per_micro_batch"
    ratio_per_batch = ratio(relay, per_batch)
    saved_per_batch = savings(direct, relay, per_batch)
    out: dict[str, Any] = {
        "egress_ratio_relay": ratio_relay,
        "egress_ratio_direct": ratio(direct),
        "savings_at_10000": saved,
        "ratio_steps": list(args.steps[-2:]),
        "targets": {
            "egress_ratio_relay_max": TARGET_EGRESS_RATIO,
            "egress_ratio_relay_met": ratio_relay is not None
            and ratio_relay <= TARGET_EGRESS_RATIO,
            "savings_at_10000_min": TARGET_SAVINGS,
            "savings_at_10000_met": saved is not None and saved >= TARGET_SAVINGS,
        },
        # The same from bytes per micro-batch: free of differences in micro-batch rate
        # between windows (the machine is shared; Spark's pace varies with its load).
        "per_micro_batch": {
            "egress_ratio_relay": ratio_per_batch,
            "egress_ratio_direct": ratio(direct, per_batch),
            "savings_at_10000": saved_per_batch,
            "egress_ratio_relay_met": ratio_per_batch is not None
            and ratio_per_batch <= TARGET_EGRESS_RATIO,
            "savings_at_10000_met": saved_per_batch is not None
            and saved_per_batch >= TARGET_SAVINGS,
        },
        "relay": relay,
        "direct": direct,
    }
    if args.compare_assign:
        compared_steps = results[compared]
        out[compared.replace("-", "_")] = {
            "egress_ratio": ratio(compared_steps),
            "savings_at_10000": savings(direct, compared_steps),
            "per_micro_batch": {
                "egress_ratio": ratio(compared_steps, per_batch),
                "savings_at_10000": savings(direct, compared_steps, per_batch),
            },
            "steps": compared_steps,
        }
    return out


METHOD = (
    "One real Spark publisher (fanout publisher, local[2], micro-batch every {trigger:g} s) for"
    " every step. Relay case: {relays} real relays (RelayServer, fanout relay's defaults) in"
    " processes of their own; N subscriptions (Subscribe at {rate:g} pushes/s) over"
    " WebSocket connections of {per_connection} subscriptions each, from one client process,"
    " subscribers on relays by {assign}. Direct case: the same N boxes acquired at the"
    " publisher over relay-role connections (Hello role=relay, one Acquire per box), the k-th"
    " subscriber of each point of interest on connection k, so no connection holds two boxes"
    " that meet and every box's rows are sent in full; this leaves out the per-connection cost of"
    " N connections, which favours the direct case. Egress: bytes_acked of every TCP connection"
    " of the publisher's control-plane port (ss -ti), delta over the window. Publisher CPU:"
    " utime+stime of the publisher process and its descendants (Spark's JVM) from /proc."
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=lambda text: [int(v) for v in text.split(",")],
        default=list(DEFAULT_STEPS),
        help="subscriber counts, comma-separated (default: 100,1000,10000)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=30.0,
        help=f"seconds per window, rounded to whole micro-batches ({TRIGGER:g} s each)",
    )
    parser.add_argument("--settle", type=float, default=4.0, help="seconds before a window")
    parser.add_argument("--rate", type=float, default=PUSH_RATE, help="pushes/s per subscription")
    parser.add_argument("--per-connection", type=int, default=PER_CONNECTION)
    parser.add_argument("--agents", type=int, default=AGENTS)
    assignments = ("spread", "point", "area", "key")
    parser.add_argument(
        "--compare-assign",
        nargs="?",
        const="point",
        choices=assignments,
        help="also run the relay case with this assignment (default: point)",
    )
    parser.add_argument(
        "--assign",
        choices=assignments,
        default="spread",
        help=(
            "how the relay case puts subscribers on relays: round robin (a load balancer), each"
            " point's on one relay (p mod relays), fanout's routing by area, or fanout's routing"
            " by key, the key being the point of interest (default: spread)"
        ),
    )
    parser.add_argument(
        "--area",
        type=float,
        default=DEFAULT_SIDE,
        help=f"routing grid side for --assign area (default: {DEFAULT_SIDE:g})",
    )
    parser.add_argument(
        "--widen",
        choices=list(WIDENINGS),
        help="the relays' widening policy (default: fanout relay's, fit in a map of"
        " responsibility, tiles with --no-registry)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        help=f"the relays' widening margin (default: fanout relay's, {IN_A_MAP.margin} with fit"
        f" in a map, {Policy().margin} otherwise)",
    )
    parser.add_argument(
        "--overshoot",
        type=float,
        help="with --widen enclose: the relays' overshoot (default: 0, as fanout relay)",
    )
    parser.add_argument(
        "--registry",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the relays share a map of responsibility in a Redis Cluster started for the run"
        " (grid side --area) and redirect subscriptions to the responsible relay, the client"
        " following the redirects (default); --no-registry: relays alone",
    )
    parser.add_argument(
        "--registry-policy",
        choices=("redirect", "forward"),
        default="redirect",
        help="in a map: redirect subscriptions to the responsible relay (default), or"
        " forward: serve them where they entered, the parts other relays are responsible for"
        " acquired from those relays",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the results here (default: bench/results/sharing.json for the default"
        " configuration and steps, sharing-forward.json for the same with --registry-policy"
        " forward, sharing-alone.json with --no-registry; other configurations: none)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="logs and state go here")
    args = parser.parse_args()
    if shutil.which("ss") is None:
        sys.exit("bench/sharing.py needs ss (iproute2) to read the publisher's socket counters")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fanout-bench-sharing-"))
    workdir.mkdir(parents=True, exist_ok=True)
    before, calibration = describe(), calibrate()
    with contextlib.ExitStack() as redis:
        args.registry_url = None
        if args.registry:
            host, port = redis.enter_context(throwaway_redis_cluster())[0]
            args.registry_url = f"redis://{host}:{port}"
        results = asyncio.run(bench(args, workdir))
    results["method"] = METHOD.format(
        trigger=TRIGGER,
        relays=RELAYS,
        rate=args.rate,
        per_connection=args.per_connection,
        assign={
            "spread": f"subscriber i on relay i mod {RELAYS}",
            "point": "point of interest (each point's subscribers on one relay)",
            "area": f"fanout.client.rank, routing grid side {args.area:g}",
            "key": "fanout.client.rank by routing key, the subscriber's point of interest",
        }[args.assign]
        + (
            ", entering round robin and redirected by the relays' shared map of responsibility"
            f" (Redis Cluster, grid side {args.area:g})"
            if args.registry and args.registry_policy == "redirect"
            else ""
        )
        + (
            ", served where they entered, each relay acquiring the parts another is responsible"
            " for from that relay (forward policy of the shared map of responsibility, Redis"
            f" Cluster, grid side {args.area:g})"
            if args.registry and args.registry_policy == "forward"
            else ""
        ),
    )
    planning = effective_policy(args)
    results["setup"] = {
        "steps": args.steps,
        "agents": args.agents,
        "world": WORLD,
        "tick_rate": TICK_RATE,
        "period": PERIOD,
        "trigger_s": TRIGGER,
        "master": MASTER,
        "points_of_interest": POINTS,
        "view_side": [VIEW_SIDE / 2, VIEW_SIDE],
        "relays": RELAYS,
        # What the relays planned with, and which of it the flags gave.
        "widen": planning.widen,
        "margin": planning.margin,
        "overshoot": planning.overshoot,
        "policy_flags": {
            name: getattr(args, name)
            for name in ("widen", "margin", "overshoot")
            if getattr(args, name) is not None
        },
        "assign": args.assign,
        "registry": args.registry,
        "registry_policy": args.registry_policy,
        "compare_assign": args.compare_assign,
        "area": args.area,
        "push_rate": args.rate,
        "subscriptions_per_connection": args.per_connection,
        "settle_s": args.settle,
        "duration_s": args.duration,
        "logs": str(workdir),
    }
    results["machine"] = before | {"load_average_1m_at_end": round(os.getloadavg()[0], 2)}
    results["calibration"] = calibration
    default = relay_policy(args) is None and args.assign == "spread"
    named = {"redirect": "sharing.json", "forward": "sharing-forward.json"}
    path = RESULTS.with_name(named[args.registry_policy] if args.registry else "sharing-alone.json")
    if args.out is not None:
        path = args.out
    elif args.steps != list(DEFAULT_STEPS) or not default:
        path = None
    write_results(results, path)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "clients":
        spec = json.loads(Path(sys.argv[2]).read_text())
        recorded = asyncio.run(run_clients(spec))
        Path(sys.argv[3]).write_text(json.dumps(recorded))
    else:
        main()
