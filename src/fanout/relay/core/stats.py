"""The relay core's counters, read from its parts (``RelayCore.stats``).

Every value here has a name and an explanation in ``relay.shell.samples`` (a test holds them to it),
which ``GET /metrics`` exposes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fanout.relay import kinds
from fanout.relay.data.engine import engine_stats

if TYPE_CHECKING:
    from fanout.relay.core.relaycore import RelayCore


def core_stats(core: RelayCore) -> dict[str, float]:
    """Counters of ``core``'s work, for logs and benchmarks (every buffer bounded and its
    counters visible)."""
    buffers = [state.buffer.counters for state in core.datasets.values()]
    subscriptions = list(core.downstream)
    by_kind: dict[str, float] = dict.fromkeys(kinds.stat_names(), 0)
    for kind in core.parts.kinds.values():
        for name, value in kind.stats().items():
            by_kind[name] += value
    return {
        "subscriptions": len(subscriptions),
        "primitives": len(core.upstream),
        "primitives_acquired": core.upstream.added,
        "rows": sum(len(state.buffer.active) for state in core.datasets.values()),
        "batches": core.counters.batches,
        "swaps": sum(b.swaps for b in buffers),
        "catch_up_replays": sum(b.replays for b in buffers),
        "catch_up_copies": sum(b.copies for b in buffers),
        "pushes": core.counters.pushes,
        "no_updates": core.counters.no_updates,
        "curiosity_asked": core.counters.curiosity_asked,
        "curiosity_asked_seqs": core.counters.curiosity_asked_seqs,
        "bodies_cut": core.parts.encodings.cut,
        "bodies_shared": core.parts.encodings.shared,
        "every_steps_computed": core.every.steps.computed,
        "every_steps_shared": core.every.steps.shared,
        "ticks_coalesced": sum(s.coalesced for s in subscriptions),
        "pushes_deferred": sum(s.deferred for s in subscriptions),
        "pending": core.scheduler.waiting(),
        "parked": core.scheduler.parked_count,
        "ended_entity_not_held": core.counters.ended,
        "held": len(core.holding),
        "held_refused": core.holding.refused_full + core.holding.expired_total,
        "primitives_pending": sum(1 for prim in core.upstream if not prim.ready),
        **engine_stats(core.parts.engine),
        **by_kind,
        "sql_pushes_put_off": core.serving.budgets.put_off,
        "transduced": len(core.transducing),
        "transducers_stopped": core.transducing.stopped,
        **core.serving.live.stats(),
    }
