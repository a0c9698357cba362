"""``bench/submemory.py``'s measurement: the server's memory sampled over a window with the
clients' counts, the baseline and each count of subscribers in turn, and stopped readers."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from fanout.testing import cpu
from fanout.testing.machine import Memory, tree_memory
from submemoryclients import Clients


@dataclass
class Step:
    """The server with ``subscribers`` connected, over one window."""

    subscribers: int
    rss_mib: float
    pss_mib: float
    uss_mib: float
    rss_max_mib: float
    per_subscriber_bytes: dict[str, float]
    server_cores: float
    delivered_per_s: float
    delivered_hz_per_subscriber: float
    bytes_per_frame: float
    clients_cores: float
    clients_rss_mib: float
    failed: int
    closed: int
    load_average: float


def window(pid: int, clients: Clients, seconds: float) -> tuple[list[Memory], dict[str, Any]]:
    """Sample the server's memory every second for ``seconds``; what the clients and the server
    did meanwhile."""
    before, server_before = clients.ask("sample"), cpu.process_tree(pid)
    memories = []
    for _ in range(max(1, round(seconds))):
        memories.append(tree_memory(pid))
        time.sleep(1.0)
    after, server_after = clients.ask("sample"), cpu.process_tree(pid)
    wall = after[0]["cpu"].at - before[0]["cpu"].at
    frames_got = sum(a["frames"] - b["frames"] for a, b in zip(after, before, strict=True))
    bytes_got = sum(a["bytes"] - b["bytes"] for a, b in zip(after, before, strict=True))
    return memories, {
        "server_cores": server_after.cores_since(server_before),
        "delivered_per_s": frames_got / wall,
        "bytes_per_frame": bytes_got / frames_got if frames_got else 0.0,
        "clients_cores": sum(
            a["cpu"].cores_since(b["cpu"]) for a, b in zip(after, before, strict=True)
        ),
        "clients_rss_mib": sum(a["rss"] for a in after) / 2**20,
        "closed": sum(a["closed"] for a in after),
    }


def median_memory(memories: list[Memory]) -> Memory:
    return Memory(
        *(
            int(statistics.median(getattr(m, name) for m in memories))
            for name in ("rss", "pss", "uss")
        )
    )


def steps(
    pid: int, clients: Clients, counts: list[int], args: argparse.Namespace, feed: Any = None
) -> list[Step]:
    """The baseline, then each count of subscribers in turn (each adds to the last)."""
    time.sleep(args.settle)
    baseline_samples, _ = window(pid, clients, args.window)
    baseline = median_memory(baseline_samples)
    out = [step(0, memory=baseline, baseline=baseline, samples=baseline_samples, did={}, failed=0)]
    for count in counts:
        failed = clients.open(count)
        if feed is not None:
            feed(count)
        time.sleep(args.settle)
        samples, did = window(pid, clients, args.window)
        memory = median_memory(samples)
        out.append(
            step(count, memory=memory, baseline=baseline, samples=samples, did=did, failed=failed)
        )
        print(json.dumps(asdict(out[-1])), file=sys.stderr, flush=True)
    return out


def step(
    count: int,
    *,
    memory: Memory,
    baseline: Memory,
    samples: list[Memory],
    did: dict[str, Any],
    failed: int,
) -> Step:
    mib = 2**20
    per = memory.per_subscriber(baseline, count) if count else {"rss": 0, "pss": 0, "uss": 0}
    return Step(
        subscribers=count,
        rss_mib=round(memory.rss / mib, 1),
        pss_mib=round(memory.pss / mib, 1),
        uss_mib=round(memory.uss / mib, 1),
        rss_max_mib=round(max(m.rss for m in samples) / mib, 1),
        per_subscriber_bytes={k: round(v) for k, v in per.items()},
        server_cores=round(did.get("server_cores", 0.0), 3),
        delivered_per_s=round(did.get("delivered_per_s", 0.0)),
        delivered_hz_per_subscriber=round(did.get("delivered_per_s", 0.0) / max(count, 1), 2),
        bytes_per_frame=round(did.get("bytes_per_frame", 0.0)),
        clients_cores=round(did.get("clients_cores", 0.0), 3),
        clients_rss_mib=round(did.get("clients_rss_mib", 0.0), 1),
        failed=failed,
        closed=did.get("closed", 0),
        load_average=round(os.getloadavg()[0], 2),
    )


def stopped(
    pid: int, clients: Clients, args: argparse.Namespace, feed: Any, seconds: float
) -> dict[str, Any]:
    """``--stopped`` subscribers that read for a window, then stop reading: the server's
    growth per stopped subscriber (its peak while they are stopped over its median while they
    read)."""
    failed = clients.open(args.stopped)
    if feed is not None:
        feed(args.stopped)
    time.sleep(args.settle)
    reading, did = window(pid, clients, args.window)
    clients.ask("pause")
    samples: list[int] = []
    for _ in range(round(seconds)):
        samples.append(tree_memory(pid).rss)
        time.sleep(1.0)
    base = median_memory(reading).rss
    return {
        "subscribers": args.stopped,
        "failed": failed,
        "reading_rss_mib": round(base / 2**20, 1),
        "stopped_rss_peak_mib": round(max(samples) / 2**20, 1),
        "stopped_rss_last_mib": round(samples[-1] / 2**20, 1),
        "growth_per_subscriber_bytes": round((max(samples) - base) / args.stopped),
        "bytes_per_frame": round(did["bytes_per_frame"]),
        "delivered_hz_per_subscriber_reading": round(did["delivered_per_s"] / args.stopped, 2),
        "rss_stopped_mib": [round(v / 2**20, 1) for v in samples[:: max(1, len(samples) // 30)]],
        "load_average": round(os.getloadavg()[0], 2),
        "peak_at_s": samples.index(max(samples)) + 1,
    }
