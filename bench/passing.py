"""Benchmark the publisher's choice of relays for a write made elsewhere (``Written``), per write.

Run ``.venv/bin/python bench/passing.py`` (``--relays 10 100``, ``--prims N`` topic filters per
relay, ``--rounds``); it prints one JSON object last and writes ``bench/results/passing.json``
(not with ``--no-save``).

What the control plane does for each durable write to a ``topic`` dataset
(``publisher/control.py``, ``_pass``), in this thread's CPU time, each the median of ``--rounds``
rounds of ``--writes`` one-row writes: ``plan_us``, the registry's copy of every relay's
primitives of the dataset (``Registry.plan``, under its lock); ``recipients_us``, matching the
write's rows against every wanting relay's primitives in Python (``publisher.passing``). Each
relay holds ``--prims`` filters ``site/R/I/#`` and wants the dataset's live writes; a write
goes to ``site/R/I/sensor``, of one relay. The append that precedes them is an SQLite commit,
a few milliseconds (``bench/writes.py``'s ``durable_p50_ms``): the figure to compare with.

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

from fanout.publisher.passing import recipients
from fanout.publisher.relaytable import Registry
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
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


def measure(relays: int, prims: int, writes: int, rounds: int, seed: int) -> dict[str, float]:
    """Median and spread of CPU microseconds per write, plan and matching apart."""
    table = registry(relays, prims)
    rng = random.Random(seed)
    rows = [
        {
            "topic": np.array([f"site/{rng.randrange(relays)}/{rng.randrange(prims)}/x"], object),
            "value": np.zeros(1),
        }
        for _ in range(writes)
    ]
    plans, matches, passed = [], [], 0
    for _ in range(rounds):
        started = time.thread_time()
        built = [table.plan("sensors") for _ in range(writes)]
        planned = time.thread_time()
        for plan, upserts in zip(built, rows, strict=True):
            passed += len(recipients(plan, None, upserts, False, ["topic"]))
        matched = time.thread_time()
        plans.append((planned - started) / writes * 1e6)
        matches.append((matched - planned) / writes * 1e6)
    assert passed == rounds * writes, "each write goes to the one relay whose filter holds it"
    return {
        "relays": relays,
        "prims_per_relay": prims,
        "plan_us": round(statistics.median(plans), 2),
        "plan_us_spread": [round(min(plans), 2), round(max(plans), 2)],
        "recipients_us": round(statistics.median(matches), 2),
        "recipients_us_spread": [round(min(matches), 2), round(max(matches), 2)],
        "per_write_us": round(statistics.median(plans) + statistics.median(matches), 2),
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
