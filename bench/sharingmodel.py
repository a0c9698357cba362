"""Where ``bench/sharing.py``'s bytes go: its workload through the relays' planning alone.

Run ``.venv/bin/python bench/sharingmodel.py`` (about a minute; ``--no-save``); it prints one
JSON object and writes ``bench/results/sharingmodel.json``. No process, socket or Spark: the
benchmark's views (``fanout.testing.sharing.Views``, the same seed), put on relays as each
assignment puts them, each relay planning with the real coverage planner
(``fanout.relay.core.planner``: the primitives ``to_acquire`` returns, subscription by
subscription in the order they come, then those ``unneeded`` lets go once the last view came),
and rows counted on a uniform density of ``AGENTS`` in the ``WORLD`` (the simulation's agents
are spread uniformly), estimated with ``SAMPLES`` points. The publisher sends a relay each row
inside any of its primitives once, so a relay's egress is the rows inside the union of its
primitives; a direct subscriber's is the rows inside its box. Per configuration and step it
reports:

* ``acquired_rows``: rows inside the relays' primitives, summed over relays (what the publisher
  sends per micro-batch, in rows);
* ``union_rows``: rows inside the union of each relay's subscribers' boxes, summed over relays:
  the least the relays could be sent, with these subscribers where they are;
* ``overfetch``: ``acquired_rows / union_rows`` (what the widening adds);
* ``relays_per_point``: the mean number of relays a point of interest's subscribers are on
  (what the assignment adds: a point on two relays is sent twice);
* ``direct_rows``: rows inside every subscriber's box, summed (the direct case);
* per configuration, ``ratio`` (acquired rows at 10,000 / at 1,000) and ``savings`` (direct /
  acquired at 10,000): ``bench/sharing.py``'s two headline numbers, in rows rather than bytes
  (a row costs about the same bytes both ways, so they come out close to the measured ones).

Assignments: ``map`` (the map of responsibility's redirects, which place a subscriber on the
owner of its view's cell, ``fanout.cluster.responsibility``, relays named as
``bench/sharing.py`` names them), ``spread`` (subscriber i on relay i mod ``RELAYS``: relays
alone behind a load balancer) and ``point`` (each point's subscribers on one relay: the best
any assignment could do).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fanout.cluster.responsibility import ResponsibilityMap
from fanout.relay.core import planner
from fanout.relay.core.planner import IN_A_MAP, Policy
from fanout.relay.core.upstream import Primitive
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.sharing import AGENTS, RELAYS, WORLD, Views
from fanout.views import Box

RESULTS = Path(__file__).parent / "results" / "sharingmodel.json"
SAMPLES = 400_000
STEPS = (1000, 10000)
SEED = 12

#: (name, widening policy, assignment): the relays' defaults in and out of a map first.
CONFIGURATIONS: list[tuple[str, Policy, str]] = [
    ("default in a map: fit, margin 0.075; map", IN_A_MAP, "map"),
    ("default alone: tiles, margin 0.5; spread", Policy(), "spread"),
    ("tiles, margin 0.5; map", Policy(), "map"),
    ("enclose, margin 0, overshoot 0.75; map", Policy("enclose", margin=0, overshoot=0.75), "map"),
    ("exact; map", Policy("exact"), "map"),
    ("fit, margin 0.075; point", IN_A_MAP, "point"),
    ("fit, margin 0.1; map", Policy("fit", margin=0.1), "map"),
    ("fit, margin 0.05; map", Policy("fit", margin=0.05), "map"),
]


class Density:
    """Uniform sample points standing for the agents, sorted by x for quick box queries."""

    def __init__(self, seed: int = SEED) -> None:
        points = np.random.default_rng(seed).uniform(0.0, WORLD, (SAMPLES, 2))
        self.points = points[np.argsort(points[:, 0])]
        self.scale = AGENTS / SAMPLES

    def inside(self, boxes: list[Box]) -> npt.NDArray[np.bool_]:
        """Which sample points lie in any of ``boxes`` (closed)."""
        found = np.zeros(len(self.points), dtype=bool)
        xs = self.points[:, 0]
        for box in boxes:
            first = int(np.searchsorted(xs, box.lo[0], side="left"))
            last = int(np.searchsorted(xs, box.hi[0], side="right"))
            ys = self.points[first:last, 1]
            found[first:last] |= (ys >= box.lo[1]) & (ys <= box.hi[1])
        return found

    def rows(self, boxes: list[Box]) -> float:
        """Rows inside the union of ``boxes``."""
        return float(self.inside(boxes).sum()) * self.scale


def assign(views: Views, count: int, how: str) -> list[list[int]]:
    """Subscribers (indices) per relay under assignment ``how``."""
    names = {f"bench-relay-{number}": f"relay-{number}" for number in range(RELAYS)}
    the_map = ResponsibilityMap(names)
    by_relay: list[list[int]] = [[] for _ in range(RELAYS)]
    for index in range(count):
        if how == "spread":
            relay = index % RELAYS
        elif how == "point":
            relay = int(views.point[index]) % RELAYS
        else:
            owner = the_map.owner_of("agents", box_of(views, index)).name
            relay = int(owner.rsplit("-", 1)[1])
        by_relay[relay].append(index)
    return by_relay


def box_of(views: Views, index: int) -> Box:
    """Subscriber ``index``'s box."""
    return Box(tuple(views.lo[index].tolist()), tuple(views.hi[index].tolist()))


