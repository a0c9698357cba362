"""The spatial benchmark's relay subscribers: one process of box views over picows, driven by
``bench/mqttspatial.py`` like its compiled MQTT subscribers (``bench/mqttload.c``), with the
same lines in and out.

    python bench/boxclients.py URL   stdin: "N", then N lines "x0 y0 x1 y1 0"; prints
        {"ready": N} once every view got its first push, then reads "window START END DRAIN"
        (epoch seconds) and, DRAIN seconds after END, prints one JSON line per subscriber (what
        it got in the window: distinct ticks, rows, rows inside its box, messages, bytes its
        socket received, lost) and a last one with every push's latency (ms, receipt - the
        tick's send time).

Each subscriber holds its box as a view at 10 pushes a second. A push is decoded once with
msgspec into its x and y columns (the rest skipped); its rows inside the box are counted with
numpy over the columns (``fanout.testing.spatial.useful_rows``), not row by row.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import msgspec
import numpy as np

from fanout.testing.spatial import Box, useful_rows
from fanout.testing.world import AGENTS, TICK_RATE
from fanout.views import Box as BoxView
from fanout.wire import codec
from fanout.wire.columns import VALID, Columns
from fanout.wire.messages import Subscribe
from picowsclient import Connection

CONNECT_CONCURRENCY = 32


class Cut(msgspec.Struct):
    """What a subscriber reads of a frame: its type and stamp, and a push's rows."""

    type: str
    seq: int = -1
    tick_time: float = 0.0
    entered: Columns = Columns()
    updated: Columns = Columns()


_decode = msgspec.msgpack.Decoder(Cut).decode


class BoxSubscriber(Connection):
    """A box view at 10 pushes a second, counting what arrives in the window."""

    def __init__(self, url: str, box: Box, name: str) -> None:
        super().__init__(url, name)
        self.box = box
        self.first = asyncio.get_running_loop().create_future()
        self.window = (float("inf"), float("inf"))
        self.last_seq = -1
        self.ticks = self.rows = self.useful = self.messages = 0
        self.latencies: list[float] = []
        self.bytes = 0

    def subscribe(self) -> None:
        x0, y0, x1, y1 = self.box
        view = BoxView((x0, y0), (x1, y1))
        self.send(codec.encode(Subscribe(1, AGENTS.name, view, rate=TICK_RATE)))

    def on_message(self, message: bytes | memoryview, now: float) -> None:
        cut = _decode(message)
        if cut.type not in ("push", "no_update"):
            if cut.type == "error":
                self.refused(message)
            return
        if not self.first.done():
            self.first.set_result(None)
        start, end = self.window
        if not start <= now <= end:
            return
        if cut.seq != self.last_seq:
            self.ticks += 1
            self.last_seq = cut.seq
        self.messages += 1
        if cut.type == "push":
            self.latencies.append((now - cut.tick_time) * 1e3)
            for rows in (cut.entered, cut.updated):
                if rows.length:
                    x, y = columns(rows, "x"), columns(rows, "y")
                    self.rows += rows.length
                    self.useful += useful_rows(self.box, x, y)

    def report(self) -> dict[str, object]:
        return {
            "ticks": self.ticks,
            "rows": self.rows,
            "useful": self.useful,
            "messages": self.messages,
            "bytes": self.bytes,
            "lost": int(bool(self.closed)),
        }


def columns(rows: Columns, name: str) -> np.ndarray:
    """Column ``name`` of ``rows`` as an array over the payload's bytes (its own dtype)."""
    for column in rows.columns:
        if column.name == name and column.dtype != VALID:
            if not isinstance(column.data, bytes):
                raise ValueError(f"column {name} of dtype {column.dtype} is not numeric")
            return np.frombuffer(column.data, column.dtype)
    raise ValueError(f"a push without column {name}")


def read_boxes(lines: list[str]) -> list[Box]:
    """The boxes of the input's subscriber lines ("x0 y0 x1 y1 K topic1 .. topicK")."""
    count = int(lines[0])
    found = []
    for line in lines[1 : count + 1]:
        x0, y0, x1, y1 = (float(v) for v in line.split()[:4])
        found.append((x0, y0, x1, y1))
    return found


async def main(url: str) -> None:
    count = int(sys.stdin.readline())
    boxes = read_boxes([str(count)] + [sys.stdin.readline() for _ in range(count)])
    subscribers = [BoxSubscriber(url, box, f"box{n}") for n, box in enumerate(boxes)]
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def open_one(subscriber: BoxSubscriber) -> None:
        async with gate:
            await subscriber.open()
        subscriber.subscribe()
        await asyncio.wait_for(subscriber.first, 60)

    await asyncio.gather(*(open_one(s) for s in subscribers))
    print(json.dumps({"ready": count}), flush=True)
    line = await asyncio.to_thread(sys.stdin.readline)
    word, start, end, drain = line.split()
    if word != "window":
        raise SystemExit(f"boxclients: expected a window, got {line!r}")
    window = float(start), float(end)
    for subscriber in subscribers:
        subscriber.window = window
    for moment, sign in ((window[0], -1), (window[1], 1)):
        await asyncio.sleep(max(0.0, moment - time.time()))
        for subscriber in subscribers:
            subscriber.bytes += sign * subscriber.bytes_received()
    await asyncio.sleep(float(drain))
    for subscriber in subscribers:
        if subscriber.closed:
            print(f"boxclients: {subscriber.name}: {subscriber.closed}", file=sys.stderr)
        print(json.dumps(subscriber.report()))
    latencies = [round(v, 3) for s in subscribers for v in s.latencies]
    print(json.dumps({"latencies_ms": latencies}), flush=True)
    for subscriber in subscribers:
        subscriber.close()


if __name__ == "__main__":
    # uvloop, where installed: the clients' event loop costs them less of the cores
    try:
        import uvloop
    except ImportError:
        asyncio.run(main(sys.argv[1]))
    else:
        uvloop.run(main(sys.argv[1]))
