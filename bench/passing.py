"""Benchmark the publisher's choice of relays for a write made elsewhere (``Written``), per write.

Run ``.venv/bin/python bench/passing.py`` (``--relays 10 100``, ``--prims N`` topic filters per
relay, ``--rounds``); it prints one JSON object last and writes ``bench/results/passing.json``
(not with ``--no-save``).

What the control plane does for each durable write to a ``topic`` dataset
(``publisher/control.py``, ``_pass``), in this thread's CPU time, each the median of ``--rounds``
rounds of ``--writes`` one-row writes. ``indexed_us``: as it is now, the relays' filters in one
``TopicIndex`` built once per registry version (``publisher.passing.Choice``), and per write the
version, the wanting relays and the match. ``brute_us``: the same-run baseline, as it was, a
copy of the registry's plan and every relay's filters matched one by one (``plan_us`` of it the
copy). Each relay holds ``--prims`` filters ``site/R/I/#`` and wants the dataset's live writes;
a write goes to ``site/R/I/x``, of one relay. The append before it is an SQLite commit, a few
milliseconds (``bench/writes.py``'s ``durable_p50_ms``): the figure to compare with.

``mqtt_bytes``: what a relay following ``#`` for MQTT sessions (``every`` mode) no longer gets
per message published through another relay since it is passed no ``Written`` (``LiveWrites``):
the encoded frame, beside the message's share of the batch (``--batch-rows`` messages) that
carries it anyway. Counted from the real encoder, not timed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import numpy as np

from fanout.publisher.passing import Choice, recipients
from fanout.publisher.relaytable import Plan, Registry
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views.members import SELECTING, members
from fanout.views.topic import parse as topic
from fanout.wire import codec
from fanout.wire.columns import Columns, encode_columns
from fanout.wire.messages import Batch, Written

RESULTS = Path(__file__).parent / "results" / "passing.json"


def registry(relays: int, prims: int) -> Registry:
    """``relays`` relays, each holding ``prims`` topic filters of ``sensors`` and wanting its
    live writes."""
    table = Registry()
    for relay in range(relays):
        number = table.add_relay(f"relay-{relay}")
        for prim in range(prims):
            table.acquire(number, prim, "sensors", topic(f"site/{relay}/{prim}/#"))
        table.want_live(number, "sensors", True)
    return table


def brute_force(plan: Plan, upserts: dict[str, np.ndarray]) -> list[int]:
    """The choice as it was: every wanting relay's selecting views matched one by one (the
    old ``passing._touches`` kept those ``isinstance(view, SELECTING)`` too)."""
    return sorted(
        relay
        for relay, prims in plan.prims.items()
        if relay in plan.live
        and any(
            members(v, upserts, ["topic"]).any() for v in prims.values() if isinstance(v, SELECTING)
        )
    )


def measure(relays: int, prims: int, writes: int, rounds: int, seed: int) -> dict[str, object]:
    """Median and spread of CPU microseconds per write, indexed and brute force."""
    table = registry(relays, prims)
    rng = random.Random(seed)
    rows = [
        {
            "topic": np.array([f"site/{rng.randrange(relays)}/{rng.randrange(prims)}/x"], object),
            "value": np.zeros(1),
        }
        for _ in range(writes)
    ]
    started = time.thread_time()
    choice = Choice(table.plan("sensors"))
    built_us = (time.thread_time() - started) * 1e6
    plans, brutes, indexed = [], [], []
    for _ in range(rounds):
        started = time.thread_time()
        built = [table.plan("sensors") for _ in range(writes)]
        planned = time.thread_time()
        brute = [brute_force(plan, upserts) for plan, upserts in zip(built, rows, strict=True)]
        matched = time.thread_time()
        fast = []
        for upserts in rows:
            assert choice.version == table.version
            live = table.live("sensors")
            fast.append(recipients(choice, live, None, upserts, deletes=False, index=["topic"]))
        done = time.thread_time()
        assert fast == brute and all(len(r) == 1 for r in fast), "one relay holds each write"
        plans.append((planned - started) / writes * 1e6)
        brutes.append((matched - started) / writes * 1e6)
        indexed.append((done - matched) / writes * 1e6)
    return {
        "relays": relays,
        "prims_per_relay": prims,
        "indexed_us": round(statistics.median(indexed), 2),
        "indexed_us_spread": [round(min(indexed), 2), round(max(indexed), 2)],
        "brute_us": round(statistics.median(brutes), 2),
        "brute_us_spread": [round(min(brutes), 2), round(max(brutes), 2)],
        "plan_us": round(statistics.median(plans), 2),
        "speedup": round(statistics.median(brutes) / statistics.median(indexed), 1),
        "index_built_us": round(built_us, 1),
    }


def mqtt_bytes(payload: int, batch_rows: int) -> dict[str, float]:
    """Bytes of one MQTT message's ``Written`` frame and of its share of a batch, as the
    publisher encodes them (an ``events`` dataset: id, topic, payload, retain)."""

    def rows(n: int) -> dict[str, np.ndarray]:
        return {
            "id": np.array([f"m-{i:08d}" for i in range(n)], object),
            "topic": np.array([f"site/{i % 50}/room/{i % 7}/temp" for i in range(n)], object),
            "payload": np.array(["x" * payload] * n, object),
            "retain": np.zeros(n, bool),
        }

    written = codec.encode(Written("events", 1000, 1000, encode_columns(rows(1)), Columns()))
    batch = Batch("events", 1, 7, 7, 0.0, encode_columns(rows(batch_rows)), Columns())
    share = len(codec.encode(batch)) / batch_rows
    return {
        "payload_bytes": payload,
        "written_frame_bytes": len(written),
        "batch_bytes_per_message": round(share, 1),
        "saved_share": round(len(written) / (len(written) + share), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relays", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--prims", type=int, default=20, help="topic filters per relay")
    parser.add_argument("--writes", type=int, default=200, help="writes per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--payload", type=int, default=64, help="MQTT payload bytes")
    parser.add_argument("--batch-rows", type=int, default=100, help="messages per batch")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    runs = [measure(n, args.prims, args.writes, args.rounds, args.seed) for n in args.relays]
    results = {
        "bench": "passing",
        "machine": describe(),
        "calibration": calibrate(),
        "writes": args.writes,
        "rounds": args.rounds,
        "runs": runs,
        "mqtt_bytes": mqtt_bytes(args.payload, args.batch_rows),
    }
    write_results(results, None if args.no_save else RESULTS)


if __name__ == "__main__":
    main()
