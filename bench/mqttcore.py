"""Benchmark the relay's MQTT fan-out path in one process: CPU per delivered message, no sockets.

Run ``.venv/bin/python bench/mqttcore.py`` (``--sessions N``, ``--fanout F``, ``--version 4|5``);
it prints one JSON object last and writes ``bench/results/mqttcore.json`` (not with
``--no-save``). ``--profile`` prints the hottest functions instead (the profiler slows what it
measures). ``bench/checkouts.py ... -- mqttcore.py --no-save`` compares two checkouts, A/B.

The workload is ``bench/mqtt.py --spatial``'s per-cell one, sans I/O: N subscriber sessions
(MQTT 3.1.1, as libmosquitto's) each subscribed to 4 topics, every topic held by F of them; one
publisher sends one QoS 0 message (320 bytes of payload: 20 rows of 16) to every topic a tick,
its packets read in 64 KiB chunks, a tick in a turn of the event loop. Two measures, in this
thread's CPU time (``time.thread_time``, which other processes on a shared machine disturb far
less than wall time), each the median of ``--rounds``:

* ``core_us_per_message``: ``Broker.receive`` alone, per message delivered to a subscriber;
* ``shell_us_per_message``: the same through ``Listener.serve`` and ``Listener.apply`` to
  in-memory links (what the listener adds, but the sockets' writes), and ``writes_per_message``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fanout.mqtt import packets as p
from fanout.mqtt.actions import Send
from fanout.mqtt.broker import Broker
from fanout.mqtt.encoding import encode
from fanout.mqtt.listener import READ_SIZE, Listener
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results

RESULTS = Path(__file__).parent / "results" / "mqttcore.json"
PAYLOAD = bytes(320)
PER_SESSION = 4


class Workload:
    """The sessions' CONNECT and SUBSCRIBE bytes, and the publisher's ticks in chunks."""

    def __init__(self, sessions: int, fanout: int, version: int, ticks: int) -> None:
        self.topics = [f"cells/{t % 32}/{t // 32}" for t in range(sessions * PER_SESSION // fanout)]
        self.subscribers = [self._subscriber(i, version) for i in range(sessions)]
        self.publisher = encode(p.Connect("publisher", p.V311), p.V311)
        tick = b"".join(encode(p.Publish(t, PAYLOAD), p.V311) for t in self.topics)
        self.tick = [tick[i : i + READ_SIZE] for i in range(0, len(tick), READ_SIZE)]
        self.ticks = ticks
        self.messages = ticks * sessions * PER_SESSION  # each topic's F subscribers, every tick

    def _subscriber(self, i: int, version: int) -> bytes:
        count = len(self.topics)
        filters = tuple((self.topics[(i * PER_SESSION + j) % count], 0) for j in range(4))
        connect = encode(p.Connect(f"s{i}", version), version)
        return connect + encode(p.Subscribe(1, filters), version)


def core_round(work: Workload) -> tuple[float, int]:
    """CPU seconds of ``Broker.receive`` over the publisher's chunks, and Sends to subscribers."""
    broker = Broker()
    for i, data in enumerate(work.subscribers, 1):
        broker.opened(i, 0.0)
        broker.receive(i, data, 0.0)
    publisher = len(work.subscribers) + 1
    broker.opened(publisher, 0.0)
    broker.receive(publisher, work.publisher, 0.0)
    sent = 0
    start = time.thread_time()
    for _ in range(work.ticks):
        for chunk in work.tick:
            for action in broker.receive(publisher, chunk, 1.0):
                sent += isinstance(action, Send) and action.connection != publisher
    return time.thread_time() - start, sent


class MemoryLink:
    """A ``Link`` that keeps count of what was written to it."""

    def __init__(self) -> None:
        self.writes = 0
        self.written = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.written += len(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self.writes += 1
        self.written += sum(map(len, chunks))

    def buffered(self) -> int:
        return 0

    def finish(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def address(self) -> str:
        return "memory"


async def shell_round(work: Workload) -> tuple[float, int, int]:
    """CPU seconds of the publisher's chunks through ``Listener.serve``, the subscribers' links'
    writes and the messages they got (the last is the publisher's CONNACK's)."""
    listener = Listener(Broker(), "127.0.0.1", 0, read_rate=0)
    links = [MemoryLink() for _ in work.subscribers]
    stop = asyncio.Event()

    async def subscriber(data: bytes) -> AsyncIterator[bytes]:
        yield data
        await stop.wait()

    serving = [
        asyncio.create_task(listener.serve(link, subscriber(data)))
        for link, data in zip(links, work.subscribers, strict=True)
    ]
    for _ in range(3):
        await asyncio.sleep(0)
    begun: list[float] = []
    writes = 0

    async def publisher() -> AsyncIterator[bytes]:
        nonlocal writes
        yield work.publisher
        writes = -sum(link.writes for link in links)
        begun.append(time.thread_time())
        for _ in range(work.ticks):
            for chunk in work.tick:
                yield chunk
            await asyncio.sleep(0)  # a tick a turn of the event loop, as read from a socket

    await listener.serve(MemoryLink(), publisher())
    await asyncio.sleep(0)  # what the listener writes at the end of a turn, if it waits for it
    spent = time.thread_time() - begun[0]
    stop.set()
    await asyncio.gather(*serving)
    writes += sum(link.writes for link in links)
    return spent, writes, listener.traffic.messages_sent


def measure(work: Workload, rounds: int) -> dict[str, Any]:
    core, shell, writes = [], [], []
    for _ in range(rounds):
        gc.collect()
        spent, sent = core_round(work)
        assert sent == work.messages, (sent, work.messages)
        core.append(spent * 1e6 / sent)
        gc.collect()
        spent, wrote, messages = asyncio.run(shell_round(work))
        assert messages == work.messages, (messages, work.messages)
        shell.append(spent * 1e6 / messages)
        writes.append(wrote / messages)
    return {
        "core_us_per_message": round(statistics.median(core), 3),
        "core_spread": round((max(core) - min(core)) / statistics.median(core), 3),
        "shell_us_per_message": round(statistics.median(shell), 3),
        "shell_spread": round((max(shell) - min(shell)) / statistics.median(shell), 3),
        "writes_per_message": round(statistics.median(writes), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--fanout", type=int, default=4, help="subscribers of a topic")
    parser.add_argument("--version", type=int, choices=(4, 5), default=4, help="subscribers'")
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print the hottest functions")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])  # the relay's (RelayConfig.process)
    work = Workload(args.sessions, args.fanout, args.version, args.ticks)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(lambda: asyncio.run(shell_round(work)))
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)
        return
    results: dict[str, Any] = {
        "benchmark": "mqttcore",
        "sessions": args.sessions,
        "fanout": args.fanout,
        "version": args.version,
        "topics": len(work.topics),
        "messages_per_round": work.messages,
        **measure(work, args.rounds),
        "machine": describe(),
        "calibration": calibrate(),
    }
    write_results(results, None if args.no_save else RESULTS)


if __name__ == "__main__":
    main()
