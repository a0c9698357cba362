"""Soak gapless delivery under faults: many random fault injections, overlapping, while ``every``
subscribers follow box views, then an audit of every subscriber against the publisher's log
(issues 5 and 31).

Run ``.venv/bin/python bench/soak.py --faults 1000 --interval 1.5``; it prints one JSON object
and writes ``bench/results/soak.json``. ``--faults 10 --interval 8 --mids 0`` is the short soak
of issue 5 (one fault at a time).

Processes on this machine: the real publisher (Spark ``local[*]``, the ``agents`` simulation at 10
ticks/s), ``--mids`` mid relays on the publisher serving relays below them (a tier), ``--relays``
edge relays (every other one behind a mid relay, the rest on the publisher), and in this process
``--subscribers`` subscribers (``fanout.client``, ``mode="every"``) with box views spread over the
world, each on one edge relay. Every ``--interval`` seconds one fault starts, drawn at random
(seeded, weighted by ``--weights``) among the processes no fault holds at that moment, so faults
overlap (a relay killed while another is stopped and the publisher restarts):

* ``kill_relay`` / ``kill_mid``: SIGKILL an edge / mid relay, start it again on the same port
  2 s later;
* ``stop_relay`` / ``stop_mid``: SIGSTOP an edge / mid relay for 2-5 s, then SIGCONT;
* ``kill_publisher``: SIGKILL the publisher (no sooner than ``--publisher-gap`` seconds after it
  became ready), start it again from its state directory on the same port (Spark restarts from
  its checkpoint; relays reconnect and resume);
* ``churn``: a subscriber drops its connection and resumes on the next relay.

A subscriber whose connection breaks moves to the next relay and resumes with its view (its
resume token), as ``fanout subscribe --relay A,B,C --mode every`` does. After the last fault the
run waits until every subscriber has reached the publisher's last logged seq, then audits each
one against the log (``fanout.testing.audit``):

* ``published``: seqs the publisher logged from the first to the last any subscriber received;
* ``delivered``: updates received (pushes and no-updates), over all subscribers;
* ``expected``: per subscriber, the seqs from its first to its last update, summed;
* ``lost`` / ``duplicated`` / ``reordered``: seqs never received, received twice, received after
  a later one; ``mismatched``: updates whose rows differ from the logged change; ``resyncs``:
  announced restarts (the log no longer held what a subscriber missed). All must be 0;
* ``restart_failures``: a killed process that did not start again on its port (it is tried
  again); ``follower_crashes``: a subscriber that failed with an error the client library does
  not document (it stops following); both must be empty.

Memory: every 2 s the resident memory of each process tree (the publisher with its Spark JVM,
each relay, this process) is read; ``peak_rss_mib`` is the peak per role, and
``rss_first_half_mib`` / ``rss_second_half_mib`` the peaks in each half of the run (bounded:
the second half no higher than the first by more than noise).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from fanout.client import LiveView, SubscriptionError, Update, connect
from fanout.launch import Child, Children, LaunchError
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, rss, tree_rss, write_results
from fanout.testing.wait import NotYet, eventually
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "soak.json"
WORLD = 1000.0
KINDS = ("kill_relay", "stop_relay", "kill_mid", "stop_mid", "kill_publisher", "churn")
WEIGHTS = "kill_relay=3,stop_relay=3,kill_mid=1,stop_mid=1,kill_publisher=1,churn=3"
EXPECTED = (OSError, SubscriptionError, TimeoutError)


class Follower:
    """An ``every`` subscriber that moves to the next relay when its connection breaks."""

    def __init__(self, box: Box, relays: list[str], first: int) -> None:
        self.box = box
        self.relays = relays
        self.turn = first
        self.view: LiveView | None = None
        self.updates: list[Update] = []
        self.moves = 0
        self.churns = 0
        self.refusals: list[str] = []
        self._session: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Follow until cancelled."""
        while True:
            url = self.relays[self.turn % len(self.relays)]
            self._session = session = asyncio.create_task(self._follow(url))
            try:
                await asyncio.wait({session})
            except asyncio.CancelledError:
                session.cancel()
                raise
            if session.cancelled():
                self.churns += 1
            elif (exc := session.exception()) is not None:
                if not isinstance(exc, EXPECTED):
                    raise exc
                if isinstance(exc, SubscriptionError) and exc.code != "closed":
                    self.refusals.append(str(exc))
            self.turn += 1
            self.moves += 1
            await asyncio.sleep(0.5)

    async def _follow(self, url: str) -> None:
        async with connect(url, name="soak") as subscriber:
            self.view = await subscriber.subscribe(self.box, mode="every", resume=self.view)
            async for update in self.view:
                self.updates.append(update)

    def churn(self) -> None:
        """Drop the connection now (a subscriber leaving); ``run`` resumes on the next relay."""
        if self._session is not None:
            self._session.cancel()

    @property
    def seq(self) -> int:
        """The last seq received."""
        return self.updates[-1].seq if self.updates else -1


