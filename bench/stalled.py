"""What subscribers that stop reading cost a relay: its memory stays within their queues (issue 45).

Run ``.venv/bin/python bench/stalled.py --subscribers 1000``; it prints one JSON object and
writes ``bench/results/stalled.json`` (``--quick``: 200 subscribers, short phases, not written).

A Spark publisher (``--agents`` moving agents) and one relay, started with ``--queue-limit`` and a
``--stall-timeout`` longer than the run, so that the relay holds every stalled subscriber rather
than closing it. In this process ``--subscribers`` WebSocket connections each subscribe to a box
view of ``--box`` units at 10 pushes/s, then:

1. **reading**: every connection reads what it is sent, for ``--measure`` seconds; the relay's
   resident memory is sampled every second (``reading_rss_mib``: the median), and its
   ``/metrics`` give the mean push's size;
2. **stalled**: every connection stops reading (``transport.pause_reading()``: TCP's windows
   close, the kernel's buffers fill, then the relay's own), for ``--measure`` seconds more
   (``stalled_rss_mib``: the peak).

``growth_per_subscriber_kib`` is what each stalled subscriber cost the relay beyond the reading
run; ``bound_per_subscriber_kib`` is its configured queue (``--queue-limit`` frames of the mean
push's size, with a 64 KiB transport buffer). The run passes (``within_bound``) when the first
is at most the second: a subscriber that stops reading costs bounded memory, whatever the run's
length. The kernel's socket buffers are not the relay's resident memory and are not counted:
``sent_while_stalled_kib_per_subscriber`` is what the relay wrote to each after it stopped
reading, what those buffers took before the relay's own held the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from fanout.launch import Children
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.cpu import process_tree, this_process
from fanout.testing.machine import describe, rss, write_results
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Hello, Push, Subscribe

RESULTS = Path(__file__).parent / "results" / "stalled.json"
WORLD = 1000.0
#: What asyncio's transport may hold beyond the relay's queue before it pauses the writer.
TRANSPORT_BYTES = 64 * 1024


async def subscriber(url: str, index: int, box: Box, window: int) -> ClientConnection:
    """A connection subscribed to ``box``, once its first push came. Its socket's receive
    buffer is ``window`` bytes, so that once it stops reading the kernel holds little and the
    relay's own queue fills within the run."""
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    websocket = await connect(url, sock=sock, max_size=None, compression=None)
    await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber", name=f"s{index}")))
    await websocket.send(codec.encode(Subscribe(1, "agents", box, rate=10.0)))
    decoder = codec.to_subscriber()
    while not isinstance(decoder.decode(await websocket.recv()), Push):
        pass
    return websocket


async def drain(websocket: ClientConnection, stalled: asyncio.Event) -> int:
    """Read until told to stall; the bytes read."""
    read = 0
    while not stalled.is_set():
        try:
            message = await asyncio.wait_for(websocket.recv(), 0.5)
        except TimeoutError:
            continue
        read += len(message)
    websocket.transport.pause_reading()
    return read


