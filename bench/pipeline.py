"""Benchmark the publisher pipeline end to end (issue 3); print one JSON object.

Run ``.venv/bin/python bench/pipeline.py`` (``--quick`` for short windows); it also writes
``bench/results/pipeline.json``. Processes, all on this machine and sharing its cores:

* **publisher**: the real ``fanout publisher`` (``fanout.launch``) on Spark ``local[2]``, serving
  the built-in ``agents`` simulation: ``AGENTS`` agents in a 1,000 x 1,000 world at 10 ticks/s,
  each moving once every ``period`` ticks, so ``AGENTS / period`` rows change per tick. It logs
  every micro-batch's stage timings and Spark's ``durationMs`` (INFO).
* **relays**: ``RELAYS`` model relays in one client process (asyncio), written against the
  protocol like ``tests/integration/test_restart.py``'s: each says ``Hello``, acquires
  ``BOXES_PER_RELAY`` boxes of side ``BOX_SIDE`` at seeded random places (so a point of the world
  lies in about one box on average), then receives every ``Batch``. To leave the cores to the
  publisher they decode only a batch's stamp and row counts, not its columns.

Measures, over a window after a warm-up (the state holds every agent and the relays have their
snapshots):

* ``latency_p50_ms`` / ``latency_p99_ms``: tick-to-relay latency, the time a relay receives a
  batch minus the batch's ``tick_time`` (the wall-clock time of the last tick it carries; both are
  this machine's clock), over every batch every relay received in the window, at
  ``LATENCY_PERIOD`` (10,000 updates per tick).
* ``updates_per_s``: the highest *sustained* rate of changed rows processed through state, match
  and delivery. Updates per tick rise step by step (``THROUGHPUT_PERIODS``); a step is sustained
  when the rows the publisher processed in the window are at least 95% of those the simulation
  produced and the latency does not grow (the pipeline keeps up with the tick rate). The
  ladder stops at the first step that is not sustained; its processed rate is reported as
  ``saturated_updates_per_s`` (the pipeline running flat out, a micro-batch as large as
  admission control allows).
* ``stages_ms``: per stage, the median over the window's micro-batches of the publisher's own
  timings (``state+match``: Spark reads the source, updates the state store and joins the changes
  with the primitives, then the rows are collected as Arrow; ``log``: the durable append;
  ``snapshot``; ``build``: one batch per relay; ``send``: encoding and queueing) and of Spark's
  ``durationMs`` (``triggerExecution`` is the whole micro-batch; ``addBatch`` the part inside
  ``foreachBatch``; ``walCommit``/``commitOffsets`` the checkpoint writes).

Every step starts a fresh publisher (a new state directory) and a fresh relay process. The
machine is shared: ``machine`` records the load average and how busy the cores were (from
``/proc/stat``) for a few seconds before the first step and after the last, while nothing of the
benchmark ran.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from fanout.launch import Child, Children
from fanout.testing import frames
from fanout.testing.calibration import calibrate
from fanout.testing.cpu import busy_fraction
from fanout.testing.machine import describe, write_results
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Acquire, Catalog, Hello, Welcome

RESULTS = Path(__file__).parent / "results" / "pipeline.json"

AGENTS = 1_000_000
WORLD = 1000.0
TICK_RATE = 10.0
RELAYS = 100
BOXES_PER_RELAY = 100
BOX_SIDE = 10.0
MASTER = "local[2]"
LATENCY_PERIOD = 100  # 10,000 updates per tick
THROUGHPUT_PERIODS = (200, 100, 50, 33, 25, 20, 10, 5, 2, 1)
KEEP_UP = 0.95  # a sustained step processes at least this share of the updates produced
MAX_FALL_BEHIND = 0.05  # and its latency grows by less than this many seconds per second
TARGET_UPDATES_PER_S = 300_000
TARGET_P50_MS = 300.0
STAGES = ("state+match", "log", "snapshot", "build", "send")
SPARK_STAGES = (
    "triggerExecution",
    "latestOffset",
    "walCommit",
    "queryPlanning",
    "addBatch",
    "commitOffsets",
)

BATCH_LINE = re.compile(
    r"agents batch (?P<seq>\d+) tick (?P<tick>\d+): (?P<changed>\d+) changed, \d+ relays;"
    r" (?P<rest>.*)"
)
PROGRESS_LINE = re.compile(r"agents progress batch (?P<seq>\d+): (?P<json>\{.*\})")
STAGE = re.compile(r"(?P<name>[a-z+]+) (?P<ms>\d+) ms")


# -- the model relays (their own process) ------------------------------------------------------


def boxes_of(relay: int) -> list[Box]:
    """The boxes relay ``relay`` acquires: seeded, spread over the whole world."""
    rng = np.random.default_rng(relay)
    corners = rng.uniform(0.0, WORLD - BOX_SIDE, size=(BOXES_PER_RELAY, 2))
    return [Box((x, y), (x + BOX_SIDE, y + BOX_SIDE)) for x, y in corners.tolist()]


async def model_relay(
    url: str, relay: int, records: list[tuple[float, ...]], snapped: asyncio.Event
) -> None:
    """Acquire this relay's boxes, then record every batch until cancelled.

    A record is (relay, seq, tick, tick_time, received, upserts, deletes, bytes).
    """
    decoder = codec.from_publisher()
    async with connect(url, max_size=None, compression=None) as websocket:
        await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "relay", f"bench-{relay}")))
        if not isinstance(decoder.decode(await websocket.recv()), Welcome):
            raise RuntimeError("the publisher did not welcome the relay")
        if not isinstance(decoder.decode(await websocket.recv()), Catalog):
            raise RuntimeError("the publisher sent no catalog")
        boxes = boxes_of(relay)
        for prim, box in enumerate(boxes, start=1):
            await websocket.send(codec.encode(Acquire(prim, "agents", box)))
        await receive(websocket, relay, records, prims=len(boxes), snapped=snapped)


async def receive(
    websocket: ClientConnection,
    relay: int,
    records: list[tuple[float, ...]],
    *,
    prims: int,
    snapped: asyncio.Event,
) -> None:
    """Record every batch; set ``snapped`` once every primitive's snapshot has arrived."""
    snapshots: set[int] = set()
    async for message in websocket:
        received = time.time()
        if isinstance(message, str):
            raise RuntimeError(f"relay {relay}: a text frame from the publisher")
        head = frames.head(message)
        if head.type != "batch":
            raise RuntimeError(f"relay {relay}: unexpected frame {frames.whole(message)}")
        records.append(
            (
                relay,
                head.seq,
                head.tick,
                head.tick_time,
                received,
                head.upserts.length,
                head.deletes.length,
                len(message),
            )
        )
        snapshots.update(head.snapshots)
        if len(snapshots) == prims:
            snapped.set()


