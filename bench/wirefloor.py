"""The floor under any relay on this machine: how many loopback connections a compiled sender that
does nothing else holds at 10 pushes a second, and what a push costs the kernel and the clients.

``bench/wirefloor.c`` (compiled at run time with the machine's ``cc``) is the sender and the
receivers. The sender (one process, epoll, non-blocking sockets) writes one precomputed
WebSocket binary frame of ``--size`` payload bytes to each of N connections 10 times a second,
each connection's pushes spread over the 100 ms tick as a relay's are, and stamps each frame
with its tick, its due time and its send time; a connection whose last frame is still queued
skips to the latest tick, as a relay's latest-value queue does. Two receiver processes (C, epoll)
read the frames, parse their lengths and record each frame's latency. What ``bench/relay.py``
charges the relay with (a ``send`` system call a push, the clients' reads) is all there is here.

Per trial (one N), over a ``--window`` after a ``--warmup``: ``delivered_min`` (the least share
of the window's ticks any connection received), p50/p99 from each frame's due time to receipt
(``p99_ms``, the pass rule's: it holds the sender's lateness) and from its send time
(``p99_send_ms``: the kernel and the receivers alone), the sender's CPU per push (µs, from its
``/proc``), the receivers' CPU (cores, each process) and per push, other tenants' CPU and the
load averages. A trial passes as ``bench/relay.py``'s do: p99 <= 100 ms, >= 95% of the ticks to
every connection, none lost. N doubles from ``--start`` until a trial fails, then is bisected to
``--resolution``; a trial where a receiver process used more than ``RECEIVER_CORES_MAX`` of a
core is bound by the clients and ends the search (``bound``: ``clients``). Run at the relay's
push size (4,600 bytes) and a small one (200), ``--runs`` times each; medians and spreads.

    .venv/bin/python bench/wirefloor.py [--runs 3] [--start 1250] [--limit 19000]
    .venv/bin/python bench/wirefloor.py --quick --no-save    # a smoke run, a few hundred
    .venv/bin/python bench/wirefloor.py --only 10000 --output bench/results/wirefloor-10000.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fanout.testing import cc, cpu
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "wirefloor.json"
RELAY_PUSH = 4600  # bytes: bench/relay.py's bytes_per_update, about 100 rows of a box
SMALL_PUSH = 200
PUSH_RATE = 10.0
TARGET_DELIVERED = 0.95
TARGET_P99_MS = 100.0
#: Cores a receiver process may use before the trial is the clients' and not the sender's.
RECEIVER_CORES_MAX = 0.9
RECEIVERS = 2
READY_TIMEOUT = 120.0  # seconds for every connection to be accepted
NEEDS = "bench/wirefloor.py compiles bench/wirefloor.c: install a C compiler (apt-get install gcc)"

Verdict = Literal["pass", "fail", "clients"]


def build(into: Path) -> Path:
    """Compile ``bench/wirefloor.c`` into ``into``; say clearly if there is no compiler."""
    return cc.build(HERE / "wirefloor.c", into, ["-lm"], NEEDS)


@dataclass
class Trial:
    """One N at one push size: what was measured."""

    subscribers: int
    size: int
    verdict: Verdict = "fail"
    delivered_min: float = 0.0
    delivered_mean: float = 0.0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    p99_send_ms: float = math.nan
    pushes_per_s: float = 0.0
    frames: int = 0
    bytes_per_frame: float = math.nan
    coalesced: int = 0
    partial: int = 0
    lost: int = 0
    sender_cores: float = 0.0
    sender_cpu_us_per_push: float = math.nan
    sender_system_share: float = math.nan
    receivers_cores: list[float] = field(default_factory=list)
    receivers_cpu_us_per_push: float = math.nan
    other_cores: float = 0.0
    softirq_cores: float = 0.0
    steal_cores: float = 0.0
    load_average: list[float] = field(default_factory=list)


@dataclass
class Records:
    """What one trial's processes reported and what was sampled over its window.

    Attributes:
        window: seconds in the window.
        sent: the sender's counts over pushes due in the window (pushes, coalesced, partial).
        received: each receiver's report (frames, bytes, lost, ticks a connection).
        latencies: (from due, from send) ms of every frame due in the window, as rows.
        samples: (sender, receivers..., machine) CPU samples at the window's start and end.
        kernel: the machine's softirq and steal seconds and the sender's system seconds, at
            the window's start and end.
    """

    window: float
    sent: dict[str, int]
    received: list[dict[str, Any]]
    latencies: np.ndarray
    samples: tuple[list[cpu.CpuSample | None], list[cpu.CpuSample | None]]
    kernel: tuple[tuple[float, float, float], tuple[float, float, float]]


def evaluate(trial: Trial, records: Records) -> Trial:
    """Turn one trial's records into its measures and verdict."""
    expected = round(records.window * PUSH_RATE)  # each connection's slots in the window
    ticks = [t for report in records.received for t in report["ticks"]]
    fractions = [min(t / expected, 1.0) for t in ticks] if ticks else [0.0]
    trial.delivered_min, trial.delivered_mean = min(fractions), float(np.mean(fractions))
    if len(records.latencies):
        trial.p50_ms = float(np.percentile(records.latencies[:, 0], 50))
        trial.p99_ms = float(np.percentile(records.latencies[:, 0], 99))
        trial.p99_send_ms = float(np.percentile(records.latencies[:, 1], 99))
    pushes = records.sent["pushes"]
    trial.pushes_per_s = pushes / records.window
    trial.coalesced, trial.partial = records.sent["coalesced"], records.sent["partial"]
    trial.lost = records.sent["lost"] + sum(r["lost"] for r in records.received)
    (sender_0, *receivers_0, machine_0), (sender_1, *receivers_1, machine_1) = records.samples
    assert sender_0 is not None and sender_1 is not None
    trial.sender_cores = sender_1.cores_since(sender_0)
    trial.sender_cpu_us_per_push = trial.sender_cores * records.window / max(pushes, 1) * 1e6
    pairs = list(zip(receivers_0, receivers_1, strict=True))
    trial.receivers_cores = [b.cores_since(a) for a, b in pairs if a is not None and b is not None]
    frames = trial.frames = sum(r["frames"] for r in records.received)
    trial.bytes_per_frame = sum(r["bytes"] for r in records.received) / max(frames, 1)
    receiving = sum(trial.receivers_cores) * records.window
    trial.receivers_cpu_us_per_push = receiving / max(frames, 1) * 1e6
    if machine_0 is not None and machine_1 is not None:
        ours = trial.sender_cores + sum(trial.receivers_cores)
        trial.other_cores = max(0.0, machine_1.cores_since(machine_0) - ours)
    (softirq_0, steal_0, system_0), (softirq_1, steal_1, system_1) = records.kernel
    sender_seconds = sender_1.seconds - sender_0.seconds
    trial.sender_system_share = (system_1 - system_0) / sender_seconds if sender_seconds else 0.0
    trial.softirq_cores = (softirq_1 - softirq_0) / records.window
    trial.steal_cores = (steal_1 - steal_0) / records.window
    trial.load_average = [round(v, 2) for v in os.getloadavg()]
    held = trial.delivered_min >= TARGET_DELIVERED and trial.p99_ms <= TARGET_P99_MS
    if any(cores > RECEIVER_CORES_MAX for cores in trial.receivers_cores):
        trial.verdict = "clients"
    else:
        trial.verdict = "pass" if held and trial.lost == 0 else "fail"
    return trial


