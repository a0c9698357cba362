"""Objects as files: attribute writes per second through a fuse3 mount and through the library, and
the latency from ``echo >>`` returning to a ``cat 'obj?wait'`` reader printing the change (mode
``latest``: the live path, docs/concepts.md "Two paths"), on the writer's relay and on another,
and to a ``cat 'obj?delta,wait'`` reader (mode ``every``: the log's order, the confirmed path).

One real deployment on loopback: ``fanout publisher`` with an objects dataset (Spark ``local[*]``),
two ``fanout relay``s, three ``fanout mount``s (one through each relay, one ``--publisher``);
``--objects`` objects (1,000) written first, ``--watchers`` (10) objects followed by three ``cat``
processes each: ``?wait`` and ``?delta,wait`` on the first relay's mount, ``?wait`` on the
second's. Each run measures:

* ``writes_per_s_library``: ``Objects.write`` of one attribute, one after the other, each
  returning once durable at the publisher;
* ``writes_per_s_mount``: the same through the first mount, each an ``open(O_APPEND)``, one
  ``write(2)`` and a ``close`` of an object file, as ``echo 'attr::v' >> obj`` does
  (``writes_per_s_mount_direct``: the ``--publisher`` mount, writing to the publisher itself);
* ``echo_to_watch``: ``bash -c "echo 'seq:n:K' >> obj"`` run on the first mount, and the time
  from it returning to that mount's ``?wait`` watcher printing ``seq:n:K`` (one sample at a
  time, round robin over the objects); ``echo_to_watch_other_relay`` the same at the second
  relay's ``?wait`` watcher; ``echo_to_delta`` at the ``?delta,wait`` watcher (until 2026-11-29
  ``echo_to_watch`` named this one: mode ``every`` keeps the log's order and waits for Spark);
* the Spark micro-batch share: the median, over the micro-batches of that run, of the time from
  a micro-batch's start to its batches being sent (Spark's steps before ``foreachBatch`` plus the
  pipeline's stages, from the publisher's log), over the run's median ``echo_to_delta``.

Prints one JSON object last: the median of ``--runs`` runs and their spread (min, max), the
runs, the machine and its calibration; writes it to ``bench/results/objects.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from fanout.client.objects import Objects
from fanout.client.publisher import open_producer
from fanout.launch import Child, Children
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.wait import eventually
from fanout.views.objects.store import Cell
from fanout.views.objects.text import Value

RESULTS = Path(__file__).parent / "results" / "objects.json"
CONFIG = '[datasets.pps]\nindex = "objects"\nsource = "ingest"\n'
_PROGRESS = re.compile(
    r"^(\S+ \S+) INFO fanout.publisher.progress: pps progress batch (\d+): (.*)$"
)
_STAGES = re.compile(r"INFO fanout.publisher.pipeline: pps batch (\d+) tick \d+: .*?; (.*)$")
#: Spark's steps of a micro-batch before ``foreachBatch`` (``addBatch``) runs the pipeline's.
_BEFORE = ("latestOffset", "getBatch", "queryPlanning", "walCommit")


class Watcher:
    """One ``cat 'obj?OPTIONS'`` process and the times its lines first arrived."""

    def __init__(self, path: Path, options: str = "delta,wait") -> None:
        self.path = path
        self.options = options
        self.lines: dict[str, float] = {}
        self._process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            "cat", f"{self.path}?{self.options}", stdout=asyncio.subprocess.PIPE
        )
        self._task = asyncio.create_task(self._read(self._process))

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            self.lines.setdefault(line.decode().rstrip("\n"), time.perf_counter())

    async def arrival(self, line: str, timeout: float = 120.0) -> float:
        await eventually(lambda: line in self.lines, timeout=timeout, every=0.001)
        return self.lines[line]

    def stop(self) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signal.SIGINT)


async def library_writes(objects: Objects, count: int) -> float:
    started = time.perf_counter()
    for index in range(count):
        await objects.write(f"/bench/o{index % 1000}", f"lib:n:{index}\n")
    return count / (time.perf_counter() - started)


def mount_writes(mountpoint: Path, count: int) -> float:
    started = time.perf_counter()
    for index in range(count):
        handle = os.open(mountpoint / "bench" / f"o{index % 1000}", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(handle, f"mnt:n:{index}\n".encode())
        finally:
            os.close(handle)
    return count / (time.perf_counter() - started)


async def echo_to_watch(
    watchers: list[tuple[Watcher, Watcher, Watcher]], samples: int, first: int
) -> dict[str, list[float]]:
    """Milliseconds from each echo returning to its object's watchers: ``wait`` and ``delta``
    on the writer's relay, ``other`` (``?wait``) on the second relay."""
    out: dict[str, list[float]] = {"wait": [], "other": [], "delta": []}
    for number in range(first, first + samples):
        delta, wait, other = watchers[number % len(watchers)]
        shell = await asyncio.create_subprocess_exec(
            "bash", "-c", f"echo 'seq:n:{number}' >> '{delta.path}'"
        )
        if await shell.wait() != 0:
            raise RuntimeError(f"echo to {delta.path} failed")
        returned = time.perf_counter()
        line = f"seq:n:{number}"
        for name, watcher in (("wait", wait), ("other", other), ("delta", delta)):
            out[name].append((await watcher.arrival(line) - returned) * 1000)
    return out


