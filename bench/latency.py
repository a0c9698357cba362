"""Tick-to-subscriber latency against Spark's own floor, measured in one run (issue 30).

Run ``.venv/bin/python bench/latency.py`` (``--quick`` for short windows); it writes
``bench/results/latency.json`` and prints one JSON object as its last line. One run, one
machine, two phases:

1. **The floor** (in this process, then its Spark session is stopped): the ``agents``
   simulation source feeding the pipeline's own ``latest_per_key`` into Spark's ``noop`` sink,
   one tick per micro-batch, on ``local[2]`` with the publisher's embedded settings, the state
   first loaded with every agent — ``bench/state.py``'s method at this benchmark's load (the
   rows of one tick at 10,000 updates/s). Cases: ``source`` (no state), ``hdfs`` (Spark's
   default store, the publisher's default) and ``rocksdb``. Fastest and median
   ``triggerExecution`` of the measured micro-batches. The store the publisher runs with
   (``--store``) is measured again right after the 10,000 updates/s window (``--no-bracket``:
   not), so that the floor the window is compared with was measured on both sides of it on a
   machine whose load drifts: ``floor_ms`` is the median of both phases' one-tick
   micro-batches pooled (``floor_before_ms``, ``floor_after_ms``: each phase's own), the
   fastest is ``floor_min_ms``.
2. **Tick to subscriber**, at each offered load (1,000, 10,000 and 100,000 updates/s: ``AGENTS``
   agents at 10 ticks/s, each moving every ``period`` ticks): the real ``fanout publisher``
   (Spark ``local[2]``), one real ``fanout relay`` process, and ``SUBSCRIBERS`` subscribers
   (``fanout.client``, real WebSockets, in this process) each holding a fixed box view. A
   subscriber's latency is its push's receipt minus the push's ``tick_time`` (the wall-clock
   time of the tick it carries, same machine's clock), over every push received in the window.

The per-stage budget of each load is read from ``GET /metrics`` of the publisher and the relay
at the start and end of the window, as means per micro-batch (per batch on the relay):

* Spark's phases (``publisher_spark_phase_seconds``: ``latestOffset`` is the source's offset,
  ``addBatch`` the part in ``foreachBatch`` — it contains the source read, the state update and
  the match, which Spark runs as one job when the changes are collected —, ``walCommit`` and
  ``commitOffsets`` the checkpoint writes; ``state``: the state operator's update and commit
  time summed over its tasks);
* the pipeline's stages (``publisher_stage_seconds``): ``state+match`` (that one Spark job and
  the collect to Arrow), ``log``, ``snapshot``, ``build``, ``send``;
* the relay's (``relay_batch_write_seconds``: ingest; ``relay_batch_read_to_swap_seconds``:
  read off the socket to swapped in; ``relay_tick_to_swap_seconds`` and
  ``relay_tick_to_push_seconds``: a tick's age at its swap and at its pushes);
* ``source`` and ``state`` one-tick costs from the floor's cases (``source``; ``hdfs`` or
  ``rocksdb`` minus ``source``), and ``match+collect`` derived as the pipeline's
  ``state+match`` minus the floor's one-tick ``addBatch`` (approximate: a pipeline micro-batch
  may hold more than one tick).

A load is *sustained* when the stream keeps up with the clock: the ticks delivered in the
window are at least ``KEEP_UP`` of the ticks that passed and the subscribers' latency grows by
less than ``MAX_FALL_BEHIND`` seconds per second. The simulation emits each agent's last move in
a micro-batch's ticks, so the rows a micro-batch carries are fewer than the updates offered
when it spans more than a period; ``processed_rows_per_s`` says how many.

The machine is shared (other people run tests on it): ``machine`` records the load average
before and after; the ratio, both terms measured in the same run, is the figure to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fanout.client import connect
from fanout.launch import Children
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "latency.json"

AGENTS = 100_000
WORLD = 1000.0
TICK_RATE = 10.0
MASTER = "local[2]"
#: offered updates per second -> the simulation's period (AGENTS / period * TICK_RATE).
LOADS = {1_000: 1000, 10_000: 100, 100_000: 10}
SUBSCRIBERS = 20
BOX_SIDE = 100.0
PUSH_RATE = 20.0
KEEP_UP = 0.95
MAX_FALL_BEHIND = 0.05
FLOOR_BATCHES = 16
#: Seconds every subscriber's first push may take (Spark's start and first micro-batch).
FIRST_PUSH_TIMEOUT = 300.0
#: One-tick micro-batches run before the floor's measured ones. The publisher's windows come
#: after ``--warmup`` seconds of micro-batches, so its JVM has compiled the hot paths; a floor
#: measured after 2 (as before) was a cold JVM's: 503 ms median where the same session, warm,
#: took 330 (2026-11-27, quiet machine). 40 one-tick micro-batches take about 15-25 s.
FLOOR_SKIP = 40
PUBLISHER_STAGES = ("state+match", "log", "snapshot", "build", "send")
SPARK_PHASES = ("triggerExecution", "latestOffset", "walCommit", "addBatch", "commitOffsets")
RELAY_HISTOGRAMS = {
    "relay_ingest": "fanout_relay_batch_write_seconds",
    "relay_read_to_swap": "fanout_relay_batch_read_to_swap_seconds",
    "tick_to_swap": "fanout_relay_tick_to_swap_seconds",
    "tick_to_push": "fanout_relay_tick_to_push_seconds",
}


# -- the floor ---------------------------------------------------------------------------------


def measure_floor(cases: list[str], batches: int) -> dict[str, dict[str, Any]]:
    """One-tick micro-batches of the source (and state) into ``noop``, per case (in-process).

    Returns:
        case -> fastest and median ``triggerExecution`` and median ``addBatch``, in ms (and
        every ``triggerExecution``, rows per batch and batches measured).
    """
    # bench/state.py's machinery, at this benchmark's load; imported here so the Spark session
    # exists only for this phase.
    from fanout.publisher.sources.simulation import SimulationParams  # noqa: PLC0415
    from fanout.publisher.spark import spark_session  # noqa: PLC0415
    from fanout.testing import sparkstate  # noqa: PLC0415

    workdir = Path(tempfile.mkdtemp(prefix="fanout-bench-latency-floor-"))
    spark = spark_session(MASTER, app_name="fanout-bench-latency-floor")
    period = LOADS[10_000]
    base = SimulationParams(
        agents=AGENTS,
        period=period,
        rate=TICK_RATE,
        world=WORLD,
        partitions=2,
        start_time=time.time() - 10_000_000,
    )
    out: dict[str, dict[str, Any]] = {}
    try:
        for case in cases:
            spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
            for key, value in (
                sparkstate.ROCKSDB if case == "rocksdb" else sparkstate.HDFS
            ).items():
                spark.conf.set(key, value)
            checkpoint = workdir / case
            stateful = case != "source"
            load = replace(base, max_ticks=period)
            sparkstate.run(spark, load, checkpoint, stateful=stateful, batches=None)
            one = replace(base, max_ticks_per_batch=1)
            runs = sparkstate.run(
                spark, one, checkpoint, stateful=stateful, batches=FLOOR_SKIP + batches
            )[FLOOR_SKIP:]
            trigger = [r["durationMs"]["triggerExecution"] for r in runs]
            out[case] = {
                "trigger_ms": [float(ms) for ms in trigger],
                "min_ms": float(min(trigger)),
                "median_ms": float(statistics.median(trigger)),
                "add_batch_median_ms": float(
                    statistics.median(r["durationMs"].get("addBatch", 0) for r in runs)
                ),
                "rows_per_batch": float(statistics.median(r["numInputRows"] for r in runs)),
                "batches": len(runs),
            }
            print(
                json.dumps(
                    {"floor": case, **{k: v for k, v in out[case].items() if k != "trigger_ms"}}
                ),
                flush=True,
            )
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


# -- one load: a publisher, a relay, subscribers -----------------------------------------------


@dataclass
class Window:
    """What one load's window recorded."""

    began: float = 0.0
    ended: float = 0.0
    lags: list[tuple[float, float]] = field(default_factory=list)  # (received_at, latency s)
    ticks: list[tuple[float, int]] = field(default_factory=list)  # (received_at, tick)
    publisher: tuple[dict[str, float], dict[str, float]] = ({}, {})
    relay: tuple[dict[str, float], dict[str, float]] = ({}, {})


