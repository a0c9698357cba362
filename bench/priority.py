"""Priority from the data (issue 44.1): what rate tiers buy at the same link budget.

``PYTHONPATH=src .venv/bin/python bench/priority.py [--quick] [--no-save]`` runs a relay's
sans-I/O core (``relay.core``: the real cuts and encodings, no sockets) under a publisher of
``--entities`` agents walking a 1000 x 1000 world at 10 ticks a second, each tick moving them all.
``--subscribers`` subscribers each hold a 200 x 200 box. Two ways of spending their bytes:

- **tiered**: every push the relay can (every tick), entities within ``R1`` of the box's centre
  every push, a third of them beyond ``R1``, a tenth beyond ``R2`` (``Relevance``);
- **plain at the same budget**: the plain view, its ``rate`` lowered (bisection) until its bytes
  per subscriber match the tiered view's (within 3 %).

Each reports bytes a second per subscriber and the position error of the entities in the view
after each tick (the subscriber's copy against the truth): of those within ``R1`` of the centre
(near) and of all; and the share of the view's entities the copy lacks (entered since its last
push). The median over ``--runs`` seeds, with the spread (min, max). Prints one JSON object last;
writes ``bench/results/priority.json`` unless ``--no-save``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fanout.relay.core.relaycore import UPSTREAM
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.relaycore import ready_core
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import Acquire, Batch, Push, Subscribe
from fanout.wire.options import Relevance, Tier

RESULTS = Path(__file__).resolve().parent / "results" / "priority.json"
SIDE = 1000.0  # the world's side
HALF = 100.0  # a view's half side
R1, R2 = 30.0, 70.0
TIERS = [Tier(R1, 3), Tier(R2, 10)]
TICK = 0.1  # seconds between publisher ticks
SPEED = 8.0  # units a second, at most, per axis
FULL_RATE = 20.0  # above the tick rate: a push every tick


@dataclass
class Outcome:
    """One run's measures for one kind of subscription."""

    bytes_per_s: float
    error_near: float
    error_all: float
    missing: float


