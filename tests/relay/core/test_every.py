"""``every`` mode at the relay (relay/core/every.py, relay/core/relaycore.py): every seq in order,
exactly once, across lost batches, curiosity, resumes on another relay and a publisher log that
forgets.

The relay is the real ``RelayCore``; the publisher and the subscriber are fakes
(``every_peers``). The oracle is the truth itself: after each seq a subscriber received, its
rows equal the truth's rows inside its view as of that seq.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import cast

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.relay.core.every_peers import (
    KINDS,
    PATHS,
    TOPICS,
    VIEW,
    Key,
    Kind,
    Publisher,
    Row,
    Subscriber,
    relay,
    run,
    script,
)

from fanout.errors import ProtocolError
from fanout.relay.core.changesets import IDLE_WINDOW
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.relay.core.rules import restrict
from fanout.testing.relaycore import ready_core
from fanout.views import Box
from fanout.views.anyof import AnyOf
from fanout.views.topic import TopicFilter
from fanout.wire.columns import encode_columns
from fanout.wire.messages import (
    Curious,
    Error,
    Horizon,
    Knowledge,
    NoUpdate,
    Push,
    Subscribe,
    Subscribed,
    Transform,
    Unsubscribe,
    Unsubscribed,
)
from fanout.wire.options import Resume


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.info.index)
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_every_seq_arrives_once_in_order_and_matches_the_truth(kind: Kind, data) -> None:
    start = data.draw(st.dictionaries(kind.keys, kind.rows), label="start")
    steps = data.draw(script(kind), label="script")
    name, view = kind.info.name, kind.view
    publisher = Publisher(kind)
    core = kind.relay()
    subscriber = Subscriber(kind)
    publisher.take(core.on_subscribe(1, Subscribe(1, name, view, mode="every")))
    core.on_batch(publisher.step(dict(start)))
    now = 1.0
    run(core, publisher, subscriber, now)
    trimmed = False
    for action, arg in steps:
        now += 1.0
        if action == "tick":
            publisher.take(core.on_batch(publisher.step(arg)))
        elif action == "drop":
            publisher.step(arg)  # the relay never gets this batch: a gap
        elif action == "resume":
            core.on_disconnect(1)
            if arg:  # on another relay, which has never seen this stream
                core, _ = kind.relay(), publisher.reconnect()
            request = Subscribe(1, name, view, mode="every", resume=subscriber.token())
            publisher.take(core.on_subscribe(1, request))
            publisher.take(core.on_batch(publisher.step({})))
        elif action == "trim":
            publisher.oldest = max(publisher.oldest, publisher.seq - arg + 1)
            trimmed = True
        run(core, publisher, subscriber, now)
    for _ in range(2):  # the last batch, and one to carry the snapshots a gap made it ask for
        publisher.take(core.on_batch(publisher.step({})))
        run(core, publisher, subscriber, now + 1.0)
    assert subscriber.errors == []
    assert subscriber.seq == publisher.seq  # caught up
    if not trimmed:
        assert subscriber.resyncs == 0
        assert subscriber.seqs.count(-1) == 1  # one full push, then every seq once
    runs = _runs(subscriber.seqs)
    for seqs in runs:
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # contiguous, no duplicate
    for before, after in itertools.pairwise(runs):
        assert after[0] > before[-1]  # a resync never goes back in time
    assert len(runs) == subscriber.resyncs + 1


#: Under access rules: the kind, its rules, and by hand which rows the view and a rule both hold.
PLANTS = Kind(
    TOPICS.info,
    TopicFilter("plant/+/temp"),
    st.sampled_from(["plant/a/temp", "plant/b/temp", "plant/c/temp", "plant/a/rpm", "yard/a/temp"]),
    TOPICS.rows,
)
RULED = [
    (PLANTS, ["plant/a/#", "plant/b/#"], lambda key, row: key in ("plant/a/temp", "plant/b/temp")),
    (
        PATHS,
        ["/cars/c1", "/cars/c2", "/boats/.all"],
        lambda k, r: k in ("/cars/c1", "/cars/c2") and r[0] > 4,
    ),
]


@pytest.mark.parametrize(("kind", "rules", "allowed"), RULED, ids=["topic", "path"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_under_rules_meeting_several_an_every_stream_holds_exactly_what_they_grant(
    kind: Kind, rules: list[str], allowed: Callable[[Key, Row], bool], data: st.DataObject
) -> None:
    """A view meeting several rules is served any of its meets (``relay.core.rules``): after every
    seq, resumes included, the subscriber holds exactly the rows inside the view and a rule,
    decided by hand."""
    start = data.draw(st.dictionaries(kind.keys, kind.rows), label="start")
    steps = data.draw(script(kind), label="script")
    name = kind.info.name
    request = restrict(
        Subscribe(1, name, kind.view, mode="every"), {name: rules}, {name: kind.info.index}
    )
    assert isinstance(request.view, AnyOf)
    publisher, core = Publisher(kind), kind.relay()
    subscriber = Subscriber(kind, view=request.view)  # type: ignore[arg-type]  # selecting

    def granted() -> None:
        truth = publisher.states[subscriber.seq]
        assert subscriber.rows == {k: r for k, r in truth.items() if allowed(k, r)}

    publisher.take(core.on_subscribe(1, request))
    core.on_batch(publisher.step(dict(start)))
    now = 1.0
    run(core, publisher, subscriber, now)
    for action, arg in steps:
        now += 1.0
        if action in ("tick", "drop"):
            batch = publisher.step(arg)
            if action == "tick":
                publisher.take(core.on_batch(batch))
        elif action == "resume":
            core.on_disconnect(1)
            resumed = msgspec.structs.replace(request, resume=subscriber.token())
            publisher.take(core.on_subscribe(1, resumed))
            publisher.take(core.on_batch(publisher.step({})))
        run(core, publisher, subscriber, now)
        if subscriber.seq >= 0:
            granted()
    for _ in range(2):
        publisher.take(core.on_batch(publisher.step({})))
        run(core, publisher, subscriber, now + 1.0)
    assert subscriber.errors == [] and subscriber.seq == publisher.seq
    granted()


def _runs(seqs: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for seq in seqs:
        if seq == -1:
            runs.append([])
        else:
            runs[-1].append(seq)
    return runs


def test_a_subscriber_resuming_past_the_log_gets_a_resync_then_a_full_push() -> None:
    publisher = Publisher()
    core = relay()
    subscriber = Subscriber()
    publisher.take(core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every")))
    core.on_batch(publisher.step({1: (1.0, 1.0)}))
    run(core, publisher, subscriber, 1.0)
    token = subscriber.token()
    core.on_disconnect(1)
    for x in range(2, 6):
        publisher.take(core.on_batch(publisher.step({1: (float(x), 1.0)})))
    publisher.oldest = publisher.seq  # seqs 1..3 are gone from the log
    other, _ = relay(), publisher.reconnect()
    publisher.take(other.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every", resume=token)))
    publisher.take(other.on_batch(publisher.step({})))
    run(other, publisher, subscriber, 2.0)
    assert subscriber.resyncs == 1
    assert subscriber.seqs[-2:] == [-1, publisher.seq]
    assert subscriber.rows == {1: (5.0, 1.0)}


def test_a_resumed_subscription_continues_from_the_relays_window_without_asking() -> None:
    publisher = Publisher()
    core = relay()
    subscriber = Subscriber()
    publisher.take(core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every")))
    core.on_batch(publisher.step({1: (1.0, 1.0), 2: (2.0, 2.0)}))
    run(core, publisher, subscriber, 1.0)
    # a second subscriber keeps the relay's coverage while the first is away
    core.on_subscribe(2, Subscribe(1, "agents", VIEW))
    core.on_disconnect(1)
    asked: list[Curious] = []
    for x in range(2, 5):
        sends = core.on_batch(publisher.step({1: (float(x), 1.0)}))
        sends += core.pushes(float(x), lambda client: True)
        asked += [s.frame for s in sends if isinstance(s.frame, Curious)]
    token = subscriber.token()
    sends = core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every", resume=token))
    sends += core.pushes(10.0, lambda client: True)
    asked += [s.frame for s in sends if isinstance(s.frame, Curious)]
    for send in sends:
        if send.to == 1:
            subscriber.take(send.message(), publisher)
    assert asked == []
    assert subscriber.seqs == [-1, 0, 1, 2, 3]
    assert subscriber.rows == {1: (4.0, 1.0), 2: (2.0, 2.0)}


def resumed_behind(core: RelayCore, publisher: Publisher, seqs: int) -> Subscriber:
    """Client 1's ``every`` subscription, away for ``seqs`` seqs and resumed now; another
    ``every`` subscription (client 2) kept the coverage, and a full window, meanwhile."""
    subscriber = Subscriber()
    publisher.take(core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every")))
    core.on_batch(publisher.step({1: (1.0, 1.0)}))
    run(core, publisher, subscriber, 1.0)
    core.on_subscribe(2, Subscribe(1, "agents", VIEW, mode="every"))
    core.on_disconnect(1)
    for x in range(2, 2 + seqs):
        core.on_batch(publisher.step({1: (float(x % 8), 1.0)}))
        core.pushes(float(x), lambda client: True)
    core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every", resume=subscriber.token()))
    return subscriber


def test_a_gap_is_asked_upstream_once_and_counted() -> None:
    """Three batches the relay never got: it resyncs, and its ``every`` subscription asks
    upstream once for seqs 1..5 (the three lost, the batch it resynced on and the one bringing
    its new snapshot: neither is a whole change), counted in ``curiosity_asked`` and
    ``curiosity_asked_seqs`` (the tiers' integration test checks a mid relay's merging by them)."""
    publisher = Publisher()
    core = relay()
    subscriber = Subscriber()
    publisher.take(core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every")))
    core.on_batch(publisher.step({1: (1.0, 1.0)}))
    run(core, publisher, subscriber, 1.0)
    for x in range(2, 5):
        publisher.step({1: (float(x), 1.0)})  # lost on the way
    publisher.take(core.on_batch(publisher.step({1: (5.0, 1.0)})))
    publisher.take(core.on_batch(publisher.step({})))
    sends = core.pushes(2.0, lambda client: True)
    asked = [send.frame for send in sends if isinstance(send.frame, Curious)]
    assert [(ask.first, ask.last) for ask in asked] == [(1, 5)]
    stats = core.stats()
    assert (stats["curiosity_asked"], stats["curiosity_asked_seqs"]) == (1, 5)


def test_a_subscription_behind_gets_at_most_a_burst_of_seqs_a_turn() -> None:
    """A resumed subscription 10 seqs behind is sent ``every_burst`` (3) a turn, in order, so
    that a connection's queue never takes more than that from it at once."""
    publisher = Publisher()
    core = ready_core(every_burst=3)
    subscriber = resumed_behind(core, publisher, 10)
    turns = []
    for turn in range(6):
        sends = [send for send in core.pushes(20.0 + turn, lambda client: True) if send.to == 1]
        for send in sends:
            subscriber.take(send.message(), publisher)
        turns.append(len([s for s in sends if not isinstance(s.frame, Subscribed)]))
    assert turns == [3, 3, 3, 1, 0, 0]
    assert subscriber.seqs == list(range(-1, 11))  # take() checked each seq's rows too
    assert subscriber.rows == {1: (3.0, 1.0)}


