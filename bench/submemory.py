"""Memory per subscriber: one relay against one Mosquitto, idle, active and stopped subscribers.

Run ``.venv/bin/python bench/submemory.py``; it prints one JSON object last and writes
``bench/results/submemory.json`` (``--quick``: 100 and 500 subscribers, short phases, not
written). docs/benchmarks/submemory.md says what it found.

Servers, each started afresh for each mode (its memory once grown is not given back):

* **relay**: ``fanout relay`` with its default configuration, fed by ``bench/relay.py``'s scripted
  publisher (``fanout.testing.world``: 100,000 entities moving in a 4,000 x 4,000 world, 10
  ticks a second; no Spark);
* **mosquitto**: ``/usr/sbin/mosquitto`` on a free loopback port, ``max_connections -1``, its
  other settings default (``max_queued_messages 1000``, ``max_queued_bytes 0``: no limit); an MQTT
  ``--publishers`` processes (paho) send each active subscriber's topic a ``--message-bytes``
  message (the relay's push of about 100 rows) ten times a second.

Modes, each measured at 0 (the baseline), then ``--counts`` subscribers (1,000 then 10,000):

* **idle**: subscribed, nothing flowing (relay: a box view outside the world, its own for each;
  Mosquitto: a topic of its own that no one publishes to);
* **active**: relay: ``bench/relay.py``'s box views (125 x 125, about 100 entities), each its
  own, moving once a second, at 10 pushes a second; Mosquitto: a topic of its own carrying a
  message ten times a second. Who cannot keep up delivers less: what was delivered is reported;
* **stopped**: ``--stopped`` active subscribers that read, then stop reading (each socket's receive
  buffer 4 KiB), for ``--stop-seconds``: the server's growth per stopped subscriber, against
  its bound (relay: ``--queue-limit`` pushes and asyncio's 64 KiB transport buffer, and closed
  after ``--stall-timeout``; Mosquitto: ``max_queued_messages`` messages, never closed).

Memory is the server process tree's resident (``rss``), proportional (``pss``) and unique
(``uss``) memory (``/proc/PID/smaps_rollup``), the median of one sample a second over
``--window`` seconds after ``--settle`` seconds; per subscriber = (at N - baseline) / N. Clients:
picows (relay) and paho-mqtt over one selector (Mosquitto), many connections a process, over
``--processes`` processes; their CPU and memory are reported beside the servers'.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import multiprocessing as mp
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fanout.launch import Children
from fanout.metrics import scrape
from fanout.testing import cpu, frames
from fanout.testing.binaries import require
from fanout.testing.calibration import calibrate
from fanout.testing.machine import Memory, describe, rss, tree_memory, write_results
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.relays import running_relay
from fanout.testing.world import WORLD, publisher_main, routes
from fanout.views import Box
from relayclients import Subscriber  # bench/relay.py's picows subscriber

RESULTS = Path(__file__).parent / "results" / "submemory.json"
ENTITIES = 100_000
RATE = 10.0  # pushes or messages a second, per active subscriber
BATCH = 250  # connections opened at once per client process: no server refuses for backlog
STOPPED_WINDOW = 4096  # a stopped subscriber's socket receive buffer (bytes), as bench/stalled.py
#: asyncio's transport buffers this much beyond the relay's queue before it pauses the writer.
TRANSPORT_BYTES = 64 * 1024
RELAY_QUEUE_LIMIT, RELAY_STALL_TIMEOUT = 64, 10.0  # the relay's defaults (RelayConfig.limits)
MOSQUITTO_MAX_QUEUED_MESSAGES = 1000  # Mosquitto's default


def raise_open_files() -> int:
    """Raise this process's soft limit of open files to its hard limit; the new limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# -- the relay's clients: bench/relay.py's picows subscriber, counting ------------------------


