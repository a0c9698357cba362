"""Where the tier's hop goes, tick by tick (issue 45.6): ``bench/cluster.py``'s tier runs join
each paired update (a view's tick delivered by both deployments) with the relays' own record of
that tick (``GET /v1/admin/batches``: read, written, swapped in, pushed), all wall clock on one
host.

Per paired update, each stage's time in ms from the flat edge reading the tick:

* tiered path: ``mid_read`` (the publisher reached the mid relay after the flat edge),
  ``mid_written`` (on its writer thread), ``mid_swapped`` (a pure batch went below once
  decoded, before these two; one with the mid relay's snapshots as it was swapped in),
  ``edge_read`` (the mid relay's frame read by the edge below it), ``edge_swapped``,
  ``edge_pushed`` and ``edge_pushed_last`` (the edge's first and last rounds pushing the tick
  ended), ``received`` (the tiered subscriber process got it);
* flat path: ``flat_swapped``, ``flat_pushed``, ``flat_pushed_last``, ``flat_received``.

``segments`` turns them into the hop's pieces (the tiered path's steps, and the flat path's
to subtract); ``summary`` gives each piece's median over every paired update and over the
slowest 1% (the tail: the piece that grows there is what the tail waits on), and the hop as the
edges pushed it (``edge_hop_percentiles_ms``: the tiered edge's last round pushing the tick
against the flat edge's serving the same views), which leaves the subscriber processes out.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

#: The hop's pieces: name -> (later stage, earlier stage) of ``record``'s stages.
SEGMENTS = {
    "publisher_mid_after_flat": ("mid_read", "flat_read"),
    "mid_read_to_written": ("mid_written", "mid_read"),
    "mid_written_to_swap": ("mid_swapped", "mid_written"),
    "mid_to_edge": ("edge_read", "mid_swapped"),
    "edge_read_to_swap": ("edge_swapped", "edge_read"),
    "edge_swap_to_push": ("edge_pushed", "edge_swapped"),
    "edge_push_rounds": ("edge_pushed_last", "edge_pushed"),
    "edge_push_to_received": ("received", "edge_pushed"),
    "flat_read_to_swap": ("flat_swapped", "flat_read"),
    "flat_swap_to_push": ("flat_pushed", "flat_swapped"),
    "flat_push_rounds": ("flat_pushed_last", "flat_pushed"),
    "flat_push_to_received": ("flat_received", "flat_pushed"),
}


def batches(url: str) -> dict[int, dict[str, Any]]:
    """The relay at ``url``'s last batches of ``agents`` (``GET /v1/admin/batches``), by tick."""
    address = url.replace("ws://", "http://").rstrip("/") + "/v1/admin/batches"
    with urllib.request.urlopen(address, timeout=10) as answer:
        listed = json.load(answer)["batches"]
    return {b["tick"]: b for b in listed if b["dataset"] == "agents"}


def records(
    flat_at: dict[tuple[int, int], float],
    tiered_at: dict[tuple[int, int], float],
    flat: list[dict[int, dict[str, Any]]],
    tiered: list[dict[int, dict[str, Any]]],
    mids: list[dict[int, dict[str, Any]]],
) -> list[dict[str, float]]:
    """Each paired update's stages (``view``, ``tick``, ``hop``, wall-clock stages; see the
    module): view ``i`` is on flat edge ``i % E``, tiered edge ``i % E``, below mid relay
    ``(i % E) % M`` (``cluster.deployment``); updates whose tick a relay no longer lists are
    left out."""
    out = []
    for view, tick in sorted(flat_at.keys() & tiered_at.keys()):
        edge = view % len(flat)
        f, e, m = flat[edge].get(tick), tiered[edge].get(tick), mids[edge % len(mids)].get(tick)
        if f is None or e is None or m is None:
            continue
        out.append(
            {
                "view": view,
                "tick": tick,
                "tick_time": f["tick_time"],
                "hop": (tiered_at[(view, tick)] - flat_at[(view, tick)]) * 1000,
                "flat_read": f["read"],
                "flat_swapped": f["swapped"],
                "flat_pushed": f["pushed_first"] or f["swapped"],
                "flat_pushed_last": f["pushed_last"] or f["swapped"],
                "flat_received": flat_at[(view, tick)],
                "mid_read": m["read"],
                "mid_written": m["written"],
                "mid_swapped": m["swapped"],
                "edge_read": e["read"],
                "edge_swapped": e["swapped"],
                "edge_pushed": e["pushed_first"] or e["swapped"],
                "edge_pushed_last": e["pushed_last"] or e["swapped"],
                "received": tiered_at[(view, tick)],
            }
        )
    return out


