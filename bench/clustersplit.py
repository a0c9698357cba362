"""``bench/cluster.py``'s split case: a giver past its threshold splits, about half its ``every``
views move to a standby; when they moved, how long each paused and where the pause went, and
every view's updates audited (docs/benchmarks/cluster.md says what each figure is)."""

import asyncio
import contextlib
import datetime as dt
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from clustertiers import percentile
from clustertimeline import Timeline
from fanout.background import Background
from fanout.client import LiveView, SubscriptionError, Update
from fanout.client.following import ClusterSubscriber
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import Box

#: Seconds the giver must stay past its threshold before it splits (its subscribers' normal
#: interval is measured meanwhile).
SPLIT_DWELL = 10.0
#: The split case's registry lease (s): long enough that a relay stalled by a loaded machine
#: (load 80 stalled them past 3 s) does not lapse and redirect every view, which is not what
#: is measured; a split's handover waits on the map, never on the lease.
SPLIT_LEASE = 10.0
#: Connections the split case's subscribers share.
SPLIT_CONNECTIONS = 20


class Timed(ClusterSubscriber):
    """A cluster subscriber noting when each redirect of a held view arrived, and when the
    relay it moved to answered its subscription there (wall clock)."""

    def __init__(self, entry: str, stack: contextlib.AsyncExitStack, moving: Background) -> None:
        super().__init__(entry, stack, moving)
        self.redirected_at: dict[int, float] = {}  # id of the view -> when
        self.held_at: dict[int, float] = {}  # id of the view -> when held where it moved

    def _moved(self, view: LiveView, location: str) -> None:
        self.redirected_at[id(view)] = time.time()
        super()._moved(view, location)

    async def _move(self, view: LiveView, location: str) -> None:
        await super()._move(view, location)
        self.held_at[id(view)] = time.time()


class Followed:
    """Every update of one ``every`` view, as received, and the view's moves."""

    def __init__(self, box: Box, view: LiveView) -> None:
        self.box, self.view = box, view
        self.updates: list[Update] = []
        self.error: SubscriptionError | None = None
        self.task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            async for update in self.view:
                self.updates.append(update)
        except SubscriptionError as error:
            self.error = error  # counted: a view that ended is a failure of the split

    def moved_after(self, redirected: float) -> int:
        """The index of its first update received after its redirect at ``redirected`` (a
        wall-clock time), -1 if none came yet."""
        for index, update in enumerate(self.updates):
            if update.received_at > redirected:
                return index
        return -1

    def pause_ms(self, redirected: float) -> float:
        """The gap across its move minus its normal interval (docs/benchmarks/cluster.md)."""
        at = [update.received_at for update in self.updates]
        first = self.moved_after(redirected)
        return max(at[first] - at[first - 1] - normal_interval(at[:first]), 0.0) * 1000


#: Updates a view receives within this many seconds of each other are one arrival: a loaded
#: relay sends a view the seqs it is behind by in one burst, and a burst's zero gaps are not a
#: subscriber's normal interval (with them, the median gap of a view served in bursts of two or
#: three seqs was 0, and its pause across a move the whole gap).
BURST_GAP = 0.05


def normal_interval(received: list[float]) -> float:
    """The median gap between a view's arrivals at ``received`` (wall clock, ascending), its
    updates received within ``BURST_GAP`` s of the one before counted with it; 0 if fewer than
    two arrivals."""
    arrivals: list[float] = []
    for at in received:
        if not arrivals or at - arrivals[-1] > BURST_GAP:
            arrivals.append(at)
    return float(np.median(np.diff(arrivals))) if len(arrivals) > 1 else 0.0