class Still:
    """An idle subscriber's route: a box of its own outside the world, where no row ever is.
    Its edges are on the scripted publisher's raster (``COVERAGE_CELL``), which matches the
    rows of aligned primitives at once rather than box by box."""

    offset = 0.0
    SIDE = 128.0

    def __init__(self, index: int) -> None:
        x, y = index % 200, index // 200
        self.corner = (WORLD + 1024 + 2 * self.SIDE * x, WORLD + 1024 + 2 * self.SIDE * y)

    def step(self, seconds: float) -> int:
        return 0

    def box(self, step: int) -> Box:
        x, y = self.corner
        return Box((x, y), (x + self.SIDE, y + self.SIDE))


class Counting(Subscriber):
    """bench/relay.py's subscriber, counting what arrives instead of keeping a record of it."""

    def __init__(self, url: str, route: Any, started: float) -> None:
        super().__init__(url, route, started)
        self.frames = self.bytes = 0

    def _on_message(self, message: bytes | memoryview, now: float) -> None:
        if not self.welcomed.done():
            self.welcomed.set_result(None)
            return
        self.frames += 1
        self.bytes += len(message)
        if frames.head(message).type == "error":
            self._fail(f"error frame: {frames.whole(message)}")

    def pause(self) -> None:
        """Stop reading: the socket's receive buffer fills, then the relay's queue."""
        if self.transport is not None:
            self.transport.underlying_transport.pause_reading()

    def shrink_window(self) -> None:
        if self.transport is not None:
            sock = self.transport.underlying_transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STOPPED_WINDOW)


def relay_clients_main(conn: Connection, url: str, mode: str, mine: list[int], total: int) -> None:
    """A client process of the relay: open its share of connections when told, report counts."""
    raise_open_files()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = time.time()
        paths = routes(total, 1, seed=total) if mode != "idle" else []
        subscribers: list[Counting] = []
        movers: list[asyncio.Task[None]] = []
        while True:
            command, value = await loop.run_in_executor(None, conn.recv)
            if command == "open":
                fresh = [
                    Counting(url, Still(i) if mode == "idle" else paths[i], started)
                    for i in mine[len(subscribers) : len(subscribers) + value]
                ]
                failed = 0
                for start in range(0, len(fresh), BATCH):
                    opened = await asyncio.gather(
                        *(s.open() for s in fresh[start : start + BATCH]), return_exceptions=True
                    )
                    failed += sum(isinstance(o, BaseException) for o in opened)
                subscribers += fresh
                if mode == "stopped":
                    for s in fresh:
                        s.shrink_window()
                if mode != "idle":
                    movers += [asyncio.create_task(s.move(math.inf)) for s in fresh]
                conn.send({"opened": len(subscribers), "failed": failed})
            elif command == "sample":
                conn.send(client_sample(subscribers))
            elif command == "pause":
                for s in subscribers:
                    s.pause()
                conn.send("paused")
            else:
                for task in movers:
                    task.cancel()
                for s in subscribers:
                    s.close()
                return

    asyncio.run(main())


def client_sample(clients: list[Any]) -> dict[str, Any]:
    """What a client process reports: its CPU time, memory and the frames its clients got."""
    return {
        "cpu": cpu.this_process(),
        "rss": rss(os.getpid()),
        "frames": sum(c.frames for c in clients),
        "bytes": sum(c.bytes for c in clients),
        "closed": sum(bool(c.closed) for c in clients),
    }


# -- Mosquitto's clients: paho-mqtt, many over one selector ----------------------------------


class MqttSubscriber:
    """One paho client on an external loop (``loop_read``/``loop_write``/``loop_misc``),
    subscribed to ``topic`` once connected, counting the messages it gets."""

    def __init__(self, index: int, port: int, topic: str, window: int | None) -> None:
        self.topic, self.frames, self.bytes, self.closed = topic, 0, 0, ""
        self.subscribed = False
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{index}")
        self.client.on_connect = lambda client, *_: client.subscribe(self.topic, qos=0)
        self.client.on_subscribe = lambda *_: setattr(self, "subscribed", True)
        self.client.on_message = self._on_message
        self.client.on_disconnect = lambda *args: setattr(self, "closed", f"disconnected {args}")
        # Keepalive past the run: a stopped subscriber sends no PINGREQ, and Mosquitto must
        # not close it for that.
        self.client.connect(LOOPBACK, port, keepalive=3600)
        sock = self.client.socket()
        assert sock is not None
        if window is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
        self.sock = sock

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        self.frames += 1
        self.bytes += len(message.payload)