def read_json(process: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The next line ``process`` prints, as JSON, within ``timeout`` seconds."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"wirefloor said nothing in {timeout} s (exit {process.poll()})")
    return dict(json.loads(line))


def tell(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()


def sample(pids: list[int]) -> list[cpu.CpuSample | None]:
    return [cpu.process_tree(pid) for pid in pids] + [cpu.machine()]


def kernel_seconds(sender: int) -> tuple[float, float, float]:
    """Seconds all cores spent in softirqs (loopback delivery: this kernel charges them to the
    process they interrupted too) and stolen by the hypervisor, from ``/proc/stat``; seconds the
    sender spent in the kernel, from its ``/proc/PID/stat``."""
    machine = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    stat = Path(f"/proc/{sender}/stat").read_text()
    system = int(stat[stat.rindex(")") + 2 :].split()[12])  # stime
    tick = os.sysconf("SC_CLK_TCK")
    return int(machine[7]) / tick, int(machine[8]) / tick, system / tick


def run_trial(binary: Path, n: int, size: int, args: argparse.Namespace) -> Trial:
    """N connections at ``size`` bytes a push: start the sender and the receivers, measure over
    the window, stop them."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    with tempfile.TemporaryDirectory(prefix="fanout-wirefloor-") as tmp:
        command = [str(binary), "send", str(n), str(size), str(PUSH_RATE)]
        sender = subprocess.Popen(command, **pipes)  # type: ignore[call-overload]
        receivers: list[subprocess.Popen[str]] = []
        try:
            port = read_json(sender, 10)["port"]
            counts = [n // RECEIVERS + (i < n % RECEIVERS) for i in range(RECEIVERS)]
            files = [Path(tmp) / f"latencies-{i}" for i in range(RECEIVERS)]
            for count, file in zip(counts, files, strict=True):
                command = [str(binary), "receive", str(port), str(count), str(file)]
                receivers.append(subprocess.Popen(command, **pipes))  # type: ignore[call-overload]
            for receiver in receivers:
                read_json(receiver, READY_TIMEOUT)
            read_json(sender, READY_TIMEOUT)
            start = time.time() + args.warmup
            end = start + args.window
            tell(sender, f"window {start:.6f} {end:.6f}")
            for receiver in receivers:
                tell(receiver, f"window {start:.6f} {end:.6f} {args.drain}")
            pids = [sender.pid, *(r.pid for r in receivers)]
            time.sleep(max(0.0, start - time.time()))
            first, kernel_first = sample(pids), kernel_seconds(sender.pid)
            time.sleep(max(0.0, end - time.time()))
            last, kernel_last = sample(pids), kernel_seconds(sender.pid)
            sent = read_json(sender, args.drain + 10)
            received = [read_json(r, args.drain + 30) for r in receivers]
            for receiver in receivers:
                receiver.wait(30)
            latencies = np.concatenate([np.fromfile(f, np.float32) for f in files])
        finally:
            for process in [*receivers, sender]:
                if process.stdin is not None:
                    process.stdin.close()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                if process.stdout is not None:
                    process.stdout.close()
    records = Records(
        args.window,
        sent,
        received,
        latencies.reshape(-1, 2),
        (first, last),
        (kernel_first, kernel_last),
    )
    return evaluate(Trial(n, size), records)


def search(
    trial: Callable[[int], Trial], start: int, limit: int, resolution: float
) -> tuple[int, str, list[Trial]]:
    """The most connections that pass: N doubles from ``start`` (the last step to ``limit``)
    until a trial fails, then is bisected until the gap is under ``resolution`` of the best.
    Returns the best N, what bounds it (``sender``: a trial failed; ``clients``: a receiver
    saturated first; ``limit``: every N up to ``limit`` passed) and the trials."""
    trials: list[Trial] = []
    best, worst, n = 0, None, start
    while worst is None:
        trials.append(trial(n))
        if trials[-1].verdict == "clients":
            return best, "clients", trials
        if trials[-1].verdict == "fail":
            worst = n
        elif n >= limit:
            return n, "limit", trials
        else:
            best, n = n, min(2 * n, limit)
    while worst - best > max(resolution * best, 1):
        middle = (best + worst) // 2
        trials.append(trial(middle))
        if trials[-1].verdict == "clients":
            return best, "clients", trials
        if trials[-1].verdict == "pass":
            best = middle
        else:
            worst = middle
    return best, "sender", trials


def summary(trial: Trial) -> dict[str, Any]:
    """A trial, rounded for reading."""

    def rounded(value: Any) -> Any:
        if isinstance(value, list):
            return [rounded(v) for v in value]
        return round(value, 3) if isinstance(value, float) else value

    return {key: rounded(value) for key, value in asdict(trial).items()}


def one_run(binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A search at each push size; the figures of its largest passing trial."""
    run: dict[str, Any] = {"load_average_start": [round(v, 2) for v in os.getloadavg()]}
    for name, size in (("", args.size), ("_small", args.small)):

        def trial(n: int, size: int = size) -> Trial:
            result = run_trial(binary, n, size, args)
            print(json.dumps(summary(result)), file=sys.stderr, flush=True)
            return result

        best, bound, trials = search(trial, args.start, args.limit, args.resolution)
        top = next((t for t in trials if t.subscribers == best and t.verdict == "pass"), None)
        run[f"max_subscribers{name}"], run[f"bound{name}"] = best, bound
        run[f"sender_cpu_us_per_push{name}"] = top and round(top.sender_cpu_us_per_push, 2)
        run[f"receivers_cores_at_max{name}"] = top and [round(c, 3) for c in top.receivers_cores]
        run[f"receivers_cpu_us_per_push{name}"] = top and round(top.receivers_cpu_us_per_push, 2)
        run[f"trials{name}"] = [summary(t) for t in trials]
    run["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
    return run


def median_and_spread(runs: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    values = [run[key] for run in runs if run[key] is not None]
    if not values:
        return None, None
    return round(statistics.median(values), 2), round(max(values) - min(values), 2)


def results(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The runs' medians and spreads, named as the issue's report reads them."""
    out: dict[str, Any] = {}
    for name in ("", "_small"):
        for key in ("max_subscribers", "sender_cpu_us_per_push", "receivers_cpu_us_per_push"):
            median, spread = median_and_spread(runs, key + name)
            out[f"floor_{key}{name}"], out[f"floor_{key}{name}_spread"] = median, spread
        out[f"floor_bound{name}"] = [run[f"bound{name}"] for run in runs]
        at_max = [sum(run[f"receivers_cores_at_max{name}"] or [0.0]) for run in runs]
        out[f"floor_receivers_cores_at_max{name}"] = round(statistics.median(at_max), 3)
    loads = [v for run in runs for v in (run["load_average_start"][0], run["load_average_end"][0])]
    return {
        **out,
        "load_average_1m_min": min(loads),
        "load_average_1m_max": max(loads),
        "size": args.size,
        "size_small": args.small,
        "push_rate": PUSH_RATE,
        "receiver_processes": RECEIVERS,
        "window_s": args.window,
        "warmup_s": args.warmup,
        "criteria": {"delivered_min": TARGET_DELIVERED, "p99_ms_max": TARGET_P99_MS},
        "receiver_cores_max": RECEIVER_CORES_MAX,
        "note": "a C sender writing one precomputed frame a push and C receivers, sharing the"
        " machine's 2 cores with each other and with other tenants (other_cores, load"
        " averages); p99_ms is from each frame's due time to receipt; bound 'limit': every N"
        " up to --limit (the open-files limit) passed",
        "runs": runs,
    }


def only(binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--only N``: ``--runs`` trials at N at each push size, alternating the sizes."""
    trials = []
    for _ in range(args.runs):
        for size in (args.size, args.small):
            trials.append(run_trial(binary, args.only, size, args))
            print(json.dumps(summary(trials[-1])), file=sys.stderr, flush=True)
    figures = ("sender_cpu_us_per_push", "receivers_cpu_us_per_push", "sender_cores")
    medians = {
        size: {
            name: round(statistics.median(getattr(t, name) for t in trials if t.size == size), 3)
            for name in figures
        }
        for size in (args.size, args.small)
    }
    return {"subscribers": args.only, "medians": medians, "trials": [summary(t) for t in trials]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=RELAY_PUSH, help="payload bytes a push")
    parser.add_argument("--small", type=int, default=SMALL_PUSH, help="the small push's bytes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--start", type=int, default=1250, help="first N")
    parser.add_argument(
        "--limit", type=int, default=19_000, help="largest N (one file descriptor a connection)"
    )
    parser.add_argument("--resolution", type=float, default=0.125, help="bisect to this fraction")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured")
    parser.add_argument("--drain", type=float, default=1.0, help="seconds after the window")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one, 200-400, short")
    parser.add_argument(
        "--only", type=int, help="no search: --runs trials at this N at each size (a cost at N)"
    )
    args = parser.parse_args()
    if args.quick:
        args.runs, args.start, args.limit, args.resolution = 1, 200, 400, 1.0
        args.warmup, args.window, args.drain = 0.5, 1.5, 0.5
    calibration = calibrate()
    with tempfile.TemporaryDirectory(prefix="fanout-wirefloor-build-") as into:
        binary = build(Path(into))
        if args.only:
            out = only(binary, args)
        else:
            out = results([one_run(binary, args) for _ in range(args.runs)], args)
    write_results(
        {**out, "machine": describe(), "calibration": calibration},
        None if args.no_save else args.output,
    )


if __name__ == "__main__":
    main()
