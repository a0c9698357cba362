"""``bench/relay.py``'s subscribers: picows connections that subscribe, move their box views and
record what arrives, and the client process that holds a share of them (also used by
``bench/handshakes.py`` and ``bench/submemory.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import picowsclient
from fanout.testing import cpu, frames
from fanout.testing.world import (
    MOVE_EVERY,
    Route,
)
from fanout.wire import codec
from fanout.wire.messages import Subscribe

PUSH_RATE = 10.0
DRAIN = 1.5  # seconds after the window for its last pushes to arrive
CONNECT_CONCURRENCY = 32


class Subscriber(picowsclient.Connection):
    """One subscriber connection: subscribes, moves its view, records what arrives.

    It speaks WebSocket through picows, whose frame parsing is compiled: each frame reaches
    ``on_ws_frame`` in the read's callback, with no task, queue or future per message, so that
    the clients leave the machine's cores to the relay (with websockets' sans-I/O protocol,
    parsed in Python, they took 0.43 cores at 1,750 subscribers, with picows 0.31). It decodes
    each message's header (type, sub, seq) and records its size, as the relay sent it.
    """

    def __init__(self, url: str, route: Route, started: float) -> None:
        super().__init__(url)
        self.route, self.started = route, started
        self.received: list[tuple[int, float, int]] = []  # (seq, receipt time, bytes)

    async def open(self) -> None:
        await super().open()
        self._subscribe(self.route.step(time.time() - self.started))

    def on_message(self, message: bytes | memoryview, now: float) -> None:
        head = frames.head(message)
        if head.type in ("push", "no_update"):
            self.received.append((head.seq, now, len(message)))
        elif head.type == "error":
            self.refused(message)

    def _subscribe(self, step: int) -> None:
        request = Subscribe(1, "agents", self.route.box(step), rate=PUSH_RATE)
        self.send(codec.encode(request))

    async def move(self, until: float) -> None:
        step = self.route.step(time.time() - self.started)
        while time.time() < until:
            step += 1
            due = self.started + self.route.offset + step * MOVE_EVERY
            await asyncio.sleep(max(0.0, due - time.time()))
            self._subscribe(step)


def clients_main(conn: Connection, url: str, mine: list[Route], started: float) -> None:
    """A client process: open its connections, then record until told the window is over."""

    async def main() -> None:
        subscribers = [Subscriber(url, route, started) for route in mine]
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def open_one(subscriber: Subscriber) -> None:
            async with gate:
                await subscriber.open()

        await asyncio.gather(*(open_one(s) for s in subscribers))
        conn.send("ready")
        loop = asyncio.get_running_loop()
        start, end = await loop.run_in_executor(None, conn.recv)
        movers = [asyncio.create_task(s.move(end)) for s in subscribers]
        samples = []
        for moment in (start, end):
            await asyncio.sleep(max(0.0, moment - time.time()))
            samples.append(cpu.this_process())
        await asyncio.sleep(DRAIN)
        received = [
            [r for r in s.received if start - 1 <= r[1] <= end + DRAIN] for s in subscribers
        ]
        closed = [s.closed for s in subscribers if s.closed]  # closed, or sent an error
        conn.send({"cpu": samples, "received": received, "closed": closed})
        for task in movers:
            task.cancel()
        for subscriber in subscribers:
            subscriber.close()

    asyncio.run(main())


def start_clients(
    context: Any,
    url: str,
    everyone: list[Route],
    started: float,
    *,
    processes: int,
    children: list[Any],
    target: Callable[..., None] = clients_main,
    extra: tuple[Any, ...] = (),
) -> list[Connection]:
    """Start ``processes`` client processes sharing ``everyone``'s routes (``target``, called as
    ``clients_main`` is, ``extra`` after its arguments), each added to ``children`` as it
    starts; return their pipes once each says it is ready."""
    conns = []
    for index in range(processes):
        mine = everyone[index::processes]
        conn, child = context.Pipe()
        process = context.Process(target=target, args=(child, url, mine, started, *extra))
        process.start()
        child.close()  # a client process that fails ends its pipe (EOFError), not waited on
        children.append(process)
        conns.append(conn)
    for conn in conns:
        assert conn.recv() == "ready"
    return conns


def open_window(conns: list[Connection], warmup: float, measure: float) -> tuple[float, float]:
    """Tell the client processes the measurement window, ``warmup`` seconds from now; return it."""
    start = time.time() + warmup
    end = start + measure
    for conn in conns:
        conn.send((start, end))
    return start, end