class World:
    """The truth: agents walking a square world, bouncing off its edges."""

    def __init__(self, entities: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.ids = np.arange(entities, dtype=np.int64)
        self.xy = rng.uniform(0, SIDE, (entities, 2))
        self.velocity = rng.uniform(-SPEED, SPEED, (entities, 2))

    def step(self) -> None:
        self.xy += self.velocity * TICK
        out = (self.xy < 0) | (self.xy > SIDE)
        self.velocity[out] *= -1
        np.clip(self.xy, 0, SIDE, out=self.xy)

    def batch(self, seq: int, snapshots: list[int]) -> Batch:
        """Every agent's row (they all moved), as the publisher's batch ``seq``."""
        columns = {"id": self.ids, "x": self.xy[:, 0].copy(), "y": self.xy[:, 1].copy()}
        return Batch(
            dataset="agents",
            epoch=1,
            seq=seq,
            tick=seq,
            tick_time=seq * TICK,
            upserts=encode_columns(columns),
            deletes=encode_columns({"id": self.ids[:0]}),
            snapshots=snapshots,
        )


def run(
    entities: int, subscribers: int, ticks: int, seed: int, *, rate: float, tiered: bool
) -> Outcome:
    """Subscribers' bytes and position errors over ``ticks`` ticks."""
    world = World(entities, seed)
    rng = np.random.default_rng(seed + 1)
    centres = rng.uniform(HALF, SIDE - HALF, (subscribers, 2))
    core = ready_core()
    relevance = Relevance(tiers=TIERS) if tiered else None
    fresh: list[int] = []
    for client, (x, y) in enumerate(centres, start=1):
        view = Box((x - HALF, y - HALF), (x + HALF, y + HALF))
        sends = core.on_subscribe(client, Subscribe(1, "agents", view, rate, relevance=relevance))
        fresh += [s.frame.prim for s in sends if s.to == UPSTREAM and isinstance(s.frame, Acquire)]
    copies: list[dict[int, tuple[float, float]]] = [{} for _ in range(subscribers)]
    sent = 0
    near: list[float] = []
    every: list[float] = []
    missing = inside = 0
    warm = 10  # ticks before measuring: the views are covered and have their full push
    for seq in range(ticks + warm):
        world.step()
        core.on_batch(world.batch(seq, fresh))
        fresh = []
        for send in core.pushes(seq * TICK, lambda client: True):
            if send.to == UPSTREAM:
                fresh += [send.frame.prim] if isinstance(send.frame, Acquire) else []
                continue
            data = send.frame if isinstance(send.frame, bytes) else codec.encode(send.frame)
            frame = codec.to_subscriber().decode(data)
            if isinstance(frame, Push):
                apply(copies[send.to - 1], frame)
            sent += len(data) if seq >= warm else 0
        if seq >= warm:
            counts = measure(world, centres, copies, near, every)
            missing, inside = missing + counts[0], inside + counts[1]
    seconds = ticks * TICK
    return Outcome(
        bytes_per_s=sent / subscribers / seconds,
        error_near=float(np.mean(near)) if near else 0.0,
        error_all=float(np.mean(every)) if every else 0.0,
        missing=missing / max(inside, 1),
    )


def apply(copy: dict[int, tuple[float, float]], push: Push) -> None:
    if push.full:
        copy.clear()
    for part in (push.entered, push.updated):
        columns = decode_columns(part)
        if "id" in columns:
            for key, x, y in zip(columns["id"], columns["x"], columns["y"], strict=True):
                copy[int(key)] = (float(x), float(y))
    for key in decode_columns(push.left).get("id", []):
        copy.pop(int(key), None)


def measure(
    world: World,
    centres: np.ndarray,
    copies: list[dict[int, tuple[float, float]]],
    near: list[float],
    every: list[float],
) -> tuple[int, int]:
    """Append each held entity's position error; return (entities the copies lack, in view)."""
    missing = inside = 0
    for (cx, cy), copy in zip(centres, copies, strict=True):
        within = np.flatnonzero(np.all(np.abs(world.xy - (cx, cy)) <= HALF, axis=1))
        inside += len(within)
        for at in within.tolist():
            held = copy.get(at)
            if held is None:
                missing += 1
                continue
            x, y = world.xy[at]
            error = float(np.hypot(held[0] - x, held[1] - y))
            every.append(error)
            if np.hypot(x - cx, y - cy) <= R1:
                near.append(error)
    return missing, inside


def matched(budget: float, trial: Callable[[float], Outcome]) -> tuple[float, Outcome]:
    """The plain rate whose bytes match ``budget`` (bisection on the rate), and its outcome."""
    low, high = 0.2, 1 / TICK
    best: tuple[float, Outcome] | None = None
    for _ in range(12):
        rate = (low + high) / 2
        outcome = trial(rate)
        if best is None or abs(outcome.bytes_per_s - budget) < abs(best[1].bytes_per_s - budget):
            best = (rate, outcome)
        if abs(outcome.bytes_per_s - budget) <= 0.03 * budget:
            break
        low, high = (rate, high) if outcome.bytes_per_s < budget else (low, rate)
    assert best is not None
    return best


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=4000)
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run of 100 ticks")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    runs, ticks = (1, 100) if args.quick else (args.runs, args.ticks)
    tiered: list[Outcome] = []
    plain: list[tuple[float, Outcome]] = []
    full: list[Outcome] = []
    for seed in range(runs):

        def trial(rate: float, tiers: bool = False, seed: int = seed) -> Outcome:
            return run(args.entities, args.subscribers, ticks, seed, rate=rate, tiered=tiers)

        tiered.append(trial(FULL_RATE, True))
        full.append(trial(FULL_RATE))
        plain.append(matched(tiered[-1].bytes_per_s, trial))

    def report(outcomes: list[Outcome]) -> dict[str, dict[str, float]]:
        return {
            name: summary([getattr(o, name) for o in outcomes])
            for name in ("bytes_per_s", "error_near", "error_all", "missing")
        }

    results = {
        "bench": "priority",
        "setup": {
            "entities": args.entities,
            "subscribers": args.subscribers,
            "ticks": ticks,
            "runs": runs,
            "tick_s": TICK,
            "world_side": SIDE,
            "view_side": 2 * HALF,
            "tiers": "every push within 30, 1/3 beyond 30, 1/10 beyond 70",
            "speed_max_per_axis": SPEED,
        },
        "tiered": report(tiered),
        "plain_same_budget": {
            "rate": summary([rate for rate, _ in plain]),
            **report([o for _, o in plain]),
        },
        "plain_full_rate": report(full),
        "machine": describe(),
        "calibration": calibrate(),
    }
    write_results(results, None if args.no_save else RESULTS)


if __name__ == "__main__":
    main()
