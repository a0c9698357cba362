"""The relay ``bench/relay.py`` measures: instrumented in a process of its own (``instrument``,
run by ``fanout.testing.relays.RelayProcess``) or run as ``fanout relay --workers N`` and
sampled from outside (``CommandRelay``); py-spy over it and its event loop's configuration."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypedDict

from fanout.metrics import scrape
from fanout.relay.config import Process
from fanout.relay.core.relaycore import Send
from fanout.relay.shell.server import RelayServer
from fanout.testing import cpu

if TYPE_CHECKING:  # not imported when run: a checkout from before Process.loop lacks it
    from fanout.relay.config import EventLoop


def instrument(server: RelayServer) -> Callable[[], dict[str, Any]]:
    """The relay process's only instrumentation (``fanout.testing.relays.Instrument``): when each
    tick's state is swapped in, the CPU time of the event loop's rounds of pushes, and how many
    rounds there were."""
    core = server.core
    swaps: list[tuple[int, float]] = []
    end_epoch = core.end_epoch

    def recorded_end_epoch() -> list[Send]:
        before = {name: state.buffer.generation for name, state in core.datasets.items()}
        sends = end_epoch()
        now = time.time()
        for name, state in core.datasets.items():
            stamp = state.buffer.stamp
            if stamp is not None and state.buffer.generation != before.get(name):
                swaps.append((stamp.seq, now))
        return sends

    core.end_epoch = recorded_end_epoch  # type: ignore[method-assign]
    # The pump times its rounds itself (``Pump.push_cpu``, two CPU clock reads a round, each a
    # system call of several µs here): the benchmark reads that and only counts the rounds.
    rounds = [0]
    pump_round = server.pump.round

    def counted_pump_round(now: float) -> None:
        pump_round(now)
        rounds[0] += 1

    server.pump.round = counted_pump_round  # type: ignore[method-assign]
    pump = server.pump
    return lambda: {"swaps": list(swaps), "pump_cpu": pump.push_cpu, "pump_rounds": rounds[0]}


class CommandRelay:
    """The relay as ``fanout relay --workers N`` runs it (``--workers``): a leader and N workers
    (or, for N = 1, the one process), sampled from outside, as ``RelayProcess`` is from inside.

    CPU is the process tree's (the leader and its workers, ``cpu.process_tree``), each worker's
    besides; counters are the relay's ``/metrics`` (every worker's, summed by the leader), and
    each worker's connections and rows from its ``*_by_worker{worker}`` figures.
    Nothing in it records when a tick is swapped in: trials of this relay measure latency from
    the publisher's send (``p99_tick_ms``).
    """

    def __init__(self, publisher: str, workers: int, log: Path) -> None:
        command = [sys.executable, "-m", "fanout", "relay", "--publisher", publisher]
        command += ["--port", "0", "--name", "bench", "--workers", str(workers)]
        self.workers = workers
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(
                [*command, "--log-level", "warning"], stdout=subprocess.PIPE, stderr=stderr
            )
        self.url = ""

    def ready(self, timeout: float = 120.0) -> str:
        """Wait for its ready line; return its URL."""
        assert self.process.stdout is not None
        deadline = time.time() + timeout
        while not self.url:
            line = self.process.stdout.readline().decode()
            if not line or time.time() > deadline:
                raise RuntimeError(f"the relay did not become ready ({self.process.poll()})")
            if line.startswith("fanout relay ready "):
                self.url = line.split()[-1]
        return self.url

    def sample(self) -> SimpleNamespace:
        """CPU time (all, and of each worker), counters summed and by worker, now."""
        values = scrape(self.url)  # the relay's: the leader's sum of its workers'
        stats = {
            name.removeprefix("fanout_relay_").removesuffix("_total"): value
            for name, value in values.items()
            if name.startswith("fanout_relay_") and "{" not in name
        }
        by_worker: dict[str, dict[str, float]] = {}
        for name, value in values.items():
            family, _, label = name.partition("_by_worker{")
            if label:  # fanout_relay_rows_by_worker{worker="1"}: that worker's fanout_relay_rows
                by_worker.setdefault(label.rstrip("}"), {})[family] = value
        if self.workers > 1 and len(by_worker) != self.workers:
            raise RuntimeError(f"{self.workers} workers, the leader read {len(by_worker)}")
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids = [int(pid) for pid in children.read_text().split()] if self.workers > 1 else []
        report = {
            "pump_cpu": stats.get("push_cpu_seconds", 0.0),
            "swaps": [],
            "workers_cpu": [cpu.process_tree(pid) for pid in pids],
            "workers": dict(sorted(by_worker.items())),
        }
        return SimpleNamespace(cpu=cpu.process_tree(self.process.pid), stats=stats, report=report)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def spy_on(pid: int | None, seconds: float, output: Path) -> subprocess.Popen[bytes]:
    """Sample the relay process's stacks with py-spy for ``seconds`` (the measurement window),
    written to ``output`` as collapsed stacks (``.txt``, one line a stack with its count) or as a
    flame graph (``.svg``). Non-blocking: py-spy reads the process's memory without stopping it,
    so the relay's own CPU time is what it is without the profiler."""
    assert pid is not None
    kind = "flamegraph" if output.suffix == ".svg" else "raw"
    command = [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid)]
    command += ["--duration", str(math.ceil(seconds)), "--rate", "250", "--nonblocking"]
    command += ["--format", kind, "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


class ProcessSection(TypedDict, total=False):
    """``RelayConfig``'s ``process`` keyword, when one is given."""

    process: Process


def loop_given(loop: EventLoop) -> ProcessSection:
    """The relay's ``process`` section for ``--loop``; none for the default, so that this script
    also runs a checkout from before ``Process.loop`` (``bench/checkouts.py``: one harness for
    both sides of an A/B)."""
    return {} if loop == "asyncio" else {"process": Process(loop=loop)}
