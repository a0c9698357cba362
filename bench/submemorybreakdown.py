"""``bench/submemory.py --breakdown``: what an idle subscriber's bytes are made of, from a relay
traced (``tracemalloc``) in this process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any

from fanout.testing.relays import running_relay
from fanout.testing.world import publisher_main
from submemoryclients import Clients

#: The benchmark's own files (``bench/submemory*.py``), left out of what the trace counts.
OURS = str(Path(__file__).with_name("submemory*.py"))


async def breakdown(args: argparse.Namespace) -> dict[str, Any]:
    """A relay in this process, traced (``tracemalloc``), and ``--breakdown`` idle subscribers
    in client processes: the Python heap's growth per subscriber by where it was allocated, and
    the objects the collector tracks that were added, by type (count and ``sys.getsizeof``)."""
    context = mp.get_context("spawn")
    pub_conn, child = context.Pipe()
    publisher = context.Process(target=publisher_main, args=(child, args.entities))
    publisher.start()
    child.close()
    count = args.breakdown
    try:
        url = await asyncio.to_thread(pub_conn.recv)
        tracemalloc.start(args.frames)
        async with running_relay(url, timeout=60) as (_, relay_url):
            clients = Clients("relay", relay_url, args.breakdown_mode, count, args.processes)
            try:
                await asyncio.sleep(args.settle)
                before, types_before = heap()
                await asyncio.to_thread(clients.open, count)
                await asyncio.sleep(args.settle)
                after, types_after = heap()
            finally:
                await asyncio.to_thread(clients.stop)
    finally:
        tracemalloc.stop()
        with contextlib.suppress(OSError):
            pub_conn.send("stop")
        publisher.join(10)
    ours = [tracemalloc.Filter(False, OURS), tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(ours), after.filter_traces(ours)
    lines = after.compare_to(before, "traceback" if args.frames > 1 else "lineno")
    grown = sum(d.size_diff for d in lines)
    modules: dict[str, int] = {}
    for d in after.compare_to(before, "filename"):
        name = module_of(d.traceback[0].filename)
        modules[name] = modules.get(name, 0) + d.size_diff
    types = {
        name: (types_after[name][0] - n, types_after[name][1] - size)
        for name, (n, size) in types_before.items()
        if name in types_after
    } | {name: v for name, v in types_after.items() if name not in types_before}
    return {
        "subscribers": count,
        "mode": args.breakdown_mode,
        "traced_bytes_per_subscriber": round(grown / count),
        "by_module": {
            name: round(size / count)
            for name, size in sorted(modules.items(), key=lambda kv: -kv[1])[: args.top]
        },
        "by_line": [
            {
                "where": " < ".join(f"{module_of(f.filename)}:{f.lineno}" for f in d.traceback),
                "bytes_per_subscriber": round(d.size_diff / count),
                "blocks_per_subscriber": round(d.count_diff / count, 2),
            }
            for d in lines[: args.top]
        ],
        "by_type": [
            {
                "type": name,
                "objects_per_subscriber": round(n / count, 2),
                "getsizeof_bytes_per_subscriber": round(size / count),
            }
            for name, (n, size) in sorted(types.items(), key=lambda kv: -kv[1][1])[: args.top]
        ],
        "load_average": round(os.getloadavg()[0], 2),
    }


def module_of(filename: str) -> str:
    """A source file's module, dotted (``fanout.connection``, ``asyncio.queues``)."""
    for root in ("/src/", "site-packages/", "/python3.11/"):
        if root in filename:
            filename = filename.rsplit(root, 1)[1]
            break
    return filename.removesuffix(".py").replace("/", ".")


def heap() -> tuple[tracemalloc.Snapshot, dict[str, tuple[int, int]]]:
    """A traced heap's snapshot, and the collector's objects: (count, bytes) by type."""
    gc.collect()
    types: dict[str, list[int]] = {}
    for each in gc.get_objects():
        kind = type(each)
        entry = types.setdefault(f"{kind.__module__}.{kind.__qualname__}", [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(each)
    return tracemalloc.take_snapshot(), {k: (n, size) for k, (n, size) in types.items()}
