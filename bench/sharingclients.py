"""``bench/sharing.py``'s subscribers: which connection holds which views (relay case and
direct case), and the client process that opens them all, counts what arrives, follows the
relays' redirects and says ``ready`` once every view has had its first push or snapshot."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from fanout.client import rank
from fanout.client.routing import DEFAULT_SIDE
from fanout.testing import frames
from fanout.testing.cpu import this_process
from fanout.testing.sharing import POINTS, RELAYS, Views
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Acquire, Hello, Subscribe

CONNECT_CONCURRENCY = 32
READY_TIMEOUT = 180.0


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
    connection k, so no connection holds two boxes that meet (docs/benchmarks/sharing.md)."""
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
            assert isinstance(message, bytes), "fanout's frames are binary"
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
            assert isinstance(message, bytes), "fanout's frames are binary"
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