class MqttClients:
    """A client process's paho clients: one selector over their sockets and the pipe."""

    def __init__(self, conn: Connection, port: int, mode: str) -> None:
        self.port, self.mode, self.reading = port, mode, True
        self.selector = selectors.DefaultSelector()
        self.selector.register(conn.fileno(), selectors.EVENT_READ, None)
        self.subscribers: list[MqttSubscriber] = []
        self.misc_at = time.monotonic()

    def serve(self, timeout: float) -> bool:
        """One round of the loop; whether the coordinator sent a command."""
        command = False
        for key, _ in self.selector.select(timeout):
            if key.data is None:
                command = True
            else:
                key.data.client.loop_read()
        for s in self.subscribers:
            if s.client.want_write():
                s.client.loop_write()
        if self.reading and time.monotonic() > self.misc_at:  # keepalive, every 5 s
            self.misc_at = time.monotonic() + 5.0
            for s in self.subscribers:
                s.client.loop_misc()
        return command

    def open(self, indices: list[int]) -> int:
        """Connect and subscribe these, ``BATCH`` at a time; how many failed."""
        failed = 0
        window = STOPPED_WINDOW if self.mode == "stopped" else None
        prefix = "idle" if self.mode == "idle" else "active"
        for start in range(0, len(indices), BATCH):
            fresh = []
            for i in indices[start : start + BATCH]:
                try:
                    fresh.append(MqttSubscriber(i, self.port, f"{prefix}/{i}", window))
                except OSError:
                    failed += 1
            for s in fresh:
                self.selector.register(s.sock, selectors.EVENT_READ, s)
            self.subscribers += fresh
            deadline = time.monotonic() + 60
            while not all(s.subscribed for s in fresh) and time.monotonic() < deadline:
                self.serve(0.05)
            failed += sum(not s.subscribed for s in fresh)
        return failed

    def pause(self) -> None:
        """Stop reading (and pinging): Mosquitto's queue for each fills."""
        self.reading = False
        for s in self.subscribers:
            self.selector.unregister(s.sock)


def mqtt_clients_main(conn: Connection, port: int, mode: str, mine: list[int]) -> None:
    """A client process of Mosquitto: open its share of connections when told, report counts."""
    raise_open_files()
    clients = MqttClients(conn, port, mode)
    while True:
        if not clients.serve(1.0):
            continue
        command, value = conn.recv()
        opened = len(clients.subscribers)
        if command == "open":
            failed = clients.open(mine[opened : opened + value])
            conn.send({"opened": len(clients.subscribers), "failed": failed})
        elif command == "sample":
            conn.send(client_sample(clients.subscribers))
        elif command == "pause":
            clients.pause()
            conn.send("paused")
        else:
            for s in clients.subscribers:
                s.sock.close()
            return


def network(client: mqtt.Client, events: int) -> None:
    """Let paho read and write what the selector says its socket is ready for."""
    if events & selectors.EVENT_READ:
        client.loop_read()
    if events & selectors.EVENT_WRITE:
        client.loop_write()


