"""One connection's session at the publisher, driven directly: no sockets, no event loop.

``tests/publisher/test_control.py`` runs the same rules through real sockets.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.publisher.protocol import (
    HELD_BACK_LIMIT,
    TRANSITIONS,
    Action,
    Close,
    Delivery,
    Forward,
    Phase,
    PublisherSession,
    Replay,
    Send,
    Start,
    Welcomed,
)
from fanout.publisher.relaytable import Registry
from fanout.testing.batches import batch
from fanout.testing.catalog import AGENTS
from fanout.views import Box, View
from fanout.wire import codec
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Catalog,
    Curious,
    Error,
    Hello,
    Horizon,
    LiveWrites,
    Publish,
    ReadState,
    Release,
    Welcome,
)

BOX = Box((0, 0), (1, 1))


def check(dataset: str, view: View) -> View:
    if dataset != "agents":
        raise InvalidView(f"unknown dataset {dataset!r}")
    return view


def new_session(registry: Registry | None = None) -> PublisherSession:
    return PublisherSession(registry or Registry(), check, lambda: [AGENTS])


def hello(role: str = "relay", **fields: object) -> bytes:
    return codec.encode(Hello(PROTOCOL_VERSION, role, **fields))  # type: ignore[arg-type]


def delivery(seq: int, dataset: str = "agents", snapshots: bool = False) -> Delivery:
    return Delivery.of(batch(seq, dataset=dataset, snapshots=[1] if snapshots else []))


def sent(data: bytes) -> tuple[str, int, bool]:
    """(dataset, seq, whether it carries snapshots) of an encoded batch."""
    frame = codec.from_publisher().decode(data)
    assert isinstance(frame, Batch)
    return frame.dataset, frame.seq, bool(frame.snapshots)


def forwarded(actions: list[Action]) -> list[int]:
    """The seqs of the live batches ``actions`` send."""
    return [sent(action.data)[1] for action in actions if isinstance(action, Forward)]


def release_all(session: PublisherSession) -> list[int]:
    """Send what was held back, until the session goes live; the seqs sent."""
    seqs = []
    while (data := session.next_held_back()) is not None:
        seqs.append(sent(data)[1])
    return seqs


def resumed(after: int, registry: Registry | None = None) -> PublisherSession:
    session = new_session(registry)
    actions = session.receive(hello(resume={"agents": (1, after)}))
    assert actions[-1] == Replay({"agents": (1, after)})
    return session


# -- handshake and roles ------------------------------------------------------------------------


def test_a_relay_is_welcomed_sent_the_catalog_and_registered() -> None:
    registry = Registry()
    session = new_session(registry)
    welcome, catalog, welcomed = session.receive(hello(name="east"))
    assert isinstance(welcome, Send) and isinstance(welcome.frame, Welcome)
    assert catalog == Send(Catalog([AGENTS]))
    assert welcomed == Welcomed(1)
    assert (session.phase, session.relay, session.name) == (Phase.LIVE, 1, "east")
    assert registry.held() == {1: ("east", 0)}


def test_a_reader_is_welcomed_but_holds_nothing_and_gets_no_batches() -> None:
    registry = Registry()
    session = new_session(registry)
    *_, welcomed = session.receive(hello("reader"))
    assert welcomed == Welcomed(None) and session.phase is Phase.SERVING
    assert registry.held() == {}
    assert session.receive(codec.encode(Acquire(1, "agents", BOX))) == [
        Send(Error("role", "only relays hold primitives"))
    ]
    read = ReadState(7, "agents", BOX, 5)
    assert session.receive(codec.encode(read)) == [Start(read)]
    assert session.receive(codec.encode(Curious(8, "agents", 1, 3, 4))) == [
        Send(Error("protocol", "curious is not accepted by the publisher"))
    ]
    assert session.offer(delivery(1)) == []


def test_a_first_frame_other_than_hello_is_refused_and_closes() -> None:
    session = new_session()
    refusal, close = session.receive(codec.encode(Acquire(1, "agents", BOX)))
    assert isinstance(refusal, Send) and isinstance(refusal.frame, Error)
    assert refusal.frame.code == "handshake"
    assert close == Close() and session.phase is Phase.CLOSED
    assert session.receive(hello()) == []  # nothing after a close


def test_a_hello_that_is_overdue_is_refused_once_and_only_before_the_welcome() -> None:
    late = new_session()
    assert late.hello_overdue(0.3) == [
        Send(Error("handshake", "no hello within 0.3 s; closing")),
        Close(),
    ]
    assert late.phase is Phase.CLOSED
    in_time = new_session()
    in_time.receive(hello())
    assert in_time.hello_overdue(0.3) == []
    assert in_time.phase is Phase.LIVE


def test_a_bad_frame_after_the_handshake_is_answered_and_the_connection_stays() -> None:
    session = new_session()
    session.receive(hello())
    (reply,) = session.receive(b"\x81\xa4type\xa7nothing")
    assert isinstance(reply, Send) and isinstance(reply.frame, Error)
    assert reply.frame.code == "protocol" and session.phase is Phase.LIVE


# -- primitives and horizons --------------------------------------------------------------------


def test_acquire_and_release_are_checked_and_recorded() -> None:
    registry = Registry()
    session = new_session(registry)
    session.receive(hello())
    (unknown,) = session.receive(codec.encode(Acquire(1, "nope", BOX)))
    assert isinstance(unknown, Send) and unknown.frame == Error(
        "invalid_view", "unknown dataset 'nope'", ref=1
    )
    assert session.receive(codec.encode(Acquire(2, "agents", BOX))) == []
    (twice,) = session.receive(codec.encode(Acquire(2, "agents", BOX)))
    assert isinstance(twice, Send) and isinstance(twice.frame, Error)
    assert twice.frame.ref == 2 and "already held" in twice.frame.message
    assert registry.plan("agents").prims == {1: {2: BOX}}
    assert session.receive(codec.encode(Release(2))) == []
    (not_held,) = session.receive(codec.encode(Release(2)))
    assert isinstance(not_held, Send) and isinstance(not_held.frame, Error)
    assert not_held.frame.ref == 2 and "not held" in not_held.frame.message
    assert registry.plan("agents").prims == {1: {}}


def test_live_writes_of_an_unknown_dataset_are_refused_and_the_relay_stays() -> None:
    registry = Registry()
    session = new_session(registry)
    session.receive(hello())
    (unknown,) = session.receive(codec.encode(LiveWrites("nope")))
    assert isinstance(unknown, Send) and unknown.frame == Error(
        "invalid_view", "unknown dataset 'nope' (serving: agents)"
    )
    assert session.phase is Phase.LIVE
    assert session.receive(codec.encode(LiveWrites("agents"))) == []
    assert len(registry.live("agents")) == 1 and registry.live("nope") == frozenset()


def test_a_relay_that_holds_too_many_primitives_is_refused_one_more() -> None:
    session = new_session(Registry(max_primitives=1))
    session.receive(hello())
    assert session.receive(codec.encode(Acquire(1, "agents", BOX))) == []
    (refused,) = session.receive(codec.encode(Acquire(2, "agents", BOX)))
    assert isinstance(refused, Send) and isinstance(refused.frame, Error)
    assert (refused.frame.code, refused.frame.ref) == ("primitive", 2)


def test_horizons_hold_the_log_until_released_and_the_end_releases_everything() -> None:
    registry = Registry()
    session = new_session(registry)
    session.receive(hello())
    session.receive(codec.encode(Acquire(1, "agents", BOX)))
    session.receive(codec.encode(Horizon("agents", 1, 12)))
    session.receive(codec.encode(Horizon("agents", 1, 15)))
    assert registry.floor() == {("agents", 1): 15}
    session.receive(codec.encode(Horizon("agents", 1, -1)))
    assert registry.floor() == {}
    session.receive(codec.encode(Horizon("agents", 1, 3)))
    session.close()
    assert registry.held() == {} and registry.floor() == {}
    assert session.phase is Phase.CLOSED


def test_requests_are_started_for_the_shell() -> None:
    session = new_session()
    session.receive(hello())
    curious = Curious(5, "agents", 1, 3, 4)
    read = ReadState(7, "agents", BOX)
    assert session.receive(codec.encode(curious)) == [Start(curious)]
    assert session.receive(codec.encode(read)) == [Start(read)]
    producer = new_session()
    producer.receive(hello("producer"))
    publish = Publish(6, "agents")
    assert producer.receive(codec.encode(publish)) == [Start(publish)]


def test_each_role_reads_or_writes_only_what_it_is_for() -> None:
    """A token grants a role: a producer's must not read the state, a reader's not publish (a
    relay's may: it forwards its subscribers' writes, checking their tokens)."""
    reader, producer = new_session(), new_session()
    reader.receive(hello("reader"))
    producer.receive(hello("producer"))
    refused = reader.receive(codec.encode(Publish(6, "agents")))
    assert refused == [Send(Error("role", "publish is for a producer, not a reader", ref=6))]
    refused = producer.receive(codec.encode(ReadState(7, "agents", BOX)))
    message = "readstate is for a relay or a reader, not a producer"
    assert refused == [Send(Error("role", message, ref=7))]


# -- live batches, resume, replay ---------------------------------------------------------------


def test_a_live_relay_gets_each_seq_once_in_order_and_snapshots_at_the_same_seq() -> None:
    session = new_session()
    session.receive(hello())
    offered = [delivery(3), delivery(4), delivery(4), delivery(4, snapshots=True), delivery(2)]
    assert [forwarded(session.offer(d)) for d in offered] == [[3], [4], [], [4], []]


def test_a_resuming_relay_gets_the_log_then_held_back_batches_without_gap_or_duplicate() -> None:
    session = resumed(after=3)
    assert session.phase is Phase.REPLAYING
    # live batches 6 (also in the log) and 7 come while the log is read
    assert session.offer(delivery(6)) == [] and session.offer(delivery(7)) == []
    replayed = session.replayed([batch(4), batch(5), batch(6)])
    assert [b.seq for b in replayed] == [4, 5, 6]
    assert release_all(session) == [7]
    assert session.phase is Phase.LIVE
    assert forwarded(session.offer(delivery(7))) == []
    assert forwarded(session.offer(delivery(8))) == [8]


def test_a_rerun_of_the_seq_a_relay_applied_is_not_sent_again_but_its_snapshots_are() -> None:
    session = resumed(after=5)
    assert session.replayed([]) == []
    assert release_all(session) == []
    assert forwarded(session.offer(delivery(5))) == []
    assert forwarded(session.offer(delivery(4, snapshots=True))) == []
    assert forwarded(session.offer(delivery(5, snapshots=True))) == [5]
    assert forwarded(session.offer(delivery(6))) == [6]


def test_a_quiet_datasets_snapshots_held_back_at_the_replays_last_seq_go_out() -> None:
    session = resumed(after=5)
    session.offer(delivery(5, snapshots=True))  # the idle snapshots, stamped with the last seq
    session.replayed([])
    assert release_all(session) == [5]


def test_a_dataset_that_cannot_be_replayed_is_told_to_resync_and_gets_every_live_batch() -> None:
    session = new_session()
    session.receive(hello(resume={"agents": (0, 3), "trucks": (1, 8)}))
    session.offer(delivery(2))
    session.offer(delivery(8, dataset="trucks"))
    session.offer(delivery(9, dataset="trucks"))
    error = session.replay_failed("agents", 3, "agents: epoch 0 is over")
    assert error == Error(
        "resync", "cannot replay agents after seq 3: agents: epoch 0 is over; resync from snapshots"
    )
    assert session.replayed([]) == []  # trucks: nothing logged after 8
    assert release_all(session) == [2, 9]


def test_a_relay_with_too_many_batches_held_back_is_closed_as_a_slow_consumer() -> None:
    registry = Registry()
    session = resumed(after=0, registry=registry)
    for seq in range(1, HELD_BACK_LIMIT + 1):
        assert session.offer(delivery(seq)) == []
    assert session.offer(delivery(HELD_BACK_LIMIT + 1)) == [
        Close(f"slow consumer: {HELD_BACK_LIMIT} batches waiting behind a replay")
    ]
    assert session.phase is Phase.CLOSED
    assert session.offer(delivery(HELD_BACK_LIMIT + 2)) == []
    assert session.replayed([batch(1)]) == []
    assert session.replay_failed("agents", 0, "gone") is None
    assert session.next_held_back() is None and session.phase is Phase.CLOSED
    session.close()
    assert registry.held() == {}


def test_nothing_leaves_the_closed_phase() -> None:
    assert {after for (before, _), after in TRANSITIONS.items() if before is Phase.CLOSED} == {
        Phase.CLOSED
    }


# -- each seq once, in order, whatever the interleaving -----------------------------------------

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.booleans()),
        st.tuples(st.just("idle snapshots"), st.just(True)),
        st.tuples(st.just("read the log"), st.just(False)),
        st.tuples(st.just("release held back"), st.just(False)),
    ),
    max_size=40,
)


@given(
    resume=st.integers(0, 6),
    logged_beyond=st.integers(0, 6),
    rerun=st.integers(0, 3),
    steps=STEPS,
)
def test_a_resuming_relay_gets_each_seq_once_and_in_order_whatever_the_interleaving(
    resume: int, logged_beyond: int, rerun: int, steps: list[tuple[str, bool]]
) -> None:
    """The publisher as the pipeline drives it: micro-batches are logged, then delivered, with
    consecutive seqs; the first after a restart may repeat logged ones (Spark re-runs the last);
    a quiet dataset's snapshots are stamped with the last seq. The relay resumes after
    ``resume``; the log read for its replay holds everything logged until then.

    Oracle: the relay ends with every seq after ``resume`` that was logged or delivered, each
    seq once and in order; a batch repeats the seq before it only to carry snapshots.
    """
    logged = resume + logged_beyond
    next_seq = max(0, logged + 1 - rerun)
    delivered: list[int] = []
    session = resumed(after=resume)
    received: list[tuple[int, bool]] = []
    read = False

    def take(actions: list[Action]) -> None:
        received.extend(sent(a.data)[1:] for a in actions if isinstance(a, Forward))

    def read_the_log() -> None:
        for replayed in session.replayed([batch(seq) for seq in range(resume + 1, logged + 1)]):
            received.append((replayed.seq, bool(replayed.snapshots)))

    for step, snapshots in steps:
        if step == "deliver":
            logged = max(logged, next_seq)  # logged before it is handed over
            delivered.append(next_seq)
            take(session.offer(delivery(next_seq, snapshots=snapshots)))
            next_seq += 1
        elif step == "idle snapshots" and delivered:
            take(session.offer(delivery(delivered[-1], snapshots=True)))
        elif step == "read the log" and not read:
            read_the_log()
            read = True
        elif step == "release held back" and read and session.phase is Phase.REPLAYING:
            data = session.next_held_back()
            if data is not None:
                received.append(sent(data)[1:])
    if not read:
        read_the_log()
    while (data := session.next_held_back()) is not None:
        received.append(sent(data)[1:])
    assert session.phase is Phase.LIVE

    end = max([logged, *delivered])
    assert sorted({seq for seq, _ in received if seq > resume}) == list(range(resume + 1, end + 1))
    previous = resume
    for seq, carries_snapshots in received:
        assert seq >= previous, f"seq {seq} after {previous}: {received}"
        assert seq > previous or carries_snapshots, f"seq {seq} twice: {received}"
        previous = seq


@pytest.mark.parametrize("role", ["reader", "producer"])
def test_readers_and_producers_are_never_registered_as_relays(role: str) -> None:
    registry = Registry()
    session = new_session(registry)
    session.receive(hello(role, resume={"agents": (1, 3)}))
    assert session.relay is None and registry.held() == {}
    session.close()
    assert session.phase is Phase.CLOSED