def test_one_connections_every_subscriptions_share_a_turn_up_to_a_burst() -> None:
    """Three ``every`` subscriptions of one connection, each two seqs behind, are served in the
    same turn while their seqs come to fewer than ``every_burst`` (5): 2 + 2 + 1 frames, the
    connection then busy; the rest goes once it wrote them. (One subscription a turn would
    cost a round each: a thousand views moved together on a few connections.)"""
    publisher = Publisher()
    core = ready_core(every_burst=5)
    subscribers = {sub: Subscriber() for sub in (1, 2, 3)}
    for sub in subscribers:
        publisher.take(core.on_subscribe(1, Subscribe(sub, "agents", VIEW, mode="every")))
    core.on_batch(publisher.step({1: (1.0, 1.0)}))

    def deliver(sends: list[Send]) -> None:
        for send in sends:
            message = send.message()
            if send.to == 1 and not isinstance(message, Subscribed):
                subscribers[cast(Push | NoUpdate, message).sub].take(message, publisher)

    deliver(core.pushes(1.0, lambda client: True))
    for x in (2.0, 3.0):  # the connection is writing meanwhile: its subscriptions wait
        core.on_batch(publisher.step({1: (x, 1.0)}))
        assert [s for s in core.pushes(x, lambda client: False) if s.to == 1] == []
    core.on_writable(1)
    sent: list[Send] = []  # the connection is busy once sent a frame, as a socket would be
    for send in core.serve(4.0, lambda client: not any(s.to == client for s in sent)):
        sent.append(send)
    deliver(sent)
    frames = [cast(Push | NoUpdate, s.message()).sub for s in sent if s.to == 1]
    assert sorted(frames) == [1, 1, 2, 2, 3]
    core.on_writable(1)
    deliver(core.pushes(5.0, lambda client: True))
    for subscriber in subscribers.values():
        assert subscriber.seqs == [-1, 0, 1, 2]  # take() checked each seq's rows too