def mqtt_publisher_main(
    conn: Connection, port: int, message_bytes: int, share: tuple[int, int]
) -> None:
    """One of Mosquitto's publishers (``share``: its index and how many there are): each
    ``active/<i>`` of its share for i < the count it is told, ten times a second. A tick whose
    messages are still being written when the next is due is skipped (counted)."""
    raise_open_files()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"publisher-{share[0]}")
    client.connect(LOOPBACK, port, keepalive=60)
    sock = client.socket()
    assert sock is not None
    selector = selectors.DefaultSelector()
    selector.register(conn.fileno(), selectors.EVENT_READ, None)
    selector.register(sock, selectors.EVENT_READ, client)
    state = {"topics": 0, "sent": 0, "skipped": 0}
    payload = os.urandom(message_bytes)
    next_tick = time.monotonic()
    while True:
        if time.monotonic() >= next_tick:
            next_tick += 1 / RATE
            if client.want_write():
                state["skipped"] += 1
            else:
                for i in range(share[0], state["topics"], share[1]):
                    client.publish(f"active/{i}", payload, qos=0)
                state["sent"] += len(range(share[0], state["topics"], share[1]))
        writing = selectors.EVENT_WRITE if client.want_write() else 0
        selector.modify(sock, selectors.EVENT_READ | writing, client)
        for key, events in selector.select(max(0.0, next_tick - time.monotonic())):
            if key.data is not None:
                network(client, events)
                continue
            command, value = conn.recv()
            if command == "quit":
                client.disconnect()
                return
            if command == "topics":
                state["topics"] = value
            conn.send(dict(state))
        client.loop_misc()


# -- the coordinator --------------------------------------------------------------------------


class Clients:
    """The client processes of one run: each holds every ``processes``-th subscriber."""

    def __init__(self, kind: str, target: str | int, mode: str, total: int, processes: int) -> None:
        context = mp.get_context("spawn")
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        self.shares = [list(range(p, total, processes)) for p in range(processes)]
        self.opened = [0] * processes
        for mine in self.shares:
            conn, child = context.Pipe()
            if kind == "relay":
                job: tuple[Any, ...] = (relay_clients_main, (child, target, mode, mine, total))
            else:
                job = (mqtt_clients_main, (child, target, mode, mine))
            process = context.Process(target=job[0], args=job[1])
            process.start()
            child.close()
            self.conns.append(conn)
            self.processes.append(process)

    def open(self, subscribers: int) -> int:
        """Open connections until ``subscribers`` are connected in all; those that failed."""
        for p, conn in enumerate(self.conns):
            conn.send(("open", sum(i < subscribers for i in self.shares[p]) - self.opened[p]))
        failed = 0
        for p, conn in enumerate(self.conns):
            answer = conn.recv()
            self.opened[p], failed = answer["opened"], failed + answer["failed"]
        return failed

    def ask(self, command: str) -> list[Any]:
        for conn in self.conns:
            conn.send((command, None))
        return [conn.recv() for conn in self.conns]

    def stop(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("quit", None))
        for process in self.processes:
            process.join(15)
            if process.is_alive():
                process.kill()
                process.join()


@dataclass
class Step:
    """The server with ``subscribers`` connected, over one window."""

    subscribers: int
    rss_mib: float
    pss_mib: float
    uss_mib: float
    rss_max_mib: float
    per_subscriber_bytes: dict[str, float]
    server_cores: float
    delivered_per_s: float
    delivered_hz_per_subscriber: float
    bytes_per_frame: float
    clients_cores: float
    clients_rss_mib: float
    failed: int
    closed: int
    load_average: float


def window(pid: int, clients: Clients, seconds: float) -> tuple[list[Memory], dict[str, Any]]:
    """Sample the server's memory every second for ``seconds``; what the clients and the server
    did meanwhile."""
    before, server_before = clients.ask("sample"), cpu.process_tree(pid)
    memories = []
    for _ in range(max(1, round(seconds))):
        memories.append(tree_memory(pid))
        time.sleep(1.0)
    after, server_after = clients.ask("sample"), cpu.process_tree(pid)
    wall = after[0]["cpu"].at - before[0]["cpu"].at
    frames_got = sum(a["frames"] - b["frames"] for a, b in zip(after, before, strict=True))
    bytes_got = sum(a["bytes"] - b["bytes"] for a, b in zip(after, before, strict=True))
    return memories, {
        "server_cores": server_after.cores_since(server_before),
        "delivered_per_s": frames_got / wall,
        "bytes_per_frame": bytes_got / frames_got if frames_got else 0.0,
        "clients_cores": sum(
            a["cpu"].cores_since(b["cpu"]) for a, b in zip(after, before, strict=True)
        ),
        "clients_rss_mib": sum(a["rss"] for a in after) / 2**20,
        "closed": sum(a["closed"] for a in after),
    }


