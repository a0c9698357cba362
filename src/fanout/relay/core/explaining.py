"""EXPLAIN against a live relay, sans I/O: what it holds of a dataset, what a view is covered by
there, what it would acquire for it, which rules narrowed it, and what it would cost.

Read-only: the residual is the kind's dry run of the planner (``DatasetKind.plan``), nothing is
acquired; the view is narrowed as a subscriber holding ``rules`` would be (``relay.core.rules``).
The cost is estimated from the rows inside the view now: a full push's bytes from encoding a
sample of them, at most ``rate`` pushes a second, and what the links fitted to their drain
rate would get of it (``relay.core.links``). Asked for by ``GET /v1/admin/explain``
(``fanout explain --relay``); what each field means: docs/http.md, "Admin".
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from fanout.errors import InvalidView
from fanout.relay.core.downstream import Asked, Subscription
from fanout.relay.core.links import Links
from fanout.relay.core.rules import Rules, effective
from fanout.relay.core.transforms import Shape
from fanout.relay.core.upstream import Primitive
from fanout.relay.data.nulls import masked
from fanout.relay.kinds import DatasetKind, Parts
from fanout.views import View, covers, registry, residual
from fanout.views.region import Relative
from fanout.views.text import to_text
from fanout.wire.columns import encode_columns

#: Rows encoded to estimate a push's bytes per row.
SAMPLE = 256


def explain(
    parts: Parts,
    dataset: str,
    view: View,
    rules: Rules | None,
    rate: float,
    *,
    links: tuple[Links, float] | None = None,
) -> dict[str, Any]:
    """The live EXPLAIN of ``view`` of ``dataset`` for a subscriber with ``rules`` (None: no
    rules claim) asking ``rate`` pushes a second, as plain data; with the relay's ``links``
    and the time, what links fitted to their drain rate would get of it (``Links.fitting``).

    Raises:
        InvalidView: an unknown dataset, a relative view, or one the dataset does not take.
        Unauthorized: the rules refuse the view (``forbidden``).
    """
    kind, state = parts.kinds.get(dataset), parts.datasets.get(dataset)
    if kind is None or state is None:
        known = ", ".join(sorted(parts.kinds)) or "none yet"
        raise InvalidView(f"unknown dataset {dataset!r} (known: {known})")
    if isinstance(view, Relative):
        raise InvalidView("explain takes absolute views: a relative view moves with its entity")
    language = registry.language(state.info.index)
    served = effective(view, dataset, language, rules)
    needs = kind.needs(served)
    read = sorted({name for name, _ in needs})
    held = [prim for name in read for prim in parts.upstream.of(name)]
    covering = [p for p in held if any(_meets(p, name, need) for name, need in needs)]
    ready: dict[str, list[View]] = {}
    for prim in held:
        if prim.ready:
            ready.setdefault(prim.dataset, []).append(prim.view)
    rows = sum(
        int(parts.kinds[name].holds([need], _active(parts, name)).sum()) for name, need in needs
    )
    per_push = _bytes_per_row(parts, needs) * rows
    return {
        "dataset": dataset,
        "view": to_text(view),
        "rules": None
        if rules is None
        else {name: list(rules[name]) for name in read if name in rules},
        "narrowed": served != view,
        "effective_view": to_text(served),
        "held": [_primitive(p) for p in held],
        "covered_by": [p.prim for p in covering],
        "covered": all(covers(ready.get(name, []), need) for name, need in needs),
        "residual": [
            {"dataset": name, "view": to_text(piece)} for name, piece in kind.plan(served)
        ],
        "cost": {
            "rows": rows,
            "bytes_per_push": per_push,
            "pushes_per_second": rate,
            "bytes_per_second": per_push * rate,
        },
        "links": None if links is None else links[0].fitting(per_push, rate, links[1]),
        "live_writes": _live(kind, dataset, served, rate),
    }


def _live(kind: DatasetKind, dataset: str, view: View, rate: float) -> bool:
    """Whether a ``latest`` subscription of the view is shown writes at once (its kind gives it
    a lens: ``relay.core.livepath``), or takes the confirmed path alone."""
    probe = Subscription(0, 0, Asked(dataset, view, rate, Shape(())))
    return kind.lens(probe) is not None


def _meets(prim: Primitive, name: str, need: View) -> bool:
    """Whether a held primitive holds part of a need (the need without it is smaller)."""
    return prim.dataset == name and residual([prim.view], need) != [need]


def _active(parts: Parts, name: str) -> dict[str, Any]:
    return parts.datasets[name].buffer.active.columns


def _bytes_per_row(parts: Parts, needs: list[tuple[str, View]]) -> int:
    """A full push's bytes per row, from encoding a sample of the rows inside the needs."""
    for name, need in needs:
        rows = _active(parts, name)
        inside = np.flatnonzero(parts.kinds[name].holds([need], rows))[:SAMPLE]
        if len(inside):
            sample = {column: np.asarray(values)[inside] for column, values in rows.items()}
            encoded = msgspec.msgpack.encode(encode_columns(masked(sample)))
            return -(-len(encoded) // len(inside))
    return 0


def _primitive(prim: Primitive) -> dict[str, Any]:
    return {
        "prim": prim.prim,
        "dataset": prim.dataset,
        "view": to_text(prim.view),
        "ready": prim.ready,
    }
