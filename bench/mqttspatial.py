"""The relay benchmark's spatial workload over MQTT: per-cell topics on Mosquitto against box
views on one fanout relay (``bench/mqtt.py --spatial``).

The world of ``bench/relay.py`` (``fanout.testing.world``'s ``Entities``: ENTITIES points in a
4,000 x 4,000 world, every one moving every tick, 10 ticks a second), shown to N subscribers,
each holding a 125 x 125 box at a random place (the relay benchmark's view size; the boxes stay
put here).

* **Mosquitto**: the world is cut into 125 x 125 cells, one topic each (``cells/<cx>/<cy>``);
  every tick a publisher process sends each cell's rows (id, x, y, after a header with the tick
  and its send time) as one QoS 0 message to its topic. A subscriber subscribes to the cells
  its box overlaps (up to four) and gets all their rows.
* **fanout**: the relay benchmark's scripted publisher process (``fanout.testing.world``'s
  ``World``: each tick, the rows inside the relay's primitives) and one relay process; a
  subscriber holds its box as a view at 10 pushes a second and gets the rows inside it.

The same kind of client for both: asyncio connections in one process (MQTT through the
project's own packet codec, fanout through its client library), each decoding every row it
gets and checking it against its box. Per trial (one N), after a warm-up, for a window:

* ``delivered``: per subscriber, the ticks it got rows of (distinct ticks) over the ticks
  published in the window; the trial holds 10 Hz if every subscriber got >= 95%;
* ``p99_ms``: the 99th percentile of tick-send-to-receipt over every message or push;
* ``useful_fraction``: rows delivered inside the subscriber's box over rows delivered;
* ``bytes_per_useful_update``: bytes the subscribers' sockets received (TCP_INFO's
  ``tcpi_bytes_received``: frames and packets with their headers) over the rows delivered
  inside a box.

A trial passes when it holds 10 Hz with p99 <= 100 ms. ``max_subscribers``: N doubles from
START until a trial fails (or reaches LIMIT), then is bisected twice. The clients share the two
cores with the brokers and publishers: a most-subscribers figure here is the machine's, clients
included, for both alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fanout.client.subscriber import LiveView, Subscriber, connect
from fanout.launch import running
from fanout.mqtt import packets as p
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.encoding import encode
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.world import AGENTS, TICK_RATE, VIEW_SIDE, WORLD, Entities, publisher_main
from fanout.views import Box

CELL = VIEW_SIDE
CELLS = int(np.ceil(WORLD / CELL))
HEADER = struct.Struct("<qd")  # tick, send time (time.time())
TARGET_DELIVERED = 0.95
TARGET_P99_MS = 100.0
MAX_PACKET = 16 << 20
TCPI_BYTES_RECEIVED = 128  # offset in struct tcp_info (Linux 4.1 and later)


@dataclass
class Counts:
    """What one subscriber got in the window."""

    box: tuple[float, float, float, float]
    ticks: set[int] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)
    rows: int = 0
    useful: int = 0
    counting: bool = False
    sock: socket.socket | None = None
    received: int = 0  # bytes, in the window

    def take(self, tick: int, sent: float, x: np.ndarray, y: np.ndarray) -> None:
        """Rows (x, y) of ``tick``, sent at ``sent``."""
        if not self.counting:
            return
        self.ticks.add(tick)
        self.latencies.append((time.time() - sent) * 1000)
        x0, y0, x1, y1 = self.box
        self.rows += len(x)
        self.useful += int(((x >= x0) & (x < x1) & (y >= y0) & (y < y1)).sum())


@dataclass
class Trial:
    """One N's result."""

    subscribers: int
    delivered_min: float
    p99_ms: float
    useful_fraction: float
    bytes_per_useful_update: float

    @property
    def passed(self) -> bool:
        return self.delivered_min >= TARGET_DELIVERED and self.p99_ms <= TARGET_P99_MS


# -- Mosquitto ------------------------------------------------------------------------------