def median_memory(memories: list[Memory]) -> Memory:
    return Memory(
        *(
            int(statistics.median(getattr(m, name) for m in memories))
            for name in ("rss", "pss", "uss")
        )
    )


def steps(
    pid: int, clients: Clients, counts: list[int], args: argparse.Namespace, feed: Any = None
) -> list[Step]:
    """The baseline, then each count of subscribers in turn (each adds to the last)."""
    time.sleep(args.settle)
    baseline_samples, _ = window(pid, clients, args.window)
    baseline = median_memory(baseline_samples)
    out = [step(0, memory=baseline, baseline=baseline, samples=baseline_samples, did={}, failed=0)]
    for count in counts:
        failed = clients.open(count)
        if feed is not None:
            feed(count)
        time.sleep(args.settle)
        samples, did = window(pid, clients, args.window)
        memory = median_memory(samples)
        out.append(
            step(count, memory=memory, baseline=baseline, samples=samples, did=did, failed=failed)
        )
        print(json.dumps(asdict(out[-1])), file=sys.stderr, flush=True)
    return out


def step(
    count: int,
    *,
    memory: Memory,
    baseline: Memory,
    samples: list[Memory],
    did: dict[str, Any],
    failed: int,
) -> Step:
    mib = 2**20
    per = memory.per_subscriber(baseline, count) if count else {"rss": 0, "pss": 0, "uss": 0}
    return Step(
        subscribers=count,
        rss_mib=round(memory.rss / mib, 1),
        pss_mib=round(memory.pss / mib, 1),
        uss_mib=round(memory.uss / mib, 1),
        rss_max_mib=round(max(m.rss for m in samples) / mib, 1),
        per_subscriber_bytes={k: round(v) for k, v in per.items()},
        server_cores=round(did.get("server_cores", 0.0), 3),
        delivered_per_s=round(did.get("delivered_per_s", 0.0)),
        delivered_hz_per_subscriber=round(did.get("delivered_per_s", 0.0) / max(count, 1), 2),
        bytes_per_frame=round(did.get("bytes_per_frame", 0.0)),
        clients_cores=round(did.get("clients_cores", 0.0), 3),
        clients_rss_mib=round(did.get("clients_rss_mib", 0.0), 1),
        failed=failed,
        closed=did.get("closed", 0),
        load_average=round(os.getloadavg()[0], 2),
    )


