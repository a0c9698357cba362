"""The relay's admin answers: a live EXPLAIN, and what each subscriber costs the relay.

Per-subscriber accounting is kept on the subscriptions by the core as pushes go out (pushes,
bytes, rows, ticks coalesced: ``relay.core.lifecycle.pushed``); the relay's CPU time spent in
rounds of pushes (``relay.shell.pump``) is attributed to them by their share of the bytes pushed
— nothing is timed per push. ``GET /v1/admin/subscribers`` lists the top ones; ``/metrics``
carries the top ``METRICS_TOP`` by bytes (bounded label cardinality). ``GET /v1/admin/batches``
lists the last batches' wall-clock times through the relay (``batches``). With workers, the
leader merges its own answer with each worker's (``merged_*``): the relay's, whichever worker a
request lands on. docs/http.md, "Admin".
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Mapping, Sequence
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


#: Fitted links a merged EXPLAIN lists at most (as ``relay.core.links.Links.fitting``).
MOST_LINKS = 20


def merged_subscribers(
    own: Mapping[str, Any], workers: Mapping[int, Mapping[str, Any]], count: int
) -> dict[str, Any]:
    """The relay's ``/v1/admin/subscribers`` from the leader's answer (``own``: its MQTT
    listener's subscriptions) and each worker's by its number: totals summed, the top
    ``count`` of them all, each with its ``worker`` (0: the leader; clients are numbered per
    process)."""
    every = [(0, own), *sorted(workers.items())]
    listed = [{**entry, "worker": index} for index, body in every for entry in body["top"]]
    links = {name: sum(body["links"][name] for _, body in every) for name in own["links"]}
    return {
        "subscriptions": sum(body["subscriptions"] for _, body in every),
        "bytes": sum(body["bytes"] for _, body in every),
        "push_cpu_seconds": sum(body["push_cpu_seconds"] for _, body in every),
        "links": links,
        "top": heapq.nlargest(count, listed, key=lambda entry: entry["bytes"]),
    }


def merged_batches(
    own: Mapping[str, Any], workers: Mapping[int, Mapping[str, Any]]
) -> dict[str, Any]:
    """The relay's ``/v1/admin/batches``: each batch the leader swapped in (its ``read``,
    ``written``, ``swapped``), with when the first and the last worker that had it swapped it
    in (``workers_swapped_first``, ``_last``; null: none yet) and the first and last rounds
    pushing its tick on any process (``pushed_first``, ``pushed_last``)."""
    theirs: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for body in workers.values():
        for batch in body["batches"]:
            theirs.setdefault((batch["dataset"], batch["seq"]), []).append(batch)
    listed = []
    for batch in own["batches"]:
        found = theirs.get((batch["dataset"], batch["seq"]), [])
        swapped = [w["swapped"] for w in found]
        firsts = _known([batch["pushed_first"], *(w["pushed_first"] for w in found)])
        lasts = _known([batch["pushed_last"], *(w["pushed_last"] for w in found)])
        listed.append(
            {
                **batch,
                "workers_swapped_first": min(swapped, default=None),
                "workers_swapped_last": max(swapped, default=None),
                "pushed_first": min(firsts, default=None),
                "pushed_last": max(lasts, default=None),
            }
        )
    return {"batches": listed}


def merged_explain(
    own: Mapping[str, Any], workers: Mapping[int, Mapping[str, Any]]
) -> dict[str, Any]:
    """The relay's live EXPLAIN: the leader's (what the relay holds of the publisher, what it
    would acquire upstream, the cost), the links of every process (``links`` summed, up to
    ``MOST_LINKS`` fitted ones, each with its ``worker``), and each worker's own coverage
    (``workers``: what it holds of the leader's, whether a subscriber landing on it would be
    served now, what it would ask the leader for)."""
    every = [(0, own), *sorted(workers.items())]
    found = [(index, body["links"]) for index, body in every if body["links"] is not None]
    links = None
    if found:
        fitted = [{**link, "worker": i} for i, body in found for link in body["fitted_links"]]
        links = {
            "needs_bytes_per_second": found[0][1]["needs_bytes_per_second"],
            "probed": sum(body["probed"] for _, body in found),
            "fitted": sum(body["fitted"] for _, body in found),
            "fitted_links": fitted[:MOST_LINKS],
        }
    coverage = ("held", "covered_by", "covered", "residual")
    each = [
        {"worker": index, **{name: body[name] for name in coverage}}
        for index, body in sorted(workers.items())
    ]
    return {**own, "links": links, "workers": each}


def _known(times: Sequence[float | None]) -> list[float]:
    return [at for at in times if at is not None]