async def run_load(
    offered: int, args: argparse.Namespace, workdir: Path
) -> tuple[Window, dict[str, Any]]:
    """Start a publisher at ``offered`` updates/s, a relay and the subscribers; one window."""
    state = workdir / f"load-{offered}"
    period = LOADS[offered]
    window = Window()
    async with Children() as children:
        publisher = await children.start(
            "publisher",
            [
                *("--master", MASTER, "--port", "0", "--state-dir", str(state / "publisher")),
                *("--agents", str(AGENTS), "--world", str(WORLD), "--period", str(period)),
                *("--tick-rate", str(TICK_RATE), "--log-level", "info"),
                *("--state-store", args.store),
                *args.publisher_args,
            ],
            state / "publisher.log",
        )
        relay = await children.start(
            "relay",
            ["--publisher", publisher.url, "--port", "0", "--workers", "1"],
            state / "relay.log",
        )
        async with contextlib.AsyncExitStack() as stack:
            views = []
            rng = np.random.default_rng(offered)
            for index in range(SUBSCRIBERS):
                subscriber = await stack.enter_async_context(
                    connect(relay.url, name=f"latency-{index}")
                )
                x, y = rng.uniform(0.0, WORLD - BOX_SIDE, size=2).tolist()
                box = Box((x, y), (x + BOX_SIDE, y + BOX_SIDE))
                views.append(await subscriber.subscribe(box, dataset="agents", rate=PUSH_RATE))
            measuring = asyncio.Event()

            async def listen(view: Any) -> None:
                async for update in view:
                    if measuring.is_set() and not update.no_update and update.tick_time:
                        window.lags.append(
                            (update.received_at, update.received_at - update.tick_time)
                        )
                        window.ticks.append((update.received_at, update.tick))

            async with asyncio.TaskGroup() as tasks:
                listeners = [tasks.create_task(listen(view)) for view in views]
                # Spark's first micro-batches are slow (the JVM warming, plans compiled): the
                # warm-up counts from every subscriber's first push, not from the start.
                deadline = time.monotonic() + FIRST_PUSH_TIMEOUT
                while any(view.updates == 0 for view in views):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{offered} updates/s: no first push in time")
                    await asyncio.sleep(0.5)
                await asyncio.sleep(args.warmup)
                before = await asyncio.gather(
                    asyncio.to_thread(scrape, publisher.url), asyncio.to_thread(scrape, relay.url)
                )
                window.began = time.time()
                measuring.set()
                await asyncio.sleep(args.measure)
                measuring.clear()
                window.ended = time.time()
                after = await asyncio.gather(
                    asyncio.to_thread(scrape, publisher.url), asyncio.to_thread(scrape, relay.url)
                )
                for listener in listeners:
                    listener.cancel()
        window.publisher = (before[0], after[0])
        window.relay = (before[1], after[1])
    if not args.keep:
        shutil.rmtree(state / "publisher", ignore_errors=True)
    return window, summarise(offered, window)