def test_nothing_of_a_subscription_follows_its_end_when_a_round_stopped_mid_burst() -> None:
    """A round that stopped in an ``every`` burst leaves its rest for the next round; if the
    subscription ends meanwhile (an unsubscribe, or its part moving away), the rest is dropped:
    a frame for a subscription its subscriber no longer has would be a protocol error there."""
    publisher = Publisher()
    core = relay()
    resumed_behind(core, publisher, 6)
    round_ = core.serve(20.0, lambda client: True)
    first = next(send for send in round_ if send.to == 1)  # the burst's first seq, then stop
    round_.close()
    assert isinstance(first.message(), Push)
    assert core.serving.has_unsent()  # the burst's rest waits for the next round
    assert core.on_unsubscribe(1, Unsubscribe(1)) == [Send(1, Unsubscribed(1))]
    assert [send for send in core.pushes(21.0, lambda client: True) if send.to == 1] == []


def test_every_mode_refuses_relative_coordinates_and_changes() -> None:
    core = relay()
    (error,) = core.on_subscribe(
        1, Subscribe(1, "agents", VIEW, mode="every", transform=Transform(relative_to=3))
    )
    assert isinstance(error.frame, Error) and error.frame.code == "invalid_transform"
    core.on_subscribe(1, Subscribe(2, "agents", VIEW, mode="every"))
    (error,) = core.on_subscribe(1, Subscribe(2, "agents", Box((0, 0), (5, 5)), mode="every"))
    assert isinstance(error.frame, Error) and error.frame.code == "invalid_view"
    resume = Resume(1, 0, encode_columns({"id": np.array([1])}))
    (error,) = core.on_subscribe(1, Subscribe(3, "agents", VIEW, resume=resume))
    assert isinstance(error.frame, Error) and error.frame.code == "invalid_view"
    bad = Resume(1, 0, encode_columns({"name": np.array(["a"])}))
    (error,) = core.on_subscribe(1, Subscribe(4, "agents", VIEW, mode="every", resume=bad))
    assert isinstance(error.frame, Error) and error.frame.code == "bad_request"