def stopped(
    pid: int, clients: Clients, args: argparse.Namespace, feed: Any, seconds: float
) -> dict[str, Any]:
    """``--stopped`` subscribers that read for a window, then stop reading: the server's
    growth per stopped subscriber (its peak while they are stopped over its median while they
    read)."""
    failed = clients.open(args.stopped)
    if feed is not None:
        feed(args.stopped)
    time.sleep(args.settle)
    reading, did = window(pid, clients, args.window)
    clients.ask("pause")
    samples: list[int] = []
    for _ in range(round(seconds)):
        samples.append(tree_memory(pid).rss)
        time.sleep(1.0)
    base = median_memory(reading).rss
    return {
        "subscribers": args.stopped,
        "failed": failed,
        "reading_rss_mib": round(base / 2**20, 1),
        "stopped_rss_peak_mib": round(max(samples) / 2**20, 1),
        "stopped_rss_last_mib": round(samples[-1] / 2**20, 1),
        "growth_per_subscriber_bytes": round((max(samples) - base) / args.stopped),
        "bytes_per_frame": round(did["bytes_per_frame"]),
        "delivered_hz_per_subscriber_reading": round(did["delivered_per_s"] / args.stopped, 2),
        "rss_stopped_mib": [round(v / 2**20, 1) for v in samples[:: max(1, len(samples) // 30)]],
        "load_average": round(os.getloadavg()[0], 2),
        "peak_at_s": samples.index(max(samples)) + 1,
    }


# -- the servers ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def relay_server(workdir: Path, entities: int) -> AsyncIterator[tuple[int, str]]:
    """``fanout relay`` (default configuration) on bench/relay.py's scripted publisher: its pid
    and URL."""
    context = mp.get_context("spawn")
    pub_conn, child = context.Pipe()
    publisher = context.Process(target=publisher_main, args=(child, entities))
    publisher.start()
    child.close()
    try:
        url = await asyncio.to_thread(pub_conn.recv)
        async with Children() as children:
            relay = await children.start(
                "relay", ["--publisher", url, "--port", "0"], workdir / "relay.log"
            )
            yield relay.pid, relay.url
    finally:
        with contextlib.suppress(OSError):
            pub_conn.send("stop")
        publisher.join(10)
        if publisher.is_alive():
            publisher.kill()


@contextlib.contextmanager
def mosquitto(workdir: Path) -> Iterator[tuple[int, int]]:
    """Mosquitto on a free loopback port, its settings default but ``max_connections -1``:
    its pid and port."""
    port = free_port()
    config = workdir / "mosquitto.conf"
    config.write_text(
        f"listener {port} {LOOPBACK}\nmax_connections -1\nallow_anonymous true\n"
        "persistence false\nlog_dest stderr\n"
    )
    with (workdir / "mosquitto.log").open("ab") as log:
        process = subprocess.Popen([require("mosquitto"), "-c", str(config)], stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((LOOPBACK, port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.05)
        yield process.pid, port
    finally:
        process.terminate()
        process.wait(10)


@contextlib.contextmanager
def mqtt_publishers(port: int, message_bytes: int, count: int) -> Iterator[list[Connection]]:
    """``count`` publisher processes sharing the active topics; a pipe to each."""
    context = mp.get_context("spawn")
    conns, processes = [], []
    for index in range(count):
        conn, child = context.Pipe()
        share = (index, count)
        process = context.Process(
            target=mqtt_publisher_main, args=(child, port, message_bytes, share)
        )
        process.start()
        child.close()
        conns.append(conn)
        processes.append(process)
    try:
        yield conns
    finally:
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.send(("quit", None))
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()


def relay_slow_closed(url: str) -> float:
    """Subscribers the relay closed as slow consumers so far (its ``/metrics``)."""
    return scrape(url).get("fanout_relay_slow_consumers_closed_total", 0.0)


async def run_relay(mode: str, args: argparse.Namespace, workdir: Path) -> Any:
    total = args.stopped if mode == "stopped" else max(args.counts)
    async with relay_server(workdir / mode, args.entities) as (pid, url):
        clients = Clients("relay", url, mode, total, args.processes)
        try:
            if mode == "stopped":
                seconds = min(args.stop_seconds, 3 * RELAY_STALL_TIMEOUT)
                found = await asyncio.to_thread(stopped, pid, clients, args, None, seconds)
                found["slow_consumers_closed"] = relay_slow_closed(url)
                return found
            return await asyncio.to_thread(steps, pid, clients, args.counts, args)
        finally:
            await asyncio.to_thread(clients.stop)


def run_mosquitto(mode: str, args: argparse.Namespace, workdir: Path) -> Any:
    total = args.stopped if mode == "stopped" else max(args.counts)
    (workdir / mode).mkdir(parents=True, exist_ok=True)
    with (
        mosquitto(workdir / mode) as (pid, port),
        mqtt_publishers(port, args.message_bytes, args.publishers) as publishers,
    ):

        def feed(count: int) -> None:
            if mode != "idle":
                for each in publishers:
                    each.send(("topics", count))
                for each in publishers:
                    each.recv()

        clients = Clients("mosquitto", port, mode, total, args.processes)
        try:
            if mode == "stopped":
                return stopped(pid, clients, args, feed, args.stop_seconds)
            found = steps(pid, clients, args.counts, args, feed)
            for each in publishers:
                each.send(("sample", None))
            return {"steps": found, "publishers": [each.recv() for each in publishers]}
        finally:
            clients.stop()


def per_subscriber(found: dict[str, Any], server: str, mode: str, count: int) -> float | None:
    run = found[server][mode]
    for each in run["steps"] if isinstance(run, dict) else run:
        if each.subscribers == count:
            return float(each.per_subscriber_bytes["rss"])
    return None


def headline(found: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Per-subscriber bytes of each server and mode at each count (the largest count's key
    plain, the others' ending ``_at_<count>``), and the stopped readers' growth and bound."""
    results: dict[str, Any] = {}
    for server in args.servers:
        for mode in ("idle", "active"):
            if mode not in args.modes:
                continue
            for count in args.counts:
                key = f"{server}_rss_per_subscriber_{mode}_bytes"
                results[key if count == max(args.counts) else f"{key}_at_{count}"] = per_subscriber(
                    found, server, mode, count
                )
    if "stopped" in args.modes:
        for server in args.servers:
            run = found[server]["stopped"]
            results[f"{server}_stopped_growth_per_subscriber_bytes"] = run[
                "growth_per_subscriber_bytes"
            ]
            frame = run["bytes_per_frame"]
            if server == "relay":
                bound = RELAY_QUEUE_LIMIT * frame + TRANSPORT_BYTES
            else:
                bound = MOSQUITTO_MAX_QUEUED_MESSAGES * (frame + len("active/9999") + 4)
            results[f"{server}_stopped_bound_per_subscriber_bytes"] = round(bound)
    return results


# -- what an idle subscriber's bytes are made of ----------------------------------------------


async def breakdown(args: argparse.Namespace) -> dict[str, Any]:
    """A relay in this process, traced (``tracemalloc``), and ``--breakdown`` idle subscribers
    in client processes: the Python heap's growth per subscriber by where it was allocated, and
    the objects the collector tracks that were added, by type (count and ``sys.getsizeof``)."""
    context = mp.get_context("spawn")
    pub_conn, child = context.Pipe()
    publisher = context.Process(target=publisher_main, args=(child, args.entities))
    publisher.start()
    child.close()
    count = args.breakdown
    try:
        url = await asyncio.to_thread(pub_conn.recv)
        tracemalloc.start(args.frames)
        async with running_relay(url, timeout=60) as (_, relay_url):
            clients = Clients("relay", relay_url, args.breakdown_mode, count, args.processes)
            try:
                await asyncio.sleep(args.settle)
                before, types_before = heap()
                await asyncio.to_thread(clients.open, count)
                await asyncio.sleep(args.settle)
                after, types_after = heap()
            finally:
                await asyncio.to_thread(clients.stop)
    finally:
        tracemalloc.stop()
        with contextlib.suppress(OSError):
            pub_conn.send("stop")
        publisher.join(10)
    ours = [tracemalloc.Filter(False, __file__), tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(ours), after.filter_traces(ours)
    lines = after.compare_to(before, "traceback" if args.frames > 1 else "lineno")
    grown = sum(d.size_diff for d in lines)
    modules: dict[str, int] = {}
    for d in after.compare_to(before, "filename"):
        name = module_of(d.traceback[0].filename)
        modules[name] = modules.get(name, 0) + d.size_diff
    types = {
        name: (types_after[name][0] - n, types_after[name][1] - size)
        for name, (n, size) in types_before.items()
        if name in types_after
    } | {name: v for name, v in types_after.items() if name not in types_before}
    return {
        "subscribers": count,
        "mode": args.breakdown_mode,
        "traced_bytes_per_subscriber": round(grown / count),
        "by_module": {
            name: round(size / count)
            for name, size in sorted(modules.items(), key=lambda kv: -kv[1])[: args.top]
        },
        "by_line": [
            {
                "where": " < ".join(f"{module_of(f.filename)}:{f.lineno}" for f in d.traceback),
                "bytes_per_subscriber": round(d.size_diff / count),
                "blocks_per_subscriber": round(d.count_diff / count, 2),
            }
            for d in lines[: args.top]
        ],
        "by_type": [
            {
                "type": name,
                "objects_per_subscriber": round(n / count, 2),
                "getsizeof_bytes_per_subscriber": round(size / count),
            }
            for name, (n, size) in sorted(types.items(), key=lambda kv: -kv[1][1])[: args.top]
        ],
        "load_average": round(os.getloadavg()[0], 2),
    }


def module_of(filename: str) -> str:
    """A source file's module, dotted (``fanout.connection``, ``asyncio.queues``)."""
    for root in ("/src/", "site-packages/", "/python3.11/"):
        if root in filename:
            filename = filename.rsplit(root, 1)[1]
            break
    return filename.removesuffix(".py").replace("/", ".")


def heap() -> tuple[tracemalloc.Snapshot, dict[str, tuple[int, int]]]:
    """A traced heap's snapshot, and the collector's objects: (count, bytes) by type."""
    gc.collect()
    types: dict[str, list[int]] = {}
    for each in gc.get_objects():
        kind = type(each)
        entry = types.setdefault(f"{kind.__module__}.{kind.__qualname__}", [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(each)
    return tracemalloc.take_snapshot(), {k: (n, size) for k, (n, size) in types.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--stopped", type=int, default=200, help="subscribers that stop reading")
    parser.add_argument(
        "--stop-seconds",
        type=float,
        default=240.0,
        help="seconds Mosquitto's stopped readers are watched (the relay's: at most 30, three"
        " times its stall timeout, after which it has closed them)",
    )
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before a window")
    parser.add_argument("--window", type=float, default=10.0, help="seconds sampled")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--entities", type=int, default=ENTITIES)
    parser.add_argument("--message-bytes", type=int, default=4400, help="Mosquitto's message")
    parser.add_argument("--publishers", type=int, default=2, help="Mosquitto's publishers")
    parser.add_argument("--servers", nargs="+", default=["relay", "mosquitto"])
    parser.add_argument("--modes", nargs="+", default=["idle", "active", "stopped"])
    parser.add_argument("--quick", action="store_true", help="100 and 500 subscribers, short")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--breakdown",
        type=int,
        help="instead: this many idle subscribers on a traced relay in this process; where its"
        " heap grew (written to bench/results/submemory-breakdown.json)",
    )
    parser.add_argument("--frames", type=int, default=1, help="--breakdown's traceback depth")
    parser.add_argument("--breakdown-mode", choices=("idle", "active"), default="idle")
    parser.add_argument("--top", type=int, default=25, help="--breakdown's lines and types")
    args = parser.parse_args()
    if args.breakdown:
        found = asyncio.run(breakdown(args))
        found |= {"machine": describe(), "calibration": calibrate()}
        name = "submemory-breakdown.json"
        if args.breakdown_mode != "idle":
            name = f"submemory-breakdown-{args.breakdown_mode}.json"
        write_results(found, args.out.with_name(name))
        return
    if args.quick:
        args.counts, args.stopped, args.stop_seconds = [100, 500], 50, 20.0
        args.settle, args.window = 3.0, 3.0
    open_files = raise_open_files()
    machine, calibration = describe(), calibrate()
    found: dict[str, dict[str, Any]] = {"relay": {}, "mosquitto": {}}
    with tempfile.TemporaryDirectory(prefix="fanout-bench-submemory-") as workdir:
        for mode in args.modes:
            for server in args.servers:
                print(f"{server} {mode}", file=sys.stderr, flush=True)
                if server == "relay":
                    found[server][mode] = asyncio.run(run_relay(mode, args, Path(workdir)))
                else:
                    found[server][mode] = run_mosquitto(mode, args, Path(workdir))
    results = headline(found, args)
    results["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    results["open_files_limit"] = open_files
    results["setup"] = {k: v for k, v in vars(args).items() if k not in ("out", "quick")}
    results["runs"] = {
        server: {
            mode: (
                [asdict(s) for s in run]
                if isinstance(run, list)
                else {k: [asdict(s) for s in v] if k == "steps" else v for k, v in run.items()}
            )
            for mode, run in modes.items()
        }
        for server, modes in found.items()
    }
    results["machine"], results["calibration"] = machine, calibration
    write_results(results, None if args.quick else args.out)
    summary = {k: v for k, v in results.items() if not isinstance(v, list | dict)}
    print(json.dumps(summary))  # the last line: the figures without the runs


if __name__ == "__main__":
    main()