def delta(pair: tuple[dict[str, float], dict[str, float]], name: str) -> float | None:
    """A metric's growth over the window (None: not exposed)."""
    before, after = pair
    if name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def mean_ms(pair: tuple[dict[str, float], dict[str, float]], name: str, per: float) -> float | None:
    """A seconds counter's growth over the window per ``per`` events, in ms."""
    grown = delta(pair, name)
    return None if grown is None or per <= 0 else round(grown / per * 1e3, 1)


def summarise(offered: int, window: Window) -> dict[str, Any]:
    """One load's latency, whether it was sustained, and its budget (see the module docstring)."""
    if not window.lags:
        raise RuntimeError(f"{offered} updates/s: no push reached a subscriber in the window")
    duration = window.ended - window.began
    lags = np.array(window.lags)
    latency_ms = lags[:, 1] * 1e3
    slope = float(np.polyfit(lags[:, 0] - window.began, lags[:, 1], 1)[0])
    ticks = np.array(window.ticks)
    ticks_per_s = float((ticks[:, 1].max() - ticks[:, 1].min()) / duration)
    pub, relay = window.publisher, window.relay
    label = '{dataset="agents"'
    batches = delta(pub, f"fanout_publisher_micro_batches_total{label}}}") or 0.0
    rows = delta(pub, f"fanout_publisher_rows_changed_total{label}}}") or 0.0
    stages = {
        stage: mean_ms(
            pub, f'fanout_publisher_stage_seconds_total{label},stage="{stage}"}}', batches
        )
        for stage in PUBLISHER_STAGES
    }
    spark = {
        phase: mean_ms(
            pub, f'fanout_publisher_spark_phase_seconds_total{label},phase="{phase}"}}', batches
        )
        for phase in (*SPARK_PHASES, "state")
    }
    relay_ms = {}
    for stage, name in RELAY_HISTOGRAMS.items():
        count = delta(relay, f"{name}_count")
        relay_ms[stage] = mean_ms(relay, f"{name}_sum", count or 0.0)
    sustained = ticks_per_s >= KEEP_UP * TICK_RATE and slope < MAX_FALL_BEHIND
    return {
        "offered_updates_per_s": offered,
        "period": LOADS[offered],
        "sustained": sustained,
        "ticks_per_s": round(ticks_per_s, 2),
        "latency_growth_s_per_s": round(slope, 3),
        "p50_ms": round(float(np.percentile(latency_ms, 50)), 1),
        "p99_ms": round(float(np.percentile(latency_ms, 99)), 1),
        "mean_ms": round(float(latency_ms.mean()), 1),
        "pushes": len(latency_ms),
        "micro_batches": int(batches),
        "micro_batch_interval_ms": round(duration * 1e3 / batches, 1) if batches else None,
        "processed_rows_per_s": round(rows / duration),
        "rows_per_micro_batch": round(rows / batches) if batches else None,
        "publisher_stages_ms": stages,
        "spark_phases_ms": spark,
        "relay_ms": relay_ms,
    }


