"""The relay's admin answers: a live EXPLAIN, and what each subscriber costs the relay.

Per-subscriber accounting is kept on the subscriptions by the core as pushes go out (pushes,
bytes, rows, ticks coalesced: ``relay.core.lifecycle.pushed``); the relay's CPU time spent in
rounds of pushes (``relay.shell.pump``) is attributed to them by their share of the bytes pushed
— nothing is timed per push. ``GET /v1/admin/subscribers`` lists the top ones; ``/metrics``
carries the top ``METRICS_TOP`` by bytes (bounded label cardinality). ``GET /v1/admin/batches``
lists the last batches' wall-clock times through the relay (``batches``). docs/http.md, "Admin".
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from fanout.auth import Grant
from fanout.metrics import Sample
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.relaycore import RelayCore
from fanout.relay.shell.writer import Timing
from fanout.views.text import to_text

#: Subscribers in ``/metrics`` (each a label set: keep it small and fixed).
METRICS_TOP = 10


def top(core: RelayCore, count: int) -> list[Subscription]:
    """The ``count`` subscriptions that were sent the most bytes, most first."""
    return heapq.nlargest(count, core.downstream, key=lambda s: s.sent_bytes)


def subscribers(
    core: RelayCore, grants: Mapping[int, Grant], cpu_seconds: float, count: int, now: float
) -> dict[str, Any]:
    """``GET /v1/admin/subscribers``'s body: the top ``count`` subscriptions by bytes sent,
    each with its accounting, its share of the relay's push CPU time, and its connection's
    link as estimated at ``now`` (``relay.core.links``)."""
    links = core.serving.links
    total = sum(s.sent_bytes for s in core.downstream)
    listed = [
        {
            "client": s.client,
            "sub": s.sub,
            "subject": grants[s.client].subject if s.client in grants else "",
            "dataset": s.dataset,
            "view": to_text(s.view),
            "mode": s.mode,
            "rate": s.rate,
            "pushes": s.pushes,
            "bytes": s.sent_bytes,
            "rows": s.rows,
            "coalesced": s.coalesced,
            "deferred": s.deferred,
            "cpu_seconds": cpu_seconds * s.sent_bytes / total if total else 0.0,
            "coarse": s.coarse,
            "link": links.report(s.client, now),
        }
        for s in top(core, count)
    ]
    return {
        "subscriptions": len(core.downstream),
        "bytes": total,
        "push_cpu_seconds": cpu_seconds,
        "links": {
            "fitted": len(links.fitted),
            "cut_to_creations": links.fitted_pushes,
            "put_off": links.waited,
        },
        "top": listed,
    }


def samples(core: RelayCore) -> list[Sample]:
    """The top ``METRICS_TOP`` subscriptions' bytes, pushes and rows, for ``/metrics``."""
    found: list[Sample] = []
    for s in top(core, METRICS_TOP):
        labels = {"client": str(s.client), "sub": str(s.sub), "dataset": s.dataset}
        for name, value, help in (
            ("top_subscriber_bytes", s.sent_bytes, "Bytes pushed to one of the top subscribers."),
            ("top_subscriber_pushes", s.pushes, "Pushes to one of the top subscribers."),
            ("top_subscriber_rows", s.rows, "Rows pushed to one of the top subscribers."),
        ):
            found.append(Sample(f"relay_{name}", "gauge", help, float(value), labels))
    return found


def batches(
    timings: Iterable[Timing], pushed: Mapping[float, tuple[float, float]]
) -> dict[str, Any]:
    """``GET /v1/admin/batches``'s body: each batch the writer swapped in lately, oldest first,
    with its wall-clock times (``relay.shell.writer.Timing``) and when the first and the last
    round pushing its tick ended (``pushed_first``, ``pushed_last``; null: not pushed here)."""
    listed = []
    for timing in timings:
        first, last = pushed.get(timing.tick_time, (None, None))
        listed.append({**dataclasses.asdict(timing), "pushed_first": first, "pushed_last": last})
    return {"batches": listed}
