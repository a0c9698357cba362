"""Helpers for whole conversations with a relay's core over one 2-D dataset (``agents``), sans
I/O: a relay connected upstream, batches, and the frames it sends."""

from __future__ import annotations

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.testing import batches as kit
from fanout.testing.batches import rows
from fanout.testing.catalog import AGENTS
from fanout.testing.relaycore import ready_core
from fanout.views import Box
from fanout.wire.columns import decode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    NoUpdate,
    Push,
    Subscribe,
    Unsubscribe,
)

INFO = AGENTS
CLIENT = 1


def relay(policy: Policy | None = None) -> RelayCore:
    return ready_core(policy=policy)


def batch(
    seq: int,
    upserts: dict | None = None,
    deletes: list[int] | None = None,
    snapshots: list[int] | None = None,
    epoch: int = 1,
    *,
    tick_time: float | None = None,
) -> Batch:
    """Batch ``seq``, ticked at ``tick_time`` (by default ``seq`` seconds)."""
    return kit.batch(
        seq,
        upserts,
        deletes or (),
        epoch=epoch,
        tick=10 * seq,
        tick_time=float(seq) if tick_time is None else tick_time,
        snapshots=snapshots or (),
    )


def frames(sends: list[Send], to: int) -> list[object]:
    return [s.frame for s in sends if s.to == to]


def subscribe(core: RelayCore, view: object, sub: int = 1) -> list[Acquire]:
    sends = core.on_subscribe(CLIENT, Subscribe(sub, "agents", view, rate=1000.0))  # type: ignore[arg-type]
    acquires = frames(sends, UPSTREAM)
    assert all(isinstance(a, Acquire) for a in acquires)
    return acquires  # type: ignore[return-value]


def pushes(core: RelayCore, now: float = 100.0) -> list[Push | NoUpdate]:
    return [s.message() for s in core.pushes(now, lambda client: True)]  # type: ignore[misc]


def keys(columns: object) -> list[int]:
    decoded = decode_columns(columns)  # type: ignore[arg-type]
    return sorted(decoded["id"].tolist()) if "id" in decoded else []


def served(core: RelayCore, now: float, idle=lambda client: True) -> list[tuple[int, object]]:
    return [(s.to, s.message()) for s in core.pushes(now, idle)]


def ready_relay(view: object = Box((0, 0), (10, 10)), **points: tuple[float, float]) -> RelayCore:
    """A relay whose first subscription's coverage is ready, holding ``points``."""
    core = relay()
    (acquire,) = subscribe(core, view, sub=99)
    core.on_batch(batch(0, rows(**points), snapshots=[acquire.prim]))
    core.on_unsubscribe(CLIENT, Unsubscribe(99))
    return core