@contextlib.contextmanager
def mosquitto() -> Iterator[int]:
    """One Mosquitto on a free loopback port."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fanout-mosquitto-") as home:
        config = Path(home) / "mosquitto.conf"
        config.write_text(f"listener {port} {LOOPBACK}\nallow_anonymous true\n")
        process = subprocess.Popen(["mosquitto", "-c", str(config)], stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection((LOOPBACK, port), 0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield port
        finally:
            process.terminate()
            process.wait(10)


def cells_main(port: int, entities: int, stop: Any) -> None:
    """The per-cell publisher process: each tick, every cell's rows as one message."""
    world = Entities(entities)
    with socket.create_connection((LOOPBACK, port)) as sock:
        sock.sendall(encode(p.Connect("cells", p.V311, keepalive=0), p.V311))
        sock.recv(4)  # CONNACK
        period, next_tick, tick = 1.0 / TICK_RATE, time.monotonic(), 0
        while not stop.is_set():
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
            world.step(period)
            tick += 1
            cx = np.clip((world.xy[0] // CELL).astype(np.int64), 0, CELLS - 1)
            cy = np.clip((world.xy[1] // CELL).astype(np.int64), 0, CELLS - 1)
            order = np.lexsort((cy, cx))
            cell = (cx * CELLS + cy)[order]
            bounds = np.searchsorted(cell, np.arange(CELLS * CELLS + 1))
            ids = world.ids[order]
            xy = world.xy[:, order].astype("<f4")
            header = HEADER.pack(tick, time.time())
            packets = []
            for n in range(CELLS * CELLS):
                a, b = bounds[n], bounds[n + 1]
                payload = header + ids[a:b].tobytes() + xy[0, a:b].tobytes() + xy[1, a:b].tobytes()
                topic = f"cells/{n // CELLS}/{n % CELLS}"
                packets.append(encode(p.Publish(topic, payload), p.V311))
            sock.sendall(b"".join(packets))


def cells_of(box: tuple[float, float, float, float]) -> list[str]:
    """The cell topics ``box`` overlaps."""
    x0, y0, x1, y1 = box
    xs = range(int(x0 // CELL), min(int((x1 - 1e-9) // CELL), CELLS - 1) + 1)
    ys = range(int(y0 // CELL), min(int((y1 - 1e-9) // CELL), CELLS - 1) + 1)
    return [f"cells/{cx}/{cy}" for cx in xs for cy in ys]


async def mqtt_subscriber(port: int, name: str, counts: Counts, ready: asyncio.Event) -> None:
    """An MQTT 3.1.1 subscriber to its box's cells, until cancelled."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    counts.sock = writer.get_extra_info("socket")
    try:
        writer.write(encode(p.Connect(name, p.V311, keepalive=0), p.V311))
        filters = tuple((topic, 0) for topic in cells_of(counts.box))
        writer.write(encode(p.Subscribe(1, filters), p.V311))
        buffer = bytearray()
        while True:
            data = await reader.read(1 << 16)
            if not data:
                raise ConnectionError(f"{name}: Mosquitto closed the connection")
            buffer += data
            while (found := split(buffer, MAX_PACKET)) is not None:
                first, body, taken = found
                del buffer[:taken]
                packet = decode(first, body, p.V311)
                if isinstance(packet, p.SubAck):
                    ready.set()
                elif isinstance(packet, p.Publish):
                    tick, sent = HEADER.unpack_from(packet.payload)
                    rows = (len(packet.payload) - HEADER.size) // 16
                    at = HEADER.size + rows * 8
                    x = np.frombuffer(packet.payload, "<f4", rows, at)
                    y = np.frombuffer(packet.payload, "<f4", rows, at + rows * 4)
                    counts.take(tick, sent, x, y)
    finally:
        writer.close()


# -- fanout ---------------------------------------------------------------------------------


async def fanout_subscriber(url: str, name: str, counts: Counts, ready: asyncio.Event) -> None:
    """A fanout subscriber holding its box at 10 pushes a second, until cancelled."""
    x0, y0, x1, y1 = counts.box
    subscriber: Subscriber
    async with connect(url, name=name) as subscriber:
        view: LiveView = await subscriber.subscribe(Box((x0, y0), (x1, y1)), AGENTS.name, 10.0)
        counts.sock = subscriber._websocket.transport.get_extra_info("socket")
        ready.set()
        async for update in view:
            for rows in (update.entered, update.updated):
                if "x" in rows:
                    counts.take(update.tick, update.tick_time, rows["x"], rows["y"])
            if update.no_update:
                counts.take(update.tick, update.tick_time, np.empty(0), np.empty(0))


# -- trials ---------------------------------------------------------------------------------


def _received(sock: socket.socket | None) -> int:
    """Bytes ``sock`` received so far (Linux ``struct tcp_info``'s ``tcpi_bytes_received``)."""
    if sock is None:
        raise RuntimeError("a subscriber has no socket")
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int(struct.unpack_from("<Q", info, TCPI_BYTES_RECEIVED)[0])


async def trial(
    kind: str, target: str | int, subscribers: int, *, warmup: float, window: float, seed: int
) -> Trial:
    """Run ``subscribers`` subscribers of ``kind`` against ``target``; measure one window."""
    rng = np.random.default_rng(seed)
    counts = [
        Counts((x, y, x + VIEW_SIDE, y + VIEW_SIDE))
        for x, y in rng.uniform(0, WORLD - VIEW_SIDE, (subscribers, 2))
    ]
    tasks, readies = [], []
    for n, mine in enumerate(counts):
        ready = asyncio.Event()
        readies.append(ready)
        if kind == "mosquitto":
            work = mqtt_subscriber(int(target), f"s{n}", mine, ready)
        else:
            work = fanout_subscriber(str(target), f"s{n}", mine, ready)
        tasks.append(asyncio.create_task(work))
    try:
        waits = [asyncio.create_task(r.wait()) for r in readies]
        await asyncio.wait_for(asyncio.gather(*waits), 120)
        await asyncio.sleep(warmup)
        for mine in counts:
            mine.counting = True
            mine.received = -_received(mine.sock)
        await asyncio.sleep(window)
        for mine in counts:
            mine.counting = False
            mine.received += _received(mine.sock)
        read = sum(mine.received for mine in counts)
        for task in tasks:
            if task.done() and task.exception() is not None:
                raise RuntimeError(f"a {kind} subscriber failed") from task.exception()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    expected = window * TICK_RATE
    latencies = [v for mine in counts for v in mine.latencies]
    rows = sum(mine.rows for mine in counts)
    useful = sum(mine.useful for mine in counts)
    return Trial(
        subscribers,
        round(min(min(len(mine.ticks) / expected, 1.0) for mine in counts), 3),
        round(float(np.percentile(latencies, 99)), 1) if latencies else float("inf"),
        round(useful / rows, 3) if rows else 0.0,
        round(read / useful, 1) if useful else float("inf"),
    )


async def search(
    kind: str, target: str | int, start_n: int, limit: int, *, warmup: float, window: float
) -> tuple[int, list[Trial]]:
    """The most subscribers that pass: doubling from ``start_n``, then two bisections."""
    trials: list[Trial] = []
    best, n, failed = 0, start_n, None
    while n <= limit:
        result = await trial(kind, target, n, warmup=warmup, window=window, seed=n)
        trials.append(result)
        print(f"spatial {kind} {result}", file=sys.stderr, flush=True)
        if not result.passed:
            failed = n
            break
        best, n = n, n * 2
    for _ in range(2):
        if failed is None or failed - best <= 1:
            break
        middle = (best + failed) // 2
        result = await trial(kind, target, middle, warmup=warmup, window=window, seed=middle)
        trials.append(result)
        print(f"spatial {kind} {result}", file=sys.stderr, flush=True)
        best, failed = (middle, failed) if result.passed else (best, middle)
    return best, trials


async def spatial(
    entities: int, start_n: int, limit: int, *, warmup: float, window: float, logs: Path
) -> dict[str, Any]:
    """Both cases, one after the other; the JSON keys of ``bench/mqtt.py``'s spatial part."""
    context = mp.get_context("spawn")
    results: dict[str, Any] = {"spatial_entities": entities, "spatial_window_s": window}
    with mosquitto() as port:
        stop = context.Event()
        cells = context.Process(target=cells_main, args=(port, entities, stop), daemon=True)
        cells.start()
        try:
            best, trials = await search(
                "mosquitto", port, start_n, limit, warmup=warmup, window=window
            )
        finally:
            stop.set()
            cells.join(10)
    results["mosquitto_max_subscribers"] = best
    results["mosquitto_useful_fraction"] = trials[0].useful_fraction
    results["mosquitto_bytes_per_useful_update"] = trials[0].bytes_per_useful_update
    results["mosquitto_trials"] = [t.__dict__ for t in trials]
    here, there = context.Pipe()
    world = context.Process(target=publisher_main, args=(there, entities), daemon=True)
    world.start()
    try:
        url = await asyncio.get_running_loop().run_in_executor(None, here.recv)
        args = ["--publisher", url, "--port", "0"]
        async with running("relay", args, logs / "spatial.log") as relay:
            best, trials = await search(
                "relay", relay.url, start_n, limit, warmup=warmup, window=window
            )
    finally:
        here.send("stop")
        world.join(10)
    results["relay_max_subscribers"] = best
    results["relay_useful_fraction"] = trials[0].useful_fraction
    results["relay_bytes_per_useful_update"] = trials[0].bytes_per_useful_update
    results["relay_trials"] = [t.__dict__ for t in trials]
    return results