class Deployment:
    """The publisher, mid relays and edge relays, restartable on their ports."""

    def __init__(
        self, children: Children, root: Path, *, agents: int, mids: int, relays: int
    ) -> None:
        self.scope = children
        self.root = root
        self.agents = agents
        self.mid_count = mids
        self.count = relays
        self.publisher: Child | None = None
        self.publisher_ready = 0.0
        self.mids: list[Child] = []
        self.relays: list[Child] = []
        self.port = 0

    async def start(self) -> None:
        self.publisher = await self._publisher(0)
        self.port = int(self.publisher.url.rsplit(":", 1)[1])
        for number in range(self.mid_count):
            self.mids.append(await self._mid(number, 0))
        for number in range(self.count):
            self.relays.append(await self._relay(number, 0))

    def children(self) -> dict[str, Child]:
        """Every process by its name (``publisher``, ``mid-0``, ``relay-2``)."""
        named = {"publisher": self.publisher} if self.publisher is not None else {}
        named |= {f"mid-{n}": child for n, child in enumerate(self.mids)}
        return named | {f"relay-{n}": child for n, child in enumerate(self.relays)}

    async def _publisher(self, port: int) -> Child:
        # The log keeps every batch for the whole run (3 hours; the default keeps 10 minutes):
        # the audit at the end reads it from the first seq any subscriber received.
        config = self.root / "fanout.toml"
        config.write_text(
            "[publisher]\nretention_seconds = 10800\n\n[datasets.agents]\n"
            f'source = {{ kind = "simulation", agents = {self.agents}, dims = 2 }}\n'
        )
        args = ["--config", str(config), "--port", str(port)]
        args += ["--state-dir", str(self.root / "publisher"), "--log-level", "info"]
        child = await self.scope.start("publisher", args, self.root / "publisher.log")
        self.publisher_ready = time.monotonic()
        return child

    async def _mid(self, number: int, port: int) -> Child:
        args = ["--publisher", f"ws://127.0.0.1:{self.port}", "--port", str(port)]
        args += ["--name", f"mid-{number}", "--serve-relays", "--log-level", "info"]
        return await self.scope.start("relay", args, self.root / f"mid-{number}.log")

    async def _relay(self, number: int, port: int) -> Child:
        if self.mids and number % 2 == 0:
            above = ["--upstream", self.mids[(number // 2) % len(self.mids)].url]
        else:
            above = ["--publisher", f"ws://127.0.0.1:{self.port}"]
        args = [*above, "--port", str(port), "--name", f"relay-{number}", "--log-level", "info"]
        args += ["--workers", "1"]  # one process a relay, as measured
        return await self.scope.start("relay", args, self.root / f"relay-{number}.log")

    async def kill(self, name: str) -> None:
        """SIGKILL a process and start it again on its port (a relay after 2 s)."""
        child = self.children()[name]
        child.kill()
        await child.process.wait()
        port = int(child.url.rsplit(":", 1)[1])
        if name == "publisher":
            self.publisher = await self._publisher(port)
            return
        await asyncio.sleep(2.0)
        role, number = name.split("-")
        if role == "mid":
            self.mids[int(number)] = await self._mid(int(number), port)
        else:
            self.relays[int(number)] = await self._relay(int(number), port)

    async def pause(self, name: str, seconds: float) -> None:
        """SIGSTOP a process for ``seconds``, then SIGCONT."""
        child = self.children()[name]
        await child.pause()
        await asyncio.sleep(seconds)
        child.resume()

    async def stop(self) -> None:
        for child in self.children().values():
            child.resume()
            await child.stop()


class Memory:
    """The peak resident memory of each role's process trees, per half of the run."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.samples: list[tuple[float, str, int]] = []

    async def run(self) -> None:
        """Sample every 2 s until cancelled."""
        while True:
            now = time.monotonic()
            for name, child in self.deployment.children().items():
                self.samples.append((now, name.split("-")[0], tree_rss(child.pid)))
            self.samples.append((now, "bench", rss(os.getpid())))
            await asyncio.sleep(2.0)

    def peaks(self, start: float, end: float) -> dict[str, float]:
        """The peak per role (MiB) among the samples taken in ``[start, end)``."""
        peak: dict[str, int] = {}
        for at, role, resident in self.samples:
            if start <= at < end:
                peak[role] = max(peak.get(role, 0), resident)
        return {role: round(most / 2**20, 1) for role, most in sorted(peak.items())}


class Faults:
    """Draws and runs the faults: each in a task of its own, holding the process it acts on."""

    def __init__(
        self,
        deployment: Deployment,
        followers: list[Follower],
        rng: random.Random,
        weights: dict[str, int],
        publisher_gap: float,
    ) -> None:
        self.deployment = deployment
        self.followers = followers
        self.rng = rng
        self.weights = weights
        self.publisher_gap = publisher_gap
        #: The newest seq any subscriber had when the publisher was last (re)started.
        self.mark = -1
        self.held: set[str] = set()
        self.log: list[dict[str, Any]] = []
        self.skipped = 0
        self.restart_failures: list[str] = []
        self.tasks: set[asyncio.Task[None]] = set()

    def _targets(self, kind: str) -> list[str]:
        if kind == "churn":
            return ["subscriber"]
        if kind == "kill_publisher":
            # Again only once it has served a while and its batches flow again: killing a
            # publisher still restarting from its checkpoint would only stretch one outage.
            up = time.monotonic() - self.deployment.publisher_ready
            flowing = max(f.seq for f in self.followers) >= self.mark + 10
            free = "publisher" not in self.held and up >= self.publisher_gap and flowing
            return ["publisher"] if free else []
        role = "mid" if kind.endswith("_mid") else "relay"
        names = [name for name in self.deployment.children() if name.startswith(role + "-")]
        return [name for name in names if name not in self.held]

    def start_one(self, began: float) -> bool:
        """Start one fault on a process no other fault holds; False if none was free."""
        kinds = [kind for kind in KINDS if self.weights.get(kind, 0) and self._targets(kind)]
        if not kinds:
            self.skipped += 1
            return False
        kind = self.rng.choices(kinds, [self.weights[k] for k in kinds])[0]
        target = self.rng.choice(self._targets(kind))
        entry: dict[str, Any] = {"at_s": round(time.monotonic() - began, 1), "fault": kind}
        if kind == "churn":
            follower = self.rng.randrange(len(self.followers))
            self.followers[follower].churn()
            self.log.append(entry | {"subscriber": follower})
            return True
        entry["target"] = target
        seconds = round(self.rng.uniform(2.0, 5.0), 1) if kind.startswith("stop") else None
        if seconds is not None:
            entry["s"] = seconds
        self.log.append(entry)
        self.held.add(target)
        task = asyncio.create_task(self._run(kind, target, seconds))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    async def _run(self, kind: str, target: str, seconds: float | None) -> None:
        try:
            if seconds is not None:
                await self.deployment.pause(target, seconds)
            else:
                await self._kill(target)
                if target == "publisher":
                    self.mark = max(f.seq for f in self.followers)
        finally:
            self.held.discard(target)

    async def _kill(self, target: str, attempts: int = 3) -> None:
        """Kill and restart ``target``; a restart that fails is a finding (``restart_failures``)
        and is tried again, ``attempts`` times in all (then the process stays down: a relay
        behind a dead mid relay cannot become ready, and the run must still end)."""
        try:
            await self.deployment.kill(target)
        except LaunchError as exc:
            self.restart_failures.append(f"{target}: {str(exc)[-400:]}")
            if attempts > 1:
                await asyncio.sleep(1.0)
                await self._kill(target, attempts - 1)

    async def finish(self) -> None:
        """Wait for the faults still running (their processes back)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks))


def last_logged(log: Path, epoch: int) -> int:
    with SqliteLog(log) as stored:
        bounds = stored.bounds("agents", epoch)
    return -1 if bounds is None else bounds[1]


def parse_weights(text: str) -> dict[str, int]:
    weights = {}
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        if kind not in KINDS or not weight.isdigit():
            raise SystemExit(f"--weights: {part!r} is not KIND=N with KIND one of {KINDS}")
        weights[kind] = int(weight)
    return weights


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    """The run, its processes in one scope (stopped, with their stdout drains, when it ends)."""
    async with Children() as children:
        return await _soak(children, args)


async def _soak(children: Children, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="fanout-soak-"))
    deployment = Deployment(children, root, agents=args.agents, mids=args.mids, relays=args.relays)
    await deployment.start()
    urls = [relay.url for relay in deployment.relays]
    followers = []
    for number in range(args.subscribers):
        x, y = rng.uniform(0, WORLD - args.side), rng.uniform(0, WORLD - args.side)
        box = Box((x, y), (x + args.side, y + args.side))
        followers.append(Follower(box, urls, number % len(urls)))
    tasks = [asyncio.create_task(f.run()) for f in followers]
    memory = Memory(deployment)
    sampler = asyncio.create_task(memory.run())
    faults = Faults(deployment, followers, rng, parse_weights(args.weights), args.publisher_gap)
    began = time.monotonic()
    try:
        # Faults start once every subscriber is served (Spark's first micro-batches take a
        # while on a loaded machine).
        await eventually(lambda: all(f.updates for f in followers), timeout=600, every=1.0)
        began = time.monotonic()
        while len(faults.log) < args.faults:
            if faults.start_one(began):
                print(json.dumps({"progress": faults.log[-1]}), file=sys.stderr, flush=True)
            await asyncio.sleep(args.interval)
        await faults.finish()
        faulted = time.monotonic()
        log = root / "publisher" / "log.db"
        epoch = followers[0].updates[0].epoch
        # The target is a seq logged after the last fault (the publisher may have been
        # restarting then); those still behind after ``--settle`` seconds are counted.
        ended = last_logged(log, epoch)
        with contextlib.suppress(NotYet):
            await eventually(lambda: last_logged(log, epoch) >= ended + 5, timeout=args.settle)
        target = last_logged(log, epoch)
        with contextlib.suppress(NotYet):
            await eventually(
                lambda: min(f.seq for f in followers) >= target, timeout=args.settle, every=0.5
            )
    finally:
        for task in [*tasks, sampler]:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, sampler, return_exceptions=True)
        crashes = [
            f"{type(exc).__name__}: {exc}"
            for exc in outcomes
            if isinstance(exc, BaseException) and not isinstance(exc, asyncio.CancelledError)
        ]
        await deployment.stop()
    middle = began + (faulted - began) / 2
    result = report(args, followers, faults.log, log=log, target=target)
    return result | {
        "skipped_slots": faults.skipped,
        "follower_crashes": crashes,
        "restart_failures": faults.restart_failures,
        "peak_rss_mib": memory.peaks(0.0, float("inf")),
        "rss_first_half_mib": memory.peaks(began, middle),
        "rss_second_half_mib": memory.peaks(middle, faulted),
        "duration_s": round(time.monotonic() - began, 1),
    }


