"""A subscription's lifecycle (relay/core/lifecycle.py): the transition rules, and the phases a real
conversation with the core moves a subscription through."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.relay.core.lifecycle import TRANSITIONS, Event, LifecycleError, Phase, advance
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.views import Box
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Acquire, Batch, Catalog, DatasetInfo, Subscribe, Unsubscribe

INFO = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
CLIENT = 1


@given(st.lists(st.sampled_from(list(Event)), max_size=30))
def test_every_event_leads_to_its_phase_until_the_end_and_none_after(events: list[Event]) -> None:
    phase = Phase.PENDING
    ended = False
    for event in events:
        if ended:
            with pytest.raises(LifecycleError, match=event.value):
                advance(phase, event)
            continue
        phase = advance(phase, event)
        assert phase is TRANSITIONS[event]  # the table, from any phase but the last
        ended = event is Event.END
    assert (phase is Phase.ENDED) == ended


def test_the_table_reaches_every_phase() -> None:
    assert set(TRANSITIONS.values()) == set(Phase)


def snapshot(prim: int, seq: int = 0) -> Batch:
    rows = {"id": np.array([1, 2]), "x": np.array([1.0, 2.0]), "y": np.array([1.0, 2.0])}
    return Batch(
        "agents", 1, seq, seq, 0.0, encode_columns(rows), encode_columns({"id": []}), [prim]
    )


def test_a_conversation_moves_a_subscription_through_its_phases() -> None:
    core = RelayCore(Policy(widen="exact", grace=0.0))
    core.on_catalog(Catalog([INFO]))
    core.on_upstream_connected()
    sends = core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1000.0))
    subscription = core.downstream.get((CLIENT, 1))
    assert subscription is not None and subscription.phase is Phase.PENDING
    (acquire,) = [s.frame for s in sends if s.to == UPSTREAM]
    assert isinstance(acquire, Acquire)

    assert core.pushes(1.0, lambda client: True) == []
    assert subscription.phase is Phase.WAITING  # its snapshot has not come

    core.on_batch(snapshot(acquire.prim))
    assert core.pushes(2.0, lambda client: False) == []
    assert subscription.phase is Phase.BLOCKED  # its connection is still writing
    assert core.on_writable(CLIENT)

    (push,) = core.pushes(3.0, lambda client: True)
    assert push.to == CLIENT and subscription.phase is Phase.LIVE and subscription.pushes == 1

    core.on_unsubscribe(CLIENT, Unsubscribe(1))
    assert subscription.phase is Phase.ENDED and core.downstream.get((CLIENT, 1)) is None
    with pytest.raises(LifecycleError):
        core.lifecycle.pushed(subscription, 4.0)