def segments(record: dict[str, float]) -> dict[str, float]:
    """``record``'s pieces (``SEGMENTS``), ms."""
    return {name: (record[a] - record[b]) * 1000 for name, (a, b) in SEGMENTS.items()}


def summary(
    found: list[dict[str, float]],
    collections: dict[str, list[tuple[float, float]]] | None = None,
    tail: float = 99.0,
) -> dict[str, Any]:
    """Each piece's median over every record and over those whose hop is at or above its
    ``tail`` percentile, and the ticks of that tail (a tail of a few ticks is a stall of
    one process; of many, a steady cost); the hop's percentiles both ways (the difference of
    two paths: its low tail is the flat path's stalls); with the subscriber processes' garbage
    collections (``collections``: side -> wall-clock start and end), how many there were, the
    longest, and the share of the tail whose tiered arrival waited on one."""
    if not found:
        return {"records": 0}
    out = _summary(found, tail)
    for side, spans in (collections or {}).items():
        out[f"gc_{side}"] = {
            "collections": len(spans),
            "longest_ms": max(((b - a) * 1000 for a, b in spans), default=0.0),
        }
    if collections and "tiered" in collections:
        slow = [r for r in found if r["hop"] >= out["tail_from_ms"]]
        waited = [
            r
            for r in slow
            if any(a < r["received"] and b > r["edge_pushed"] for a, b in collections["tiered"])
        ]
        out["tail_in_tiered_gc"] = len(waited) / len(slow)
    return out


def _summary(found: list[dict[str, float]], tail: float) -> dict[str, Any]:
    hops = np.array([r["hop"] for r in found])
    cut = float(np.percentile(hops, tail))
    slow = [r for r in found if r["hop"] >= cut]
    pieces = [segments(r) for r in found]
    slow_pieces = [segments(r) for r in slow]
    return {
        "records": len(found),
        "hop_percentiles_ms": {str(q): float(np.percentile(hops, q)) for q in (1, 5, 50, 95, 99)},
        # The tier's hop without the subscriber processes: when the tiered edge's last round
        # pushing the tick ended, against the flat edge serving the same views.
        "edge_hop_percentiles_ms": {
            str(q): float(
                np.percentile(
                    [(r["edge_pushed_last"] - r["flat_pushed_last"]) * 1000 for r in found], q
                )
            )
            for q in (1, 5, 50, 95, 99)
        },
        "tail_from_ms": cut,
        "tail_ticks": sorted({int(r["tick"]) for r in slow}),
        "median_ms": {k: float(np.median([p[k] for p in pieces])) for k in SEGMENTS},
        "tail_median_ms": {k: float(np.median([p[k] for p in slow_pieces])) for k in SEGMENTS},
        "p99_ms": {k: float(np.percentile([p[k] for p in pieces], 99)) for k in SEGMENTS},
    }


def save(found: list[dict[str, float]], path: Path) -> None:
    """The records, one JSON object a line."""
    with path.open("w") as out:
        for record in found:
            out.write(json.dumps(record) + "\n")


def schedstat(pid: int | str = "self") -> tuple[float, float, int]:
    """The main thread of ``pid``'s time on a CPU and waiting for one while runnable (s), and
    its time slices (``/proc/PID/schedstat``): the waiting is what a loaded machine costs a
    process that must run."""
    with open(f"/proc/{pid}/schedstat") as stats:
        ran, waited, slices = stats.read().split()
    return int(ran) / 1e9, int(waited) / 1e9, int(slices)


def scheduling(
    before: list[tuple[float, float, int]], after: list[tuple[float, float, int]], seconds: float
) -> dict[str, float]:
    """Processes' ``schedstat`` over ``seconds``: each one's mean share of the time on a CPU
    and waiting for one, and the mean wait a time slice began with (ms)."""
    ran = sum(b[0] - a[0] for a, b in zip(before, after, strict=True))
    waited = sum(b[1] - a[1] for a, b in zip(before, after, strict=True))
    slices = sum(b[2] - a[2] for a, b in zip(before, after, strict=True))
    count = max(len(before), 1)
    return {
        "cpu_share": ran / seconds / count,
        "waiting_share": waited / seconds / count,
        "wait_per_slice_ms": waited / max(slices, 1) * 1000,
    }