def planned(boxes: list[Box], policy: Policy) -> list[Box]:
    """The primitives a relay holds once ``boxes`` subscribed in order and the grace passed."""
    held: list[Box] = []
    for count, box in enumerate(boxes, 1):
        held += [p.bounds() for p in planner.to_acquire(held, box, policy, None, boxes[:count])]
    prims = [Primitive(number, "agents", view, ready=True) for number, view in enumerate(held)]
    gone = {p.prim for p in planner.unneeded(prims, boxes)}
    return [view for number, view in enumerate(held) if number not in gone]


def step(views: Views, density: Density, count: int, policy: Policy, how: str) -> dict[str, Any]:
    """One configuration at ``count`` subscribers."""
    relays = assign(views, count, how)
    acquired = union = 0.0
    per_relay = []
    for members in relays:
        boxes = [box_of(views, index) for index in members]
        held = planned(boxes, policy)
        got, least = density.rows(held), density.rows(boxes)
        acquired, union = acquired + got, union + least
        per_relay.append(
            {"subscribers": len(members), "primitives": len(held), "acquired_rows": round(got)}
        )
    points: dict[int, set[int]] = {}
    for relay, members in enumerate(relays):
        for index in members:
            points.setdefault(int(views.point[index]), set()).add(relay)
    direct = sum(density.rows([box_of(views, index)]) for index in range(count))
    return {
        "subscribers": count,
        "acquired_rows": round(acquired),
        "union_rows": round(union),
        "overfetch": round(acquired / union, 3),
        "relays_per_point": round(statistics.mean(len(r) for r in points.values()), 3),
        "direct_rows": round(direct),
        "relays": per_relay,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parser.parse_args()
    before, calibration = describe(), calibrate()
    views, density = Views.draw(max(STEPS)), Density()
    configurations = []
    for name, policy, how in CONFIGURATIONS:
        steps = [step(views, density, count, policy, how) for count in STEPS]
        low, high = steps[0], steps[-1]
        configurations.append(
            {
                "configuration": name,
                "ratio": round(high["acquired_rows"] / low["acquired_rows"], 3),
                "savings": round(high["direct_rows"] / high["acquired_rows"], 1),
                "steps": steps,
            }
        )
    results = {
        "configurations": configurations,
        "method": (
            f"bench/sharing.py's views (seeded), {RELAYS} relays, each planning with"
            " fanout.relay.core.planner in subscription order, primitives no view needs released;"
            f" rows: a uniform density of {AGENTS} agents in {WORLD:g} x {WORLD:g}, estimated"
            f" with {SAMPLES} sample points. No processes: a model of the egress, in rows."
        ),
        "machine": before,
        "calibration": calibration,
    }
    write_results(results, None if args.no_save else RESULTS)


if __name__ == "__main__":
    main()
