"""``bench/submemory.py``'s clients: the relay's (``bench/relay.py``'s picows subscriber,
counting), Mosquitto's (paho-mqtt, many over one selector) and Mosquitto's publishers, each
kind in processes of its own; ``Clients`` is the coordinator's handle on one run's."""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import resource
import selectors
import socket
import time
from multiprocessing.connection import Connection
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fanout.testing import cpu, frames
from fanout.testing.machine import rss
from fanout.testing.ports import LOOPBACK
from fanout.testing.world import WORLD, routes
from fanout.views import Box
from relayclients import Subscriber  # bench/relay.py's picows subscriber

RATE = 10.0  # pushes or messages a second, per active subscriber
BATCH = 250  # connections opened at once per client process: no server refuses for backlog
STOPPED_WINDOW = 4096  # a stopped subscriber's socket receive buffer (bytes), as bench/stalled.py


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

    def on_message(self, message: bytes | memoryview, now: float) -> None:
        self.frames += 1
        self.bytes += len(message)
        if frames.head(message).type == "error":
            self.refused(message)

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
        assert isinstance(sock, socket.socket), "paho's plain TCP transport: a socket"
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