async def split_run(
    publisher: Child, views: list[Box], logs: Path, run_number: int
) -> dict[str, Any]:
    """One split: ``len(views)`` ``every`` views on a giver past its threshold, about half moved
    to a standby."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        common = ["--registry", f"redis://{host}:{port}", "--registry-lease", str(SPLIT_LEASE)]
        common += ["--workers", "1"]
        common += ["--split-above", f"subscribers={len(views) - 1}"]  # the last view tips it
        common += ["--split-dwell", str(SPLIT_DWELL), "--publisher", publisher.url, "--port", "0"]
        async with Children() as children:
            started: list[Child] = []
            for role, extra in (("g0", []), ("g1", ["--standby"])):
                name = f"{role}-{run_number}"
                log = logs / f"{name}.log"
                args = [
                    *common,
                    "--name",
                    name,
                    "--log-format",
                    "json",
                    "--log-level",
                    "info",
                    *extra,
                ]
                started.append(await children.start("relay", args, log))
            giver, standby = started
            result = await _split_measured(publisher, giver, standby, views)
    result.update(split_logged(logs / f"g0-{run_number}.log", result.pop("first_redirect")))
    # Each moved view's updates, redirect and answer, for a closer look than the percentiles.
    (logs / "moved-views.json").write_text(json.dumps(result.pop("views")))
    (logs / "stayed-views.json").write_text(json.dumps(result.pop("stayed")))
    with SqliteLog(logs / "publisher" / "log.db") as stored:
        counts = {"lost": 0, "duplicated": 0, "reordered": 0}
        for follower in result.pop("followers"):
            report = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
            )
            for name in counts:
                counts[name] += getattr(report, name)
    return {**result, **counts}


async def _split_measured(
    publisher: Child, giver: Child, standby: Child, views: list[Box]
) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack, Background() as moving:
        clusters = [Timed(standby.url, stack, moving) for _ in range(SPLIT_CONNECTIONS)]
        followers = []
        for i, box in enumerate(views[:-1]):
            view = await clusters[i % len(clusters)].subscribe(box, mode="every")
            followers.append(Followed(box, view))
        # Every view served and its normal interval seen before the last one tips the giver
        # past its threshold: the split comes a dwell later.
        await eventually(
            lambda: min(len(f.updates) for f in followers),
            lambda fewest: fewest >= 3,
            timeout=300,
            every=0.5,
            what="three updates of every view",
        )
        timeline = Timeline(publisher, {"giver": giver, "standby": standby})
        view = await clusters[0].subscribe(views[-1], mode="every")
        followers.append(Followed(views[-1], view))
        await eventually(
            lambda: scrape(giver.url).get("fanout_relay_splits_total", 0.0),
            lambda splits: splits >= 1,
            timeout=SPLIT_DWELL * 6 + 120,
            every=0.5,
            in_thread=True,
            what="the giver's split",
        )
        await eventually(
            lambda: scrape(standby.url).get("fanout_relay_parts_received", 0.0),
            timeout=60,
            in_thread=True,
            what="the standby's parts",
        )
        redirected: dict[int, float] = {}

        def waiting() -> list[Followed]:
            for cluster in clusters:
                redirected.update(cluster.redirected_at)
            return [
                f
                for f in followers
                if id(f.view) in redirected
                and (not f.view.moves or f.moved_after(redirected[id(f.view)]) < 0)
            ]

        # The giver redirects once the standby holds the parts warm (docs/cluster.md).
        await eventually(
            lambda: sum(len(cluster.redirected_at) for cluster in clusters),
            timeout=60,
            every=0.05,
            what="the split's first redirect",
        )
        await asyncio.sleep(3.0)  # the split's redirects reach the subscribers
        await eventually(
            waiting,
            lambda still: not still,
            timeout=180,
            every=0.2,
            what="every moved view's first update after its move",
        )
        await asyncio.sleep(3.0)  # a few more seqs after the move, for the audit
        slow = 0.0
        for relay in (giver, standby):
            closed = await asyncio.to_thread(scrape, relay.url)
            slow += closed.get("fanout_relay_slow_consumers_closed_total", 0.0)
        timeline.task.cancel()
        moving.cancel()
        for follower in followers:
            follower.task.cancel()
        await asyncio.gather(timeline.task, *(f.task for f in followers), return_exceptions=True)
        held: dict[int, float] = {}
        for cluster in clusters:
            held.update(cluster.held_at)
    moved = [f for f in followers if id(f.view) in redirected]
    first_redirect = min(redirected.values())
    last_served = max(f.updates[f.moved_after(redirected[id(f.view)])].received_at for f in moved)
    # A pause needs an update before the move (every view has had three: see above).
    pauses = [
        f.pause_ms(redirected[id(f.view)])
        for f in moved
        if f.moved_after(redirected[id(f.view)]) > 0
    ]
    rows = [
        {
            "pause_ms": f.pause_ms(redirected[id(f.view)]),
            "redirected": redirected[id(f.view)],
            "held": held.get(id(f.view)),
            "updates": [(u.seq, u.tick_time, u.received_at) for u in f.updates],
        }
        for f in moved
        if f.moved_after(redirected[id(f.view)]) > 0
    ]
    return {
        "views": rows,
        "stayed": [
            [(u.seq, u.tick_time, u.received_at) for u in f.updates]
            for f in followers
            if id(f.view) not in redirected
        ],
        "split_subscribers": len(views),
        "split_moved": len(moved),
        "split_views_ended": sum(f.error is not None for f in followers),
        # Why they ended (code: message -> views), so that a failure says what it was.
        "split_views_ended_why": dict(
            Counter(str(f.error) for f in followers if f.error is not None)
        ),
        # Connections the relays closed as slow consumers during the run (views ended so).
        "split_slow_consumers": slow,
        "split_seconds": last_served - first_redirect,
        "split_pause_p50_ms": percentile(pauses, 50),
        "split_pause_p99_ms": percentile(pauses, 99),
        **stayed_pauses(
            [f for f in followers if id(f.view) not in redirected], first_redirect, last_served
        ),
        **phases(moved, redirected, held, timeline),
        **late(moved, [f for f in followers if id(f.view) not in redirected], redirected),
        "first_redirect": first_redirect,
        "followers": followers,
    }


def stayed_pauses(stayed: list[Followed], start: float, end: float) -> dict[str, float]:
    """The views that stayed measured as the moved ones are, over the split (``start`` to
    ``end``, wall clock): each one's longest gap ending then, minus its normal interval before
    ``start`` (``split_pause_stayed_p50_ms``, ``_p99_ms``). What a loaded giver and publisher
    cost any view meanwhile, moved or not: the move's own share of a moved view's pause is
    what exceeds it."""
    pauses = []
    for f in stayed:
        at = [update.received_at for update in f.updates]
        normal = normal_interval([t for t in at if t <= start])
        gaps = [at[i] - at[i - 1] for i in range(1, len(at)) if start < at[i] <= end]
        if gaps:
            pauses.append(max(max(gaps) - normal, 0.0) * 1000)
    return {
        "split_pause_stayed_p50_ms": percentile(pauses, 50),
        "split_pause_stayed_p99_ms": percentile(pauses, 99),
    }


def phases(
    moved: list[Followed],
    redirected: dict[int, float],
    held: dict[int, float],
    timeline: Timeline,
) -> dict[str, Any]:
    """Where a moved view's pause goes (``split_phase_*``, each p50 and p99 over the moved
    views, ms): from its last update before the move to the redirect reaching it (``quiet``:
    the giver had stopped serving it, or had nothing new), the redirect to the new relay's
    answer (``rehome``: a connection there, the subscription answered), and that answer to its
    first update there (``first``: the cell acquired upstream, the missed seqs caught up). And
    from the standby's own figures, sampled (ms after the first redirect): its first new
    primitive, its last primitive pending, its first curiosity request; with the load."""
    quiet, rehome, first = [], [], []
    for f in moved:
        at = redirected[id(f.view)]
        index = f.moved_after(at)
        if index <= 0 or id(f.view) not in held:
            continue
        quiet.append((at - f.updates[index - 1].received_at) * 1000)
        rehome.append((held[id(f.view)] - at) * 1000)
        first.append((f.updates[index].received_at - held[id(f.view)]) * 1000)
    start = min(redirected.values())
    end = max(f.updates[f.moved_after(redirected[id(f.view)])].received_at for f in moved)
    acquired = timeline.value("standby", "primitives_acquired_total", start - 1.0)
    asked = timeline.value("standby", "curiosity_asked_total", start - 1.0)
    loads = timeline.loads(start - 5.0, end + 5.0) or [os.getloadavg()[0]]
    out: dict[str, Any] = {}
    for name, values in (("quiet", quiet), ("rehome", rehome), ("first", first)):
        out[f"split_phase_{name}_p50_ms"] = percentile(values, 50)
        out[f"split_phase_{name}_p99_ms"] = percentile(values, 99)
    out["split_standby_first_acquired_ms"] = (
        timeline.first("standby", "primitives_acquired_total", acquired, start - 1.0) - start
    ) * 1000
    out["split_standby_acquired"] = (
        timeline.value("standby", "primitives_acquired_total", end) - acquired
    )
    out["split_standby_last_pending_ms"] = (
        timeline.last_change("standby", "primitives_pending", start - 1.0) - start
    ) * 1000
    out["split_standby_first_curiosity_ms"] = (
        timeline.first("standby", "curiosity_asked_total", asked, start - 1.0) - start
    ) * 1000
    out["split_standby_curiosity_asked"] = (
        timeline.value("standby", "curiosity_asked_total", end) - asked
    )
    out["split_micro_batch_seconds"] = timeline.micro_batch_seconds(start - 5.0, end)
    out["split_load_average"] = {"min": min(loads), "max": max(loads)}
    return out


def late(
    moved: list[Followed], stayed: list[Followed], redirected: dict[int, float]
) -> dict[str, Any]:
    """How much later a moved view got its first seq at the standby than the views that stayed
    at the giver got the same seq (``split_phase_late_*``: p50 and p99, ms; the median arrival
    over the views that stayed), and the share of moved views whose first seq there the giver
    had pushed to the views that stayed before the redirect reached them (``split_behind``: the
    view was a seq or more behind when it moved)."""
    arrivals: dict[tuple[int, int], list[float]] = {}
    for f in stayed:
        for update in f.updates:
            arrivals.setdefault((update.epoch, update.seq), []).append(update.received_at)
    typical = {stamp: float(np.median(at)) for stamp, at in arrivals.items()}
    lateness, behind, counted = [], 0, 0
    for f in moved:
        index = f.moved_after(redirected[id(f.view)])
        if index <= 0:
            continue
        first = f.updates[index]
        there = typical.get((first.epoch, first.seq))
        if there is None:
            continue
        counted += 1
        lateness.append((first.received_at - there) * 1000)
        behind += there < redirected[id(f.view)]
    return {
        "split_phase_late_p50_ms": percentile(lateness, 50),
        "split_phase_late_p99_ms": percentile(lateness, 99),
        "split_behind": behind / counted if counted else float("nan"),
    }


def split_logged(giver_log: Path, first_redirect: float) -> dict[str, float]:
    """From the giver's JSON log: ms from its split's assignment (logged once written) to the
    first redirect a subscriber got (``split_handover_ms``: the standby warming the parts
    while the giver kept serving them; nan if not logged)."""
    for line in giver_log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if str(record.get("message", "")).startswith("split: "):
                at = dt.datetime.fromisoformat(record["time"]).timestamp()
                return {"split_handover_ms": (first_redirect - at) * 1000}
    return {"split_handover_ms": float("nan")}
