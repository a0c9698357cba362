"""Rounds of pushes in whole conversations (relay/core/serving.py): transforms per subscriber,
shared bodies, one state per round, rounds stopped early or past their deadline, priorities
and a busy subscriber's coalesced pushes."""

from __future__ import annotations

import numpy as np
from tests.relay.core.conversations import CLIENT, batch, keys, ready_relay, relay, rows, served

from fanout.relay.core.relaycore import RelayCore, Send
from fanout.views import Box, Sphere
from fanout.wire.columns import decode_columns
from fanout.wire.messages import Error, Push, Subscribe, Subscribed, Transform


def test_a_projection_sends_only_the_columns_asked_for() -> None:
    core = ready_relay(k1=(1, 2))
    request = Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(columns=["y"]))
    (reply,) = core.on_subscribe(2, request)
    assert reply.frame == Subscribed(1, "id", ["id", "y"])
    ((_, push),) = served(core, 1.0)
    assert isinstance(push, Push)
    assert decode_columns(push.entered).keys() == {"id", "y"}


def test_an_unknown_column_is_refused_at_subscribe_time() -> None:
    core = relay()
    request = Subscribe(1, "agents", Box((0, 0), (1, 1)), transform=Transform(columns=["z"]))
    (send,) = core.on_subscribe(CLIENT, request)
    assert isinstance(send.frame, Error)
    assert (send.frame.code, send.frame.ref) == ("invalid_transform", 1)
    assert len(core.downstream) == 0


def test_a_subscriber_without_floating_point_gets_fixed_point() -> None:
    core = ready_relay(k1=(1.5, 2.25))
    core.on_connect(2, ["fixed"])
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    ((_, push),) = served(core, 1.0)
    entered = decode_columns(push.entered)  # type: ignore[attr-defined]
    assert entered["x"].dtype == np.int64
    assert entered["x"].tolist() == [1.5 * 1024]
    assert entered["y"].tolist() == [2.25 * 1024]


def test_coordinates_relative_to_an_entity_follow_it() -> None:
    core = ready_relay(k1=(1, 1), k2=(5, 5))
    core.on_subscribe(
        2, Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(relative_to=2))
    )
    ((_, first),) = served(core, 1.0)
    assert decode_columns(first.entered)["x"].tolist() == [-4.0, 0.0]  # type: ignore[attr-defined]
    core.on_batch(batch(1, rows(k2=(6, 5))))  # only the entity moves
    ((_, second),) = served(core, 2.0)
    assert keys(second.updated) == [1, 2]  # type: ignore[attr-defined]
    assert decode_columns(second.updated)["x"].tolist() == [-5.0, 0.0]  # type: ignore[attr-defined]


def test_an_entity_that_leaves_the_relay_ends_the_subscription_with_an_error() -> None:
    core = ready_relay(k1=(1, 1), k2=(5, 5))
    core.on_subscribe(
        2, Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(relative_to=2))
    )
    served(core, 1.0)
    core.on_batch(batch(1, deletes=[2]))
    ((to, error),) = served(core, 2.0)
    assert isinstance(error, Error)
    assert (to, error.code, error.ref) == (2, "entity_not_held", 1)
    assert len(core.downstream) == 0
    assert core.stats()["ended_entity_not_held"] == 1


def test_identical_views_share_one_encoded_body() -> None:
    core = ready_relay(k1=(1, 1), k2=(2, 2))
    view = Box((0, 0), (10, 10))
    for client in (2, 3, 4):
        core.on_subscribe(client, Subscribe(1, "agents", view))
    core.on_subscribe(5, Subscribe(1, "agents", view, transform=Transform(precision="float32")))
    sends = core.pushes(1.0, lambda client: True)
    by_client = {s.to: s.frame for s in sends}
    assert by_client[2] == by_client[3] == by_client[4]  # the same bytes
    assert by_client[5] != by_client[2]
    stats = core.stats()
    assert (stats["bodies_cut"], stats["bodies_shared"]) == (2, 2)
    core.on_batch(batch(1, rows(k1=(3, 3))))
    core.pushes(2.0, lambda client: True)
    assert core.stats()["bodies_shared"] == 4  # still in step: shared again