def spark_batch_ms(log: Path, since: str, until: str) -> list[float]:
    """Per micro-batch logged between two log timestamps, the milliseconds from its start to its
    batches being sent to the relays: Spark's steps before ``addBatch`` plus the pipeline's
    stages (state+match, log, snapshot, build, send). Spark's commit after it is not counted."""
    text = log.read_text().splitlines()
    stages: dict[str, float] = {}
    for line in text:
        found = _STAGES.search(line)
        if found:
            spent = re.findall(r"(\d+) ms", found.group(2))
            stages[found.group(1)] = sum(float(ms) for ms in spent)
    out = []
    for line in text:
        found = _PROGRESS.match(line)
        if found and since <= found.group(1) <= until and found.group(2) in stages:
            durations = json.loads(found.group(3))["durationMs"]
            before = sum(float(durations.get(step, 0)) for step in _BEFORE)
            out.append(before + stages[found.group(2)])
    return out


def stamp() -> str:
    # The log's asctime format (logging's default): "2026-11-26 15:22:08,945"
    now = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"


def looked_up(path: Path) -> bool:
    """Whether ``path`` exists; False while the mount answers EIO (its relay's first push
    still to come: Spark's first micro-batch, slow on a loaded machine)."""
    try:
        return path.exists()
    except OSError:
        return False


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def mount(
    root: Path, name: str, relay: Child, publisher: Child | None
) -> tuple[asyncio.subprocess.Process, Path]:
    """``fanout mount``: writes through the relay, or to ``publisher`` directly."""
    mountpoint = root / name
    mountpoint.mkdir()
    direct = ["--publisher", publisher.url] if publisher is not None else []
    with (root / f"{name}.log").open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fanout", "mount", "--relay", relay.url, *direct, "pps",
            str(mountpoint), stderr=log,
        )  # fmt: skip
    await eventually(lambda: os.path.ismount(mountpoint), timeout=30)
    return process, mountpoint


async def deploy(
    children: Children, root: Path
) -> tuple[Child, list[Child], list[asyncio.subprocess.Process], list[Path]]:
    (root / "fanout.toml").write_text(CONFIG)
    publisher = await children.start(
        "publisher",
        ["--config", str(root / "fanout.toml"), "--port", "0", "--state-dir",
         str(root / "state"), "--log-level", "info"],
        root / "publisher.log",
    )  # fmt: skip
    relays = [
        await children.start(
            "relay",
            ["--publisher", publisher.url, "--port", "0", "--workers", "1"],
            root / f"relay{n}.log",
        )
        for n in (1, 2)
    ]
    through, mountpoint = await mount(root, "mnt", relays[0], None)
    direct, direct_point = await mount(root, "direct", relays[0], publisher)
    far, far_point = await mount(root, "far", relays[1], None)
    return publisher, relays, [through, direct, far], [mountpoint, direct_point, far_point]


