"""The client core: frames in, events and frames out, with no socket, task or clock."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fanout.client
from fanout.client.core import (
    ClientCore,
    Ended,
    Held,
    Moved,
    Refused,
    Updated,
    WriteRefused,
    Written,
)
from fanout.client.viewstate import Asked, SubscriptionError, ViewState
from fanout.errors import ProtocolError
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Error,
    NoUpdate,
    Publish,
    Published,
    Push,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)
from fanout.wire.options import Relevance, Tier

BOX = Box((0, 0), (1, 1))
FAILED = SubscriptionError("closed", "connection to the relay closed")


def push(sub: int, seq: int, full: bool = False, **sections: dict[str, Any]) -> Push:
    left = np.array(sections.pop("left", {}).get("id", []), dtype=np.int64)
    return Push(
        sub=sub,
        epoch=1,
        seq=seq,
        tick=seq,
        tick_time=0.0,
        full=full,
        entered=encode_columns(sections.get("entered", {})),
        updated=encode_columns(sections.get("updated", {})),
        left=encode_columns({"id": left}),
    )


def holding(core: ClientCore, asked: Asked | None = None, **options: Any) -> ViewState:
    request = core.subscribe(asked or Asked("agents", BOX), **options)
    assert core.receive(Subscribed(request.sub, "id", ["id", "x"]), 0.0) == [Held(request.sub)]
    return core.view(request.sub)


def test_a_subscription_is_a_frame_to_send_answered_by_held_or_refused() -> None:
    core = ClientCore()
    asked = Asked("agents", BOX, rate=5.0, priority=2, mode="every")
    request = core.subscribe(asked, stay=True)
    assert request == Subscribe(1, "agents", BOX, 5.0, 2, None, "every", None, True)
    refused = core.receive(Error("redirect", "elsewhere", 1, "ws://b"), 0.0)
    assert len(refused) == 1 and isinstance(refused[0], Refused)
    assert (refused[0].error.code, refused[0].error.location) == ("redirect", "ws://b")
    assert core.views == []
    with pytest.raises(ProtocolError, match="unexpected frame"):  # nothing asks any more
        core.receive(Subscribed(1, "id", ["id"]), 0.0)


def test_frames_arrive_as_bytes_too() -> None:
    core = ClientCore()
    state = holding(core)
    data = codec.encode(push(state.sub, 0, full=True, entered={"id": [4], "x": [0.4]}))
    (event,) = core.receive_data(data, 7.0)
    assert isinstance(event, Updated) and event.update.received_at == 7.0
    assert state.rows == {4: {"id": 4, "x": 0.4}}


def test_a_push_for_no_subscription_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="unexpected frame"):
        ClientCore().receive(push(9, 0, full=True), 0.0)


def test_unsubscribing_ends_the_view_once_the_relay_confirms() -> None:
    core = ClientCore()
    state = holding(core)
    assert core.unsubscribe(state) == Unsubscribe(state.sub)
    assert not state.ended
    assert core.receive(Unsubscribed(state.sub), 0.0) == [Ended(state.sub, state)]
    assert state.ended and state.error is None and core.views == []


def test_changing_the_view_replaces_what_was_asked() -> None:
    core = ClientCore()
    state = holding(core, Asked("agents", BOX, rate=4.0, priority=1))
    moved = Box((1, 1), (2, 2))
    assert core.change(state, moved) == Subscribe(state.sub, "agents", moved, 4.0, 1, None)
    assert (state.asked.view, state.asked.rate) == (moved, 4.0)
    core.change(state, BOX, rate=20.0)
    assert state.asked.rate == 20.0


def test_changing_an_every_views_view_keeps_it_every() -> None:
    core = ClientCore()
    state = holding(core, Asked("agents", BOX, mode="every"))
    moved = Box((1, 1), (2, 2))
    assert core.change(state, moved).mode == "every"
    assert state.asked.mode == "every"


def test_a_views_relevance_goes_with_its_subscribe_and_its_changes() -> None:
    core = ClientCore()
    relevance = Relevance(tiers=[Tier(20.0, 3)], priority_from="nearest")
    request = core.subscribe(Asked("agents", BOX, relevance=relevance))
    assert request.relevance == relevance
    core.receive(Subscribed(request.sub, "id", ["id", "x"]), 0.0)
    assert core.change(core.view(request.sub), Box((1, 1), (2, 2))).relevance == relevance


def test_a_resync_is_counted_and_other_errors_about_nothing_are_kept() -> None:
    core = ClientCore()
    state = holding(core)
    assert core.receive(Error("resync", "gone from the log", state.sub), 0.0) == []
    assert state.resyncs == 1
    assert core.receive(Error("bad_frame", "what?"), 0.0) == []
    assert [e.code for e in core.errors] == ["bad_frame"]


@pytest.mark.parametrize("follows", [False, True])
def test_a_redirect_of_a_held_view_ends_it_or_hands_it_over(follows: bool) -> None:
    core = ClientCore()
    core.follows_moves = follows
    state = holding(core)
    (event,) = core.receive(Error("redirect", "moved", state.sub, "ws://b"), 0.0)
    if follows:
        assert event == Moved(state.sub, state, "ws://b")
        assert not state.ended
    else:
        assert event == Ended(state.sub, state)
        assert state.error is not None and state.error.location == "ws://b"
    assert core.views == []


def test_writes_are_answered_by_offsets_or_refused() -> None:
    core = ClientCore()
    request = core.publish("orders", [{"id": 1, "qty": 2}], [7], key="id")
    assert isinstance(request, Publish)
    assert decode_columns(request.deletes)["id"].tolist() == [7]
    assert core.receive(Published(request.req, 10, 11), 0.0) == [Written(request.req, 10, 11)]
    second = core.publish("orders", [{"id": 2, "qty": 1}])
    (refused,) = core.receive(Error("unavailable", "no publisher", second.req), 0.0)
    assert isinstance(refused, WriteRefused) and refused.error.code == "unavailable"
    with pytest.raises(ValueError, match="key column"):
        core.publish("orders", [], [1])
    with pytest.raises(ValueError, match="same columns"):
        core.publish("orders", [{"id": 1}, {"qty": 1}])


def test_a_written_none_is_a_null_as_the_publishers_producer_sends_it() -> None:
    request = ClientCore().publish("orders", [{"id": 1, "qty": None}, {"id": 2, "qty": 3}])
    qty = decode_columns(request.upserts)["qty"]
    assert np.ma.getmaskarray(qty).tolist() == [True, False] and qty[1] == 3


def test_a_failed_connection_ends_views_refuses_requests_and_every_later_one() -> None:
    core = ClientCore()
    state = holding(core)
    asking = core.subscribe(Asked("agents", BOX))
    writing = core.publish("orders", [{"id": 1}])
    events = core.fail(FAILED)
    assert events == [
        Ended(state.sub, state),
        Refused(asking.sub, FAILED),
        WriteRefused(writing.req, FAILED),
    ]
    assert state.error is FAILED and core.views == [state]  # still listed
    assert core.fail(FAILED) == []  # ended once
    for request in (
        lambda: core.subscribe(Asked("agents", BOX)),
        lambda: core.unsubscribe(state),
        lambda: core.change(state, BOX),
        lambda: core.publish("orders", [{"id": 1}]),
    ):
        with pytest.raises(SubscriptionError, match="closed"):
            request()


def test_a_resumed_view_continues_with_the_rows_and_the_updates_not_yet_yielded() -> None:
    old_core = ClientCore()
    old = holding(old_core, Asked("agents", BOX, mode="every"))
    for seq in range(3):
        old_core.receive(push(old.sub, seq, full=seq == 0, entered={"id": [seq], "x": [0.0]}), 0)
    old.pending.popleft()  # the program yielded seq 0
    core = ClientCore()
    request = core.subscribe(Asked("agents", BOX, mode="every"), resume=old)
    assert request.resume is not None and request.resume.seq == 2
    core.receive(Subscribed(request.sub, "id", ["id", "x"]), 0.0)
    new = core.view(request.sub)
    assert new.rows == old.rows and new.seq == 2
    assert [u.seq for u in new.pending] == [1, 2] and not old.pending
    with pytest.raises(ValueError, match="resume takes an 'every' view"):
        core.subscribe(Asked("agents", BOX), resume=old)


def test_a_view_moved_here_stays_the_same_state_under_a_new_id() -> None:
    old_core = ClientCore()
    old_core.follows_moves = True
    state = holding(old_core)
    old_core.receive(push(state.sub, 0, full=True, entered={"id": [1], "x": [0.1]}), 0.0)
    assert old_core.receive(Error("redirect", "moved", state.sub, "ws://b"), 0.0) == [
        Moved(state.sub, state, "ws://b")
    ]
    core = ClientCore()
    core.subscribe(Asked("other", BOX))  # ids differ between connections
    request = core.subscribe(state.asked, stay=True, into=state)
    core.receive(Subscribed(request.sub, "id", ["id", "x", "y"]), 0.0)
    assert core.view(request.sub) is state
    assert (state.sub, state.moves, state.columns) == (2, 1, ["id", "x", "y"])
    assert state.rows == {1: {"id": 1, "x": 0.1}}


def test_a_withdrawn_request_is_forgotten() -> None:
    core = ClientCore()
    request = core.subscribe(Asked("agents", BOX))
    core.withdraw(request.sub)
    assert core.fail(FAILED) == []


@st.composite
def changes(draw: st.DrawFn) -> list[tuple[bool, list[int], list[int], list[int]]]:
    """Pushes as (full, entered keys, updated keys, left keys) over a few keys."""
    keys = st.lists(st.integers(0, 9), unique=True, max_size=5)
    return draw(st.lists(st.tuples(st.booleans(), keys, keys, keys), max_size=12))


@given(changes(), st.integers(1, 4))
def test_rows_are_the_pushes_applied_in_order_and_the_buffer_is_bounded(
    script: list[tuple[bool, list[int], list[int], list[int]]], buffer: int
) -> None:
    core = ClientCore(buffer)
    state = holding(core)
    oracle: dict[int, float] = {}
    for seq, (full, entered, updated, left) in enumerate(script):
        sections = {
            "entered": {"id": entered, "x": [float(seq)] * len(entered)} if entered else {},
            "updated": {"id": updated, "x": [-float(seq)] * len(updated)} if updated else {},
            "left": {"id": left},
        }
        core.receive(push(state.sub, seq, full, **sections), 0.0)
        if full:
            oracle.clear()
        for key in left:
            oracle.pop(key, None)
        oracle |= dict.fromkeys(entered, float(seq)) | dict.fromkeys(updated, -float(seq))
        assert {key: row["x"] for key, row in state.rows.items()} == oracle
        assert len(state.pending) <= buffer
        assert state.dropped + len(state.pending) == state.updates == seq + 1


def test_a_no_update_keeps_the_rows() -> None:
    core = ClientCore()
    state = holding(core)
    core.receive(push(state.sub, 0, full=True, entered={"id": [1], "x": [0.5]}), 0.0)
    core.receive(NoUpdate(state.sub, 1, 1, 9), 0.0)
    assert state.rows == {1: {"id": 1, "x": 0.5}} and (state.seq, state.tick) == (1, 9)


@pytest.mark.parametrize("module", ["core", "viewstate"])
def test_the_core_does_no_io(module: str) -> None:
    path = Path(fanout.client.__file__).parent / f"{module}.py"
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    io = {"asyncio", "socket", "selectors", "threading", "time", "websockets"}
    assert {name.split(".")[0] for name in imported} & io == set()
    assert not any(
        name.startswith(("fanout.connection", "fanout.client.subscriber")) for name in imported
    )