def test_every_push_of_a_round_is_cut_from_one_state() -> None:
    core = ready_relay(k1=(1, 1))
    for client in (2, 3):
        core.on_subscribe(client, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    round_ = core.serve(1.0, lambda client: True)
    first = next(round_).message()
    core.on_batch(batch(1, rows(k1=(2, 2))))  # arrives mid-round: into the inert buffer
    second = next(round_).message()
    assert isinstance(first, Push) and isinstance(second, Push)
    assert first.seq == second.seq == 0
    assert decode_columns(second.entered)["x"].tolist() == [1.0]
    assert [s.message().seq for s in core.pushes(2.0, lambda client: True)] == [1, 1]  # type: ignore[attr-defined]


def test_a_round_stopped_early_leaves_the_rest_for_the_next() -> None:
    core = ready_relay(k1=(1, 1))
    for client in range(2, 12):
        core.on_subscribe(client, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    round_ = core.serve(1.0, lambda client: True)
    firsts = [next(round_).to for _ in range(3)]
    round_.close()  # the time budget ran out
    assert core.next_wakeup(1.0) == 1.0  # more is due right now
    rest = [s.to for s in core.pushes(1.0, lambda client: True)]
    assert sorted(firsts + rest) == list(range(2, 12))


def test_a_round_past_its_deadline_starts_no_more_pushes_and_keeps_their_order() -> None:
    core = ready_relay(k1=(1, 1))
    for client, priority in ((2, 0), (3, 2), (4, 1)):
        request = Subscribe(1, "agents", Sphere((5, 5), 5), rate=1000.0, priority=priority)
        core.on_subscribe(client, request)
    late = [s.to for s in core.serve(1.0, lambda client: True, lambda: True)]
    assert late == [3]  # past the deadline already: the first push only, then the round ends
    assert core.next_wakeup(1.0) == 1.0
    assert [s.to for s in core.pushes(1.0, lambda client: True)] == [4, 2]


def test_a_connection_gets_its_highest_priority_subscription_first() -> None:
    core = ready_relay(k1=(1, 1))
    for sub, priority in ((1, 0), (2, 5), (3, 1)):
        request = Subscribe(sub, "agents", Box((0, 0), (10, 10)), rate=1000.0, priority=priority)
        core.on_subscribe(2, request)
    order = []
    for step in range(3):
        # the connection takes one push, then is busy until it has written it
        (send,) = _one(core, 1.0 + step)
        order.append(send.message().sub)  # type: ignore[attr-defined]
        core.on_writable(2)
    assert order == [2, 3, 1]


def _one(core: RelayCore, now: float) -> list[Send]:
    busy = False

    def idle(client: int) -> bool:
        return not busy

    sends = []
    for send in core.serve(now, idle):
        sends.append(send)
        busy = True
    return sends


def test_a_busy_subscriber_gets_the_latest_state_when_it_can_take_it() -> None:
    core = ready_relay(k1=(1, 1))
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1000.0))
    served(core, 1.0)
    for seq in range(1, 5):
        core.on_batch(batch(seq, rows(k1=(1 + seq, 1))))
        assert core.pushes(1.0 + seq, lambda client: False) == []  # still writing
    core.on_writable(2)
    ((_, push),) = served(core, 6.0)
    assert push.seq == 4  # type: ignore[attr-defined]
    assert decode_columns(push.updated)["x"].tolist() == [5.0]  # type: ignore[attr-defined]
    subscription = core.downstream.get((2, 1))
    assert subscription is not None
    assert subscription.coalesced == 3  # ticks 1-3 were folded into the push of tick 4
    assert subscription.deferred >= 1


def test_a_changed_transform_sends_everything_again() -> None:
    core = ready_relay(k1=(1, 1))
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    served(core, 1.0)
    core.on_subscribe(
        2, Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(precision="float32"))
    )
    ((_, push),) = served(core, 2.0)
    assert push.full  # type: ignore[attr-defined]
    assert decode_columns(push.entered)["x"].dtype == np.float32  # type: ignore[attr-defined]