def budget(load: dict[str, Any], floor: dict[str, dict[str, float]], store: str) -> dict[str, Any]:
    """The per-stage budget of one load, in ms (means per micro-batch or per batch)."""
    stages, spark, relay = load["publisher_stages_ms"], load["spark_phases_ms"], load["relay_ms"]
    source = floor.get("source", {}).get("median_ms")
    stored = floor.get(store, {})
    state = None if source is None or not stored else round(stored["median_ms"] - source, 1)
    match = stages.get("state+match")
    collect_match = (
        None if match is None or not stored else round(match - stored["add_batch_median_ms"], 1)
    )
    return {
        "source (floor, one tick)": source,
        "state (floor, one tick, minus source)": state,
        "match+collect (derived)": collect_match,
        "state+match (measured)": match,
        "log": stages.get("log"),
        "snapshot": stages.get("snapshot"),
        "build": stages.get("build"),
        "send": stages.get("send"),
        "spark checkpoint (walCommit+commitOffsets)": _sum(
            spark.get("walCommit"), spark.get("commitOffsets")
        ),
        "micro-batch (triggerExecution)": spark.get("triggerExecution"),
        "relay ingest (write)": relay.get("relay_ingest"),
        "relay read to swap": relay.get("relay_read_to_swap"),
        "tick to swap": relay.get("tick_to_swap"),
        "tick to push": relay.get("tick_to_push"),
        "tick to subscriber (mean)": load["mean_ms"],
    }


