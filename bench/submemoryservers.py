"""The servers ``bench/submemory.py`` measures: ``fanout relay`` on bench/relay.py's scripted
publisher, Mosquitto, and Mosquitto's publisher processes."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from multiprocessing.connection import Connection
from pathlib import Path

from fanout.launch import Children
from fanout.metrics import scrape
from fanout.testing.binaries import require
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.world import publisher_main
from submemoryclients import mqtt_publisher_main


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
                "relay",
                ["--publisher", url, "--port", "0", "--workers", "1"],
                workdir / "relay.log",
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
