"""One step of ``bench/sharing.py``: one case (relay, direct, or relay by the compared
assignment) at N subscribers: its relays and client process started, one window of whole
micro-batches measured, and its figures."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fanout.launch import Child
from fanout.testing.sharing import Views
from sharingclients import READY_TIMEOUT, direct_plan, relay_plan
from sharingservers import (
    TRIGGER,
    BatchLines,
    Relays,
    Sample,
    egress,
    publisher_stages,
    relay_policy,
    sample,
)

#: The script whose ``clients SPEC OUT`` runs the client process.
SCRIPT = Path(__file__).with_name("sharing.py")


async def run_clients_process(spec: dict[str, Any], workdir: Path, name: str) -> ClientProcess:
    """Start the client process for ``spec``; returns once it says ``ready``."""
    spec_path, out = workdir / f"{name}.spec.json", workdir / f"{name}.out.json"
    spec_path.write_text(json.dumps(spec))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "clients",
        str(spec_path),
        str(out),
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT + 120)
    if not line:
        status = await process.wait()
        raise RuntimeError(f"{name}: the client process exited ({status}) before it was ready")
    return ClientProcess(process, out, json.loads(line))


@dataclass
class ClientProcess:
    """A running client process and what it said when ready."""

    process: asyncio.subprocess.Process
    out: Path
    ready: dict[str, Any]

    async def stop(self) -> dict[str, Any]:
        """SIGTERM it and read its records."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 60)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        return dict(json.loads(self.out.read_text()))


async def measure_step(
    *,
    case: str,
    count: int,
    publisher: Child,
    port: int,
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Any]:
    """One case (``relay``, ``direct`` or ``relay-by-`` the compared assignment) at ``count``
    subscribers."""
    views = Views.draw(max(args.steps))
    name = f"{case}-{count}"
    logs = workdir / name
    logs.mkdir(parents=True, exist_ok=True)
    relays: Relays | None = None
    clients: ClientProcess | None = None
    try:
        if case == "direct":
            connections = direct_plan(views, count)
            spec = {"mode": "direct", "url": publisher.url, "connections": connections}
        else:
            policy = relay_policy(args)
            relays = await Relays.start(
                publisher.url,
                logs,
                policy,
                args.registry_url,
                args.area,
                registry_policy=args.registry_policy,
            )
            assign = args.assign if case == "relay" else args.compare_assign
            connections = relay_plan(views, count, assign, args.per_connection, args.area)
            spec = {
                "mode": "relay",
                "relays": relays.urls,
                "rate": args.rate,
                "connections": connections,
            }
        clients = await run_clients_process(spec, workdir, name)
        await asyncio.sleep(args.settle)
        # The window spans whole micro-batches: it opens just after one was sent and closes
        # just after the ``batches``-th one after it, so exactly those are counted.
        batches = max(1, round(args.duration / TRIGGER))
        lines = BatchLines(publisher.log)
        await lines.after(1)
        before = await sample(publisher, port, relays)
        await lines.after(batches)
        after = await sample(publisher, port, relays)
        records = await clients.stop()
        clients = None
    finally:
        if clients is not None:
            await clients.stop()
        if relays is not None:
            await relays.stop()
    result = summarise(
        case=case,
        count=count,
        connections=len(connections),
        batches=batches,
        window=(before, after),
        records=records,
    )
    result |= publisher_stages(publisher.log, before.at, after.at)
    if case != "direct":
        result["relays_per_point"] = relays_per_point(views, records["placed"])
    print(json.dumps(result), file=sys.stderr, flush=True)
    await asyncio.sleep(2.0)  # the publisher drops the connections and their primitives
    return result


def relays_per_point(views: Views, placed: dict[str, str]) -> float | None:
    """Over the points of interest with a subscriber placed, the mean number of relays serving
    their subscribers (``placed``: subscriber, as JSON text, -> the relay's URL)."""
    served: dict[int, set[str]] = {}
    for sub, url in placed.items():
        served.setdefault(int(views.point[int(sub)]), set()).add(url)
    if not served:
        return None
    return round(statistics.mean(len(urls) for urls in served.values()), 3)


def summarise(
    *,
    case: str,
    count: int,
    connections: int,
    batches: int,
    window: tuple[Sample, Sample],
    records: dict[str, Any],
) -> dict[str, Any]:
    """The numbers of one window of ``batches`` micro-batches (docs/benchmarks/sharing.md)."""
    before, after = window
    wall = after.at - before.at
    times = np.array(records["times"], dtype=np.float64)
    sizes = np.array(records["sizes"], dtype=np.float64)
    inside = (times >= before.at) & (times < after.at)
    cpu = [(t, c) for t, c in records["cpu"] if before.at <= t <= after.at]
    clients_cpu = (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]) if len(cpu) > 1 else None
    sent = egress(before, after)
    result: dict[str, Any] = {
        "case": case,
        "subscribers": count,
        "connections": connections,
        "egress_bytes_per_s": round(sent / wall),
        "egress_bytes_per_micro_batch": round(sent / batches),
        "publisher_cpu_s_per_s": round((after.cpu - before.cpu) / wall, 3),
        "publisher_connections": len(after.sockets),
        "window_s": round(wall, 1),
        "micro_batches": batches,
        "micro_batches_per_s": round(batches / wall, 3),
        "ready": records["ready"],
        "clients_cpu_s_per_s": None if clients_cpu is None else round(clients_cpu, 3),
        "errors": records["errors"],
        "redirects": records.get("redirects", 0),
        "closed": [c for c in records["closed"] if "CancelledError" not in c],
    }
    if case == "direct":
        result |= {
            "primitives": records["ready"]["ready"],
            "batches_received_per_connection": round(float(inside.sum()) / connections, 1),
            "received_bytes_per_s": round(float(sizes[inside].sum()) / wall),
        }
    else:
        relays = [
            {key: a.stats[key] - b.stats.get(key, 0) for key in a.stats}
            for b, a in zip(before.relays, after.relays, strict=True)
        ]
        result |= {
            "primitives": sum(a.stats["primitives"] for a in after.relays),
            # since the relays started, at this step: each one a snapshot the publisher cut
            "primitives_acquired": sum(a.stats["primitives_acquired"] for a in after.relays),
            "batches_received_per_relay": statistics.mean(r["batches"] for r in relays),
            "relay_rows": [a.stats["rows"] for a in after.relays],
            "relays_cpu_s_per_s": round(
                sum(
                    a.cpu.seconds - b.cpu.seconds
                    for b, a in zip(before.relays, after.relays, strict=True)
                )
                / wall,
                3,
            ),
            "pushes_per_s": round(sum(r["pushes"] + r["no_updates"] for r in relays) / wall),
            "received_frames_per_s": round(float(inside.sum()) / wall),
        }
    return result