def _sum(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else round(sum(v for v in values if v), 1)


def load_now() -> float:
    """The one-minute load average."""
    return round(os.getloadavg()[0], 2)


async def bench(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Every load in turn, each with a fresh publisher and relay."""
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    loads = []
    for offered in args.loads:
        _, summary = await run_load(offered, args, workdir)
        print(json.dumps({"load": summary}), flush=True)
        loads.append(summary)
        if offered == 10_000 and args.bracket:
            # The floor again right after the 10,000 window (see ``floor_of``).
            after = await asyncio.to_thread(measure_floor, [args.store], args.floor_batches)
            summary["floor_after"] = after[args.store]
    return loads


def floor_of(before: dict[str, Any], after: dict[str, Any] | None) -> dict[str, Any]:
    """The floor the 10,000 window is compared with: the median and fastest of the one-tick
    micro-batches measured before the windows and, when bracketing, right after the 10,000
    one, pooled. The machine is shared and its load drifts over a run's minutes; a floor
    measured on both sides of the window stands for the conditions the window ran in, where
    one measured only before it may have met a quieter or a busier machine."""
    trigger = before["trigger_ms"] + (after["trigger_ms"] if after else [])
    return {
        "median_ms": float(statistics.median(trigger)),
        "min_ms": float(min(trigger)),
        "before_median_ms": before["median_ms"],
        "after_median_ms": after["median_ms"] if after else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--warmup",
        type=float,
        default=40.0,
        help="seconds from every subscriber's first push to the window",
    )
    parser.add_argument("--measure", type=float, default=30.0, help="seconds of a window")
    parser.add_argument("--loads", type=int, nargs="+", default=list(LOADS), choices=list(LOADS))
    parser.add_argument("--floor-cases", nargs="+", default=["source", "hdfs", "rocksdb"])
    parser.add_argument(
        "--store",
        default="hdfs",
        choices=["hdfs", "rocksdb"],
        help="the state store the publisher runs with (fanout publisher --state-store) and"
        " the floor is compared with",
    )
    parser.add_argument(
        "--publisher-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="more arguments for fanout publisher (last on the line)",
    )
    parser.add_argument(
        "--no-bracket",
        dest="bracket",
        action="store_false",
        help="measure the floor only before the windows, not again after the 10,000 one",
    )
    parser.add_argument("--quick", action="store_true", help="short windows, 3 floor batches")
    parser.add_argument("--keep", action="store_true", help="keep the publishers' state")
    parser.add_argument("--label", default="", help="what this run measures (e.g. before)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.measure = 15.0, 15.0
    workdir = Path(tempfile.mkdtemp(prefix="fanout-bench-latency-"))
    machine = describe()
    calibration = calibrate()
    cases = sorted(set(args.floor_cases) | {"source", args.store})
    args.floor_batches = 3 if args.quick else FLOOR_BATCHES
    floor = measure_floor(cases, args.floor_batches)
    loads = asyncio.run(bench(args, workdir))
    for load in loads:
        load["budget_ms"] = budget(load, floor, args.store)
    at = {load["offered_updates_per_s"]: load for load in loads}
    at_10k = at.get(10_000)
    compared = floor_of(floor[args.store], at_10k.get("floor_after") if at_10k else None)
    floor_ms = compared["median_ms"]
    sustained = [load["offered_updates_per_s"] for load in loads if load["sustained"]]
    summary = {
        "floor_ms": floor_ms,
        "floor_min_ms": compared["min_ms"],
        "floor_before_ms": compared["before_median_ms"],
        "floor_after_ms": compared["after_median_ms"],
        "p50_ms_at_10k": at_10k["p50_ms"] if at_10k else None,
        "p99_ms_at_10k": at_10k["p99_ms"] if at_10k else None,
        "ratio_p50_at_10k": round(at_10k["p50_ms"] / floor_ms, 2) if at_10k else None,
        "sustained_updates_per_s": max(sustained, default=0),
        "processed_rows_per_s_at_100k": at[100_000]["processed_rows_per_s"]
        if 100_000 in at
        else None,
        "store": args.store,
        "label": args.label,
        "load_average_1m": {"start": machine["load_average_1m"], "end": load_now()},
    }
    results = {
        **summary,
        "floor": floor,
        "loads": loads,
        "setup": {
            "agents": AGENTS,
            "world": WORLD,
            "tick_rate": TICK_RATE,
            "master": MASTER,
            "subscribers": SUBSCRIBERS,
            "box_side": BOX_SIDE,
            "push_rate": PUSH_RATE,
            "warmup_s": args.warmup,
            "measure_s": args.measure,
            "publisher_args": args.publisher_args,
            "logs": str(workdir) if args.keep else None,
        },
        "machine": machine,
        "calibration": calibration,
    }
    write_results(results, None if args.quick else args.out)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