async def sample(pid: int, seconds: float) -> list[float]:
    """The process's resident memory (MiB), every second for ``seconds``."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out.append(rss(pid) / 2**20)
        await asyncio.sleep(1.0)
    return out


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    async with Children() as children:
        publisher = await children.start(
            "publisher",
            [
                *("--port", "0", "--state-dir", str(workdir / "publisher")),
                *("--agents", str(args.agents), "--world", str(WORLD)),
            ],
            workdir / "publisher.log",
        )
        relay = await children.start(
            "relay",
            [
                *("--publisher", publisher.url, "--port", "0", "--workers", "1"),
                *("--queue-limit", str(args.queue_limit)),
                *("--stall-timeout", str(3 * args.measure + 120)),
                *("--max-connections", str(args.subscribers + 10)),
            ],
            workdir / "relay.log",
        )
        rng = np.random.default_rng(args.seed)
        corners = rng.uniform(0.0, WORLD - args.box, size=(args.subscribers, 2)).tolist()
        websockets: list[ClientConnection] = []
        for start in range(0, args.subscribers, 100):  # in waves of 100
            wave = range(start, min(start + 100, args.subscribers))
            websockets += await asyncio.gather(
                *(
                    subscriber(
                        relay.url,
                        n,
                        Box(tuple(corners[n]), tuple(c + args.box for c in corners[n])),
                        args.window,
                    )
                    for n in wave
                )
            )
        stalled = asyncio.Event()
        before = scrape(relay.url)
        cpu_relay, cpu_clients = process_tree(relay.pid), this_process()
        async with asyncio.TaskGroup() as tasks:
            drains = [tasks.create_task(drain(ws, stalled)) for ws in websockets]
            reading = await sample(relay.pid, args.measure)
            after = scrape(relay.url)
            relay_cores = process_tree(relay.pid).cores_since(cpu_relay)
            client_cores = this_process().cores_since(cpu_clients)
            stalled.set()
        read = sum(task.result() for task in drains)
        stalling = await sample(relay.pid, args.measure)
        end = scrape(relay.url)
        for websocket in websockets:
            websocket.transport.abort()
    frames = after["fanout_relay_frames_sent_total"] - before["fanout_relay_frames_sent_total"]
    sent = after["fanout_relay_bytes_sent_total"] - before["fanout_relay_bytes_sent_total"]
    mean_push = sent / frames if frames else 0.0
    reading_mib = statistics.median(reading)
    stalled_mib = max(stalling)
    growth = (stalled_mib - reading_mib) * 1024 / args.subscribers
    bound = (args.queue_limit * mean_push + TRANSPORT_BYTES) / 1024
    return {
        "subscribers": args.subscribers,
        "reading_rss_mib": round(reading_mib, 1),
        "stalled_rss_mib": round(stalled_mib, 1),
        "stalled_rss_last_mib": round(stalling[-1], 1),
        "growth_per_subscriber_kib": round(growth, 1),
        "bound_per_subscriber_kib": round(bound, 1),
        "within_bound": growth <= bound,
        "mean_push_bytes": round(mean_push),
        "pushes_per_s_reading": round(frames / args.measure),
        "bytes_read_by_clients": read,
        "sent_while_stalled_kib_per_subscriber": round(
            (end["fanout_relay_bytes_sent_total"] - after["fanout_relay_bytes_sent_total"])
            / args.subscribers
            / 1024,
            1,
        ),
        "slow_consumers_closed": end.get("fanout_relay_slow_consumers_closed_total", 0.0),
        "relay_cores_reading": round(relay_cores, 2),
        "client_cores_reading": round(client_cores, 2),
        "rss_reading_mib": [round(v, 1) for v in reading],
        "rss_stalled_mib": [round(v, 1) for v in stalling],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=20_000)
    parser.add_argument("--box", type=float, default=100.0, help="side of each box view")
    parser.add_argument("--queue-limit", type=int, default=64, help="the relay's --queue-limit")
    parser.add_argument("--measure", type=float, default=90.0, help="seconds of each phase")
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument(
        "--window",
        type=int,
        default=4096,
        help="each subscriber socket's receive buffer (bytes): small, so that stalling fills"
        " the relay's queue rather than the kernel's buffers",
    )
    parser.add_argument("--quick", action="store_true", help="200 subscribers, 20 s phases")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.subscribers, args.measure = 200, 20.0
    machine, calibration = describe(), calibrate()
    with tempfile.TemporaryDirectory(prefix="fanout-bench-stalled-") as workdir:
        found = asyncio.run(bench(args, Path(workdir)))
    results = {
        **found,
        "setup": {
            "agents": args.agents,
            "box": args.box,
            "queue_limit": args.queue_limit,
            "measure_s": args.measure,
            "seed": args.seed,
            "window_bytes": args.window,
        },
        "load_average_1m_end": os.getloadavg()[0],
        "machine": machine,
        "calibration": calibration,
    }
    write_results(results, None if args.quick else args.out)
    summary = {k: v for k, v in results.items() if not isinstance(v, list | dict)}
    print(json.dumps(summary))  # the last line: the figures without the samples


if __name__ == "__main__":
    main()