def report(
    args: argparse.Namespace,
    followers: list[Follower],
    faults: list[dict[str, Any]],
    *,
    log: Path,
    target: int,
) -> dict[str, Any]:
    totals = {"delivered": 0, "expected": 0, "lost": 0, "duplicated": 0, "reordered": 0}
    totals |= {"mismatched": 0, "resyncs": 0, "behind_at_end": 0}
    problems: list[str] = []
    first, last = None, -1
    with SqliteLog(log) as stored:
        for follower in followers:
            found = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
            )
            totals["delivered"] += found.delivered
            totals["expected"] += found.last - found.first + 1 if found.delivered else 0
            for name in ("lost", "duplicated", "reordered", "mismatched"):
                totals[name] += getattr(found, name)
            totals["resyncs"] += found.restarts
            totals["behind_at_end"] += int(found.last < target)
            problems += found.problems[:2]
            first = found.first if first is None else min(first, found.first)
            last = max(last, found.last)
    return {
        "benchmark": "soak",
        "faults": len(faults),
        "fault_counts": dict(sorted(Counter(f["fault"] for f in faults).items())),
        "published": 0 if first is None else last - first + 1,
        **totals,
        "clean": not any(totals[n] for n in ("lost", "duplicated", "reordered", "mismatched")),
        "subscribers": len(followers),
        "mids": args.mids,
        "relays": args.relays,
        "agents": args.agents,
        "moves": sum(f.moves for f in followers),
        "churns": sum(f.churns for f in followers),
        "refusals": [r for f in followers for r in f.refusals][:5],
        "problems": problems[:10],
        "fault_log": faults,
        "machine": describe(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=10, help="fault injections (default: 10)")
    parser.add_argument("--interval", type=float, default=8.0, help="seconds between faults")
    parser.add_argument("--subscribers", type=int, default=24, help="every-mode subscribers")
    parser.add_argument("--relays", type=int, default=3, help="edge relays (default: 3)")
    parser.add_argument("--mids", type=int, default=1, help="mid relays (default: 1; 0: flat)")
    parser.add_argument("--agents", type=int, default=10_000, help="simulated agents")
    parser.add_argument("--side", type=float, default=150.0, help="side of each box view")
    parser.add_argument("--settle", type=float, default=180.0, help="seconds to catch up at end")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the fault plan")
    parser.add_argument("--weights", default=WEIGHTS, help=f"fault mix (default: {WEIGHTS})")
    parser.add_argument(
        "--publisher-gap",
        type=float,
        default=30.0,
        help="seconds the publisher serves before it may be killed again (default: 30)",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    # SIGTERM as Ctrl-C: the run is cancelled and stops every process it started (killed
    # without it, it would leave them running, some stopped).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    result = asyncio.run(soak(args)) | {"calibration": calibration}
    write_results(result, None if args.no_save else RESULTS)
    healthy = not (
        result["behind_at_end"] or result["restart_failures"] or result["follower_crashes"]
    )
    return 0 if result["clean"] and healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