def test_identical_every_subscriptions_share_each_seqs_delta_and_encoding() -> None:
    publisher = Publisher()
    core = relay()
    views = {1: VIEW, 2: VIEW, 3: Box((0, 0), (5, 5))}  # client 3: another view
    clients = {client: Subscriber(view=view) for client, view in views.items()}
    for client, view in views.items():
        publisher.take(core.on_subscribe(client, Subscribe(7, "agents", view, mode="every")))
    core.on_batch(publisher.step({1: (1.0, 1.0), 2: (20.0, 1.0)}))
    run(core, publisher, clients, 1.0)
    frames: dict[int, list[Push | NoUpdate]] = {client: [] for client in clients}
    for x in range(2, 6):
        publisher.take(core.on_batch(publisher.step({1: (float(x), 1.0), 2: (x + 5.0, 1.0)})))
        for send in core.pushes(float(x), lambda client: True):
            frames[send.to].append(send.message())  # type: ignore[arg-type]
            clients[send.to].take(send.message(), publisher)  # checked against the truth
    assert frames[1] == frames[2] and len(frames[1]) == 4  # sub 7 in both: the same frames
    assert frames[3] != frames[1]
    stats = core.stats()
    assert (stats["every_steps_computed"], stats["every_steps_shared"]) == (8, 4)


def test_the_relay_tells_the_publisher_the_lowest_seq_its_subscribers_need() -> None:
    publisher = Publisher()
    core = relay()
    subscriber = Subscriber()
    publisher.take(core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every")))
    core.on_batch(publisher.step({1: (1.0, 1.0)}))
    run(core, publisher, subscriber, 1.0)
    horizons = [s.frame for s in core.housekeeping(2.0) if isinstance(s.frame, Horizon)]
    assert horizons == [Horizon("agents", 1, 1)]
    assert [s for s in core.housekeeping(3.0) if isinstance(s.frame, Horizon)] == []  # unchanged
    core.on_batch(publisher.step({1: (2.0, 1.0)}))
    run(core, publisher, subscriber, 4.0)
    horizons = [s.frame for s in core.housekeeping(5.0) if isinstance(s.frame, Horizon)]
    assert horizons == [Horizon("agents", 1, 2)]
    core.on_disconnect(1)
    horizons = [s.frame for s in core.housekeeping(6.0) if isinstance(s.frame, Horizon)]
    assert horizons == [Horizon("agents", 1, -1)]  # released


def test_a_dataset_no_every_subscription_reads_keeps_a_short_window() -> None:
    publisher = Publisher()
    core = relay()
    publisher.take(core.on_subscribe(1, Subscribe(1, "agents", VIEW)))  # mode latest
    for x in range(20):
        publisher.take(core.on_batch(publisher.step({1: (float(x % 10), 1.0)})))
    history = core.histories["agents"]
    kept = [seq for seq in range(20) if history.get(seq, -1) is not None]
    assert kept == list(range(20 - IDLE_WINDOW, 20))


def test_knowledge_deleting_rows_without_the_key_column_is_a_protocol_error() -> None:
    core = relay()
    bad = Knowledge(7, "agents", 1, 3, 30, 3.0, encode_columns({}), encode_columns({"x": [1.0]}))
    with pytest.raises(ProtocolError, match=r"^knowledge 3 deletes: 1 rows without the key"):
        core.on_knowledge(bad)