async def run_relays(url: str, relays: int) -> list[tuple[float, ...]]:
    """Connect the relays, say ``ready`` once all have their snapshots, record until SIGTERM."""
    records: list[tuple[float, ...]] = []
    events = [asyncio.Event() for _ in range(relays)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [
        asyncio.create_task(model_relay(url, relay, records, events[relay]))
        for relay in range(relays)
    ]
    waiting: asyncio.Future[Any] = asyncio.gather(*(event.wait() for event in events))
    done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        if task in done:
            task.result()  # a relay failed before its snapshots: raise its error
    print("ready", flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return records


# -- one step: a publisher, the relays, a window -----------------------------------------------


@dataclass
class Step:
    """One measured run at ``period``: the raw material of its summary."""

    period: int
    window: tuple[float, float]
    records: np.ndarray  # rows of (relay, seq, tick, tick_time, received, upserts, deletes, bytes)
    batches: dict[int, dict[str, Any]]  # seq -> changed, tick, stages, spark


async def run_step(period: int, args: argparse.Namespace, workdir: Path) -> Step:
    """Start a publisher at ``period`` and the relays; measure one window."""
    state = workdir / f"period-{period}"
    async with Children() as children:
        publisher = await start_publisher(children, period, state)
        relays: asyncio.subprocess.Process | None = None
        out = state / "relays.json"
        try:
            relays = await asyncio.create_subprocess_exec(
                *(sys.executable, __file__, "relays", publisher.url, str(args.relays), str(out)),
                stdout=asyncio.subprocess.PIPE,
            )
            assert relays.stdout is not None
            line = await relays.stdout.readline()
            if line.strip() != b"ready":
                status = await relays.wait()
                raise RuntimeError(f"the relays did not get their snapshots (exit {status})")
            # The state holds every agent once `period` ticks have passed since the first batch.
            await asyncio.sleep(max(args.warmup, period / TICK_RATE + 5.0))
            began = time.time()
            await asyncio.sleep(args.measure)
            ended = time.time()
            relays.send_signal(signal.SIGTERM)
            await asyncio.wait_for(relays.wait(), 60)
        finally:
            if relays is not None and relays.returncode is None:
                relays.kill()
                await relays.wait()
            await publisher.stop()
    records = np.array(json.loads(out.read_text()), dtype=np.float64).reshape(-1, 8)
    batches = read_publisher_log(publisher.log)
    if not args.keep:
        shutil.rmtree(state / "state", ignore_errors=True)
    return Step(period, (began, ended), records, batches)


async def start_publisher(children: Children, period: int, state: Path) -> Child:
    """``fanout publisher`` on Spark ``MASTER`` with the simulation at ``period``."""
    arguments = [
        "--master",
        MASTER,
        "--port",
        "0",
        "--state-dir",
        str(state / "state"),
        "--agents",
        str(AGENTS),
        "--world",
        str(WORLD),
        "--tick-rate",
        str(TICK_RATE),
        "--period",
        str(period),
        "--log-level",
        "info",
    ]
    return await children.start("publisher", arguments, state / "publisher.log")


def read_publisher_log(path: Path) -> dict[int, dict[str, Any]]:
    """Per micro-batch: changed rows, tick, the pipeline's stage timings, Spark's durationMs."""
    batches: dict[int, dict[str, Any]] = {}
    for line in path.read_text(errors="replace").splitlines():
        if found := BATCH_LINE.search(line):
            batch = batches.setdefault(int(found["seq"]), {})
            batch["changed"] = int(found["changed"])
            batch["tick"] = int(found["tick"])
            batch["stages"] = {m["name"]: float(m["ms"]) for m in STAGE.finditer(found["rest"])}
        elif found := PROGRESS_LINE.search(line):
            progress = json.loads(found["json"])
            batches.setdefault(int(found["seq"]), {})["spark"] = progress
    return batches


# -- summaries ---------------------------------------------------------------------------------


def summarise(step: Step) -> dict[str, Any]:
    """The numbers of one step (see the module docstring)."""
    began, ended = step.window
    records = step.records
    inside = records[(records[:, 4] >= began) & (records[:, 4] < ended)]
    if not len(inside):
        raise RuntimeError(f"period {step.period}: no batch reached the relays in the window")
    latency = (inside[:, 4] - inside[:, 3]) * 1e3
    seqs = sorted({int(seq) for seq in inside[:, 1]})
    in_window = [step.batches[seq] for seq in seqs if "changed" in step.batches.get(seq, {})]
    duration = ended - began
    offered = AGENTS / step.period * TICK_RATE
    processed = sum(batch["changed"] for batch in in_window) / duration
    slope = float(np.polyfit(inside[:, 4] - began, latency / 1e3, 1)[0])
    ticks = [b["tick"] for b in in_window]
    return {
        "period": step.period,
        "updates_per_tick": AGENTS // step.period,
        "offered_updates_per_s": round(offered),
        "processed_updates_per_s": round(processed),
        "sustained": processed >= KEEP_UP * offered and slope < MAX_FALL_BEHIND,
        "latency_growth_s_per_s": round(slope, 3),
        "latency_p50_ms": round(float(np.percentile(latency, 50)), 1),
        "latency_p99_ms": round(float(np.percentile(latency, 99)), 1),
        "micro_batches": len(seqs),
        "micro_batch_interval_ms": round(duration * 1e3 / max(1, len(seqs)), 1),
        "ticks_per_micro_batch": round(float(np.median(np.diff(ticks))), 1)
        if len(ticks) > 1
        else None,
        "rows_per_micro_batch": round(statistics.median(b["changed"] for b in in_window))
        if in_window
        else 0,
        "delivered_upserts_per_s": round(float(inside[:, 5].sum()) / duration),
        "delivered_deletes_per_s": round(float(inside[:, 6].sum()) / duration),
        "delivered_mb_per_s": round(float(inside[:, 7].sum()) / duration / 1e6, 2),
        "stages_ms": stage_medians(in_window),
        "spark_duration_ms": spark_medians(in_window),
    }


def stage_medians(batches: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each pipeline stage over ``batches``."""
    return {
        name: round(statistics.median(b["stages"].get(name, 0.0) for b in batches), 1)
        for name in STAGES
        if batches
    }


def spark_medians(batches: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each of Spark's ``durationMs`` parts over ``batches``."""
    spark = [b["spark"]["durationMs"] for b in batches if "spark" in b]
    return {
        name: round(statistics.median(d.get(name, 0) for d in spark), 1)
        for name in SPARK_STAGES
        if spark
    }


# -- the machine -------------------------------------------------------------------------------


def load() -> dict[str, float | None]:
    """Load average and core use over 5 s from now (nothing of the benchmark running)."""
    busy = busy_fraction(5.0)
    return {
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpu_busy": None if busy is None else round(busy, 2),
    }


# -- main --------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Both phases: latency at ``LATENCY_PERIOD``, then the throughput ladder."""
    # SIGTERM (a timeout, say) cancels the run, so every step still stops its publisher: the
    # publishers run in sessions of their own and would outlive this process.
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    latency = summarise(await run_step(LATENCY_PERIOD, args, workdir))
    steps = []
    for period in args.periods:
        step = (
            latency
            if period == LATENCY_PERIOD
            else summarise(await run_step(period, args, workdir))
        )
        steps.append(step)
        if not step["sustained"]:
            break
    sustained = [s for s in steps if s["sustained"]]
    saturated = [s for s in steps if not s["sustained"]]
    best = max(sustained, key=lambda s: s["processed_updates_per_s"], default=None)
    best_rate = best["processed_updates_per_s"] if best else 0
    return {
        "updates_per_s": best_rate,
        "latency_p50_ms": latency["latency_p50_ms"],
        "latency_p99_ms": latency["latency_p99_ms"],
        "stages_ms": latency["stages_ms"],
        "spark_duration_ms": latency["spark_duration_ms"],
        "saturated_updates_per_s": saturated[0]["processed_updates_per_s"] if saturated else None,
        "targets": {
            "updates_per_s": TARGET_UPDATES_PER_S,
            "latency_p50_ms": TARGET_P50_MS,
            "updates_per_s_met": best_rate >= TARGET_UPDATES_PER_S,
            "latency_p50_met": latency["latency_p50_ms"] <= TARGET_P50_MS,
        },
        "latency": latency,
        "throughput_steps": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--warmup",
        type=float,
        default=90.0,
        help="seconds before a window: Spark's first micro-batch starts behind (it covers the"
        " ticks of Spark's start-up), and the pipeline takes a while to catch up",
    )
    parser.add_argument("--measure", type=float, default=40.0, help="seconds of a window")
    parser.add_argument("--relays", type=int, default=RELAYS)
    parser.add_argument(
        "--periods",
        type=int,
        nargs="+",
        default=list(THROUGHPUT_PERIODS),
        help="simulation periods of the throughput ladder, slowest first",
    )
    parser.add_argument("--quick", action="store_true", help="short windows")
    parser.add_argument("--keep", action="store_true", help="keep the publishers' state")
    parser.add_argument("--workdir", type=Path, default=None, help="state and logs go here")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.measure = 30.0, 15.0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fanout-bench-pipeline-"))
    before = load()
    calibration = calibrate()
    results = asyncio.run(bench(args, workdir))
    results["setup"] = {
        "agents": AGENTS,
        "world": WORLD,
        "tick_rate": TICK_RATE,
        "relays": args.relays,
        "boxes_per_relay": BOXES_PER_RELAY,
        "box_side": BOX_SIDE,
        "master": MASTER,
        "warmup_s": args.warmup,
        "measure_s": args.measure,
        "logs": str(workdir),
    }
    results["machine"] = describe() | {"at_start": before, "at_end": load()}
    results["calibration"] = calibration
    write_results(results, None if args.quick else RESULTS)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "relays":
        with contextlib.suppress(KeyboardInterrupt):
            recorded = asyncio.run(run_relays(sys.argv[2], int(sys.argv[3])))
            Path(sys.argv[4]).write_text(json.dumps(recorded))
    else:
        main()
