"""The servers ``bench/sharing.py`` measures: the Spark publisher (started with the benchmark's
simulation; its sockets' bytes, its CPU and its logged micro-batches) and the relays (their
policy from the flags, their CPU and counters)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fanout.client.routing import DEFAULT_SIDE
from fanout.launch import Child, Children
from fanout.relay.config import Cluster, Planning, RelayConfig, Upstream
from fanout.relay.core.planner import IN_A_MAP, Policy
from fanout.testing.cpu import process_tree
from fanout.testing.relays import RelayProcess, RelaySample
from fanout.testing.sharing import RELAYS, WORLD
from fanout.testing.wait import NotYet, eventually

TICK_RATE = 10.0
PERIOD = 10  # each agent moves once a second, so once per micro-batch: 20,000 updates/s
TRIGGER = 2.0  # seconds between micro-batches: Spark keeps up even on a busy machine
WINDOW_EDGE = 0.3  # seconds after a micro-batch is handed over that a window opens or closes
MASTER = "local[2]"

BATCH_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*agents batch (?P<seq>\d+) tick \d+:"
    r" (?P<changed>\d+) changed, (?P<relays>\d+) relays; (?P<rest>.*)$"
)
STAGE = re.compile(r"(?P<name>[a-z+]+) (?P<ms>\d+) ms")


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