async def start_watchers(
    args: argparse.Namespace, points: list[Path]
) -> list[tuple[Watcher, Watcher, Watcher]]:
    """Per followed object, ``?delta,wait`` and ``?wait`` on the first relay's mount and
    ``?wait`` on the second's, started once both mounts see the last object written."""
    near, _, far = points
    for last in (point / "bench" / f"o{args.objects - 1}" for point in (near, far)):
        await eventually(partial(looked_up, last), timeout=120, in_thread=True)
    watchers = [
        (
            Watcher(near / "bench" / f"o{i}"),
            Watcher(near / "bench" / f"o{i}", "wait"),
            Watcher(far / "bench" / f"o{i}", "wait"),
        )
        for i in range(args.watchers)
    ]
    every = [watcher for triple in watchers for watcher in triple]
    for watcher in every:
        await watcher.start()
    for watcher in every:
        await watcher.arrival("seq:n:0")
    return watchers


async def one_run(
    args: argparse.Namespace,
    run: int,
    root: Path,
    objects: Objects,
    watchers: list[tuple[Watcher, Watcher, Watcher]],
    *,
    points: list[Path],
) -> dict[str, Any]:
    """One run's figures: the echoes to each watcher, then the writes each way."""
    mountpoint, direct_point, _ = points
    since = stamp()
    latencies = await echo_to_watch(watchers, args.samples, 1 + run * args.samples)
    spark = spark_batch_ms(root / "publisher.log", since, stamp())
    library = await library_writes(objects, args.writes)
    through_mount = await asyncio.to_thread(mount_writes, mountpoint, args.writes)
    direct = await asyncio.to_thread(mount_writes, direct_point, args.writes)
    p50 = statistics.median(latencies["delta"])
    figures = {
        f"echo_to_{name}_{p}_ms": round(percentile(latencies[key], q), 1)
        for name, key in (("watch", "wait"), ("watch_other_relay", "other"), ("delta", "delta"))
        for p, q in (("p50", 0.5), ("p99", 0.99))
    }
    return {
        "writes_per_s_library": round(library, 1),
        "writes_per_s_mount": round(through_mount, 1),
        "writes_per_s_mount_direct": round(direct, 1),
        **figures,
        "spark_batch_p50_ms": statistics.median(spark) if spark else None,
        "microbatch_share": round(statistics.median(spark) / p50, 3) if spark else None,
        "samples": len(latencies["delta"]),
        "micro_batches": len(spark),
    }


async def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    async with Children() as children:
        publisher, relays, mounts, points = await deploy(children, root)
        watchers: list[tuple[Watcher, Watcher, Watcher]] = []
        try:
            async with open_producer(publisher.url) as producer:
                objects = Objects(None, producer, "pps")
                cells = [
                    Cell(f"/bench/o{index}", attr, Value("n", "0"), 0, True).row()
                    for index in range(args.objects)
                    for attr in ("", "seq")
                ]
                await producer.publish("pps", cells)
                watchers = await start_watchers(args, points)
                runs = []
                for run in range(args.runs):
                    runs.append(await one_run(args, run, root, objects, watchers, points=points))
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
        finally:
            for pair in watchers:
                for watcher in pair:
                    watcher.stop()
            for process in mounts:
                process.send_signal(signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 30)
            for relay in relays:
                await relay.stop()
            await publisher.stop()
    summary: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs if run[key] is not None]
        if key in ("samples", "micro_batches") or not values:
            continue
        summary[key] = round(statistics.median(values), 3)
        summary[f"{key}_spread"] = [min(values), max(values)]
    return {
        **summary,
        "objects": args.objects,
        "watchers": args.watchers,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--watchers", type=int, default=10, help="objects followed")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=40, help="echo-to-watch samples per run")
    parser.add_argument("--writes", type=int, default=300, help="writes per run, each way")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write them")
    args = parser.parse_args()
    # A TERM ends the run through its ``finally`` (mounts and watchers stopped), not at once.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    calibration = calibrate()
    with tempfile.TemporaryDirectory(prefix="fanout-bench-objects-") as root:
        result = asyncio.run(bench(args, Path(root)))
    write_results(
        {**result, "machine": describe(), "calibration": calibration},
        None if args.no_save else args.results,
    )


if __name__ == "__main__":
    main()
