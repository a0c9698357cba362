"""``every`` mode at the relay (relay/every.py, relay/core.py): every seq in order, exactly once,
across lost batches, curiosity, resumes on another relay and a publisher log that forgets.

The publisher here is a fake (``Publisher``) that keeps the truth and a log, answers ``Acquire``
with snapshots and ``Curious`` with ``Knowledge``; the relay is the real ``RelayCore``. The oracle
is the truth itself: after each seq a subscriber received, its rows equal the truth's rows inside
its view as of that seq.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core import UPSTREAM, RelayCore, Send
from fanout.relay.every import CURIOSITY_CHUNK, IDLE_WINDOW, ChangeSet, History, delta
from fanout.relay.planner import Policy
from fanout.views import Box
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    Curious,
    DatasetInfo,
    Error,
    Horizon,
    Knowledge,
    NoUpdate,
    Push,
    Release,
    Resume,
    Subscribe,
    Subscribed,
    Transform,
)

INFO = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
VIEW = Box((0, 0), (10, 10))
Point = tuple[float, float]


def relay() -> RelayCore:
    core = RelayCore(Policy(widen="margin", grace=0.0))
    core.on_catalog(Catalog([INFO]))
    core.on_upstream_connected()
    return core


def columns(points: dict[int, Point]) -> dict[str, np.ndarray]:
    ids = sorted(points)
    return {
        "id": np.array(ids, dtype=np.int64),
        "x": np.array([points[k][0] for k in ids], dtype=np.float64),
        "y": np.array([points[k][1] for k in ids], dtype=np.float64),
    }


@dataclass
class Publisher:
    """The truth, a log of whole changes by seq, and one relay's primitives and checkout."""

    epoch: int = 1
    seq: int = -1
    truth: dict[int, Point] = field(default_factory=dict)
    states: dict[int, dict[int, Point]] = field(default_factory=dict)
    log: dict[int, tuple[dict[int, Point], list[int]]] = field(default_factory=dict)
    oldest: int = 0  # the log's retention: seqs before it are gone
    prims: dict[int, Box] = field(default_factory=dict)
    snapshots: set[int] = field(default_factory=set)
    held: set[int] = field(default_factory=set)

    def step(self, changes: dict[int, Point | None]) -> Batch:
        """Apply one micro-batch and return the relay's batch of it."""
        self.seq += 1
        upserted = {k: p for k, p in changes.items() if p is not None}
        deleted = sorted(k for k, p in changes.items() if p is None and k in self.truth)
        self.truth.update(upserted)
        for key in deleted:
            del self.truth[key]
        self.states[self.seq] = dict(self.truth)
        self.log[self.seq] = (upserted, deleted)
        inside = {k: p for k, p in upserted.items() if self._in_prims(p, self.prims.values())}
        fresh = [self.prims[p] for p in self.snapshots if p in self.prims]
        inside.update({k: p for k, p in self.truth.items() if self._in_prims(p, fresh)})
        gone = sorted((set(changes) & self.held) - set(inside))
        self.held = (self.held - set(gone)) | set(inside)
        snapshots, self.snapshots = sorted(self.snapshots), set()
        return Batch(
            "agents",
            self.epoch,
            self.seq,
            10 * self.seq,
            float(self.seq),
            encode_columns(columns(inside)),
            encode_columns({"id": np.array(gone, dtype=np.int64)}),
            snapshots,
        )

    @staticmethod
    def _in_prims(point: Point, prims: object) -> bool:
        return any(bool(b.match([point[0]], [point[1]])[0]) for b in prims)  # type: ignore[attr-defined]

    def take(self, sends: list[Send]) -> list[Knowledge | Error]:
        """What the relay sent upstream; returns the answers to its curiosity."""
        answers: list[Knowledge | Error] = []
        for send in sends:
            frame = send.frame
            if send.to != UPSTREAM:
                continue
            match frame:
                case Acquire(prim=prim, view=view):
                    self.prims[prim] = view  # type: ignore[assignment]
                    self.snapshots.add(prim)
                case Release(prim=prim):
                    self.prims.pop(prim, None)
                case Curious() as ask:
                    answers.extend(self.answer(ask))
        return answers

    def answer(self, ask: Curious) -> list[Knowledge | Error]:
        if ask.first < self.oldest or ask.last > self.seq or ask.epoch != self.epoch:
            return [Error("lost", f"seqs {ask.first}..{ask.last} not logged", ref=ask.req)]
        out: list[Knowledge | Error] = []
        for seq in range(ask.first, ask.last + 1):
            upserted, deleted = self.log[seq]
            out.append(
                Knowledge(
                    ask.req,
                    "agents",
                    self.epoch,
                    seq,
                    10 * seq,
                    float(seq),
                    encode_columns(columns(upserted)),
                    encode_columns({"id": np.array(deleted, dtype=np.int64)}),
                )
            )
        return out

    def reconnect(self) -> None:
        """A new relay connection: it holds nothing here."""
        self.prims.clear()
        self.snapshots.clear()
        self.held.clear()


@dataclass
class Subscriber:
    """One ``every`` subscriber: its rows, the seqs it received, its resyncs."""

    rows: dict[int, Point] = field(default_factory=dict)
    epoch: int = -1
    seq: int = -1
    seqs: list[int] = field(default_factory=list)
    resyncs: int = 0
    errors: list[Error] = field(default_factory=list)

    def take(self, frame: object, publisher: Publisher) -> None:
        match frame:
            case Push() as push:
                if push.full:
                    self.rows.clear()
                    self.seqs.append(-1)  # a restart mark: the sequence begins again
                else:
                    assert push.seq == self.seq + 1, (push.seq, self.seq)
                for key in decode_columns(push.left).get("id", np.empty(0)).tolist():
                    del self.rows[key]
                for part in (push.entered, push.updated):
                    rows = decode_columns(part)
                    for k, x, y in zip(
                        *(rows.get(c, np.empty(0)).tolist() for c in ("id", "x", "y")),
                        strict=True,
                    ):
                        self.rows[k] = (x, y)
                self.epoch, self.seq = push.epoch, push.seq
                self.seqs.append(push.seq)
            case NoUpdate() as none:
                assert none.seq == self.seq + 1, (none.seq, self.seq)
                self.seq = none.seq
                self.seqs.append(none.seq)
            case Error(code="resync"):
                self.resyncs += 1
            case Error() as error:
                self.errors.append(error)
            case Subscribed():
                return
            case _:
                raise AssertionError(f"unexpected {frame!r}")
        if self.seq >= 0:
            truth = publisher.states[self.seq]
            expected = {k: p for k, p in truth.items() if VIEW.match([p[0]], [p[1]])[0]}
            assert self.rows == expected, f"after seq {self.seq}"

    def token(self) -> Resume:
        keys = np.array(sorted(self.rows), dtype=np.int64)
        return Resume(self.epoch, self.seq, encode_columns({"id": keys}))


def run(core: RelayCore, publisher: Publisher, subscriber: Subscriber, now: float) -> None:
    """Serve until the relay has nothing more to say (answering its curiosity)."""
    for _ in range(200):
        sends = core.pushes(now, lambda client: True)
        answers = publisher.take(sends)
        for send in sends:
            if send.to != UPSTREAM:
                subscriber.take(send.message(), publisher)
        for answer in answers:
            if isinstance(answer, Knowledge):
                core.on_knowledge(answer)
            else:
                core.on_upstream_error(answer)
        if not sends and not answers:
            return
    raise AssertionError("the relay never went quiet")


points = st.tuples(st.integers(-4, 24).map(float), st.integers(-4, 24).map(float))
changes = st.dictionaries(st.integers(1, 12), st.none() | points, max_size=6)
actions = st.one_of(
    st.tuples(st.just("tick"), changes),
    st.tuples(st.just("drop"), changes),
    st.tuples(st.just("resume"), st.booleans()),
    st.tuples(st.just("trim"), st.integers(1, 4)),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(1, 12), points), st.lists(actions, max_size=25))
def test_every_seq_arrives_once_in_order_and_matches_the_truth(start, script) -> None:
    publisher = Publisher()
    core = relay()
    subscriber = Subscriber()
    publisher.take(core.on_subscribe(1, Subscribe(1, "agents", VIEW, mode="every")))
    core.on_batch(publisher.step(dict(start)))
    now = 1.0
    run(core, publisher, subscriber, now)
    trimmed = False
    for action, arg in script:
        now += 1.0
        if action == "tick":
            publisher.take(core.on_batch(publisher.step(arg)))
        elif action == "drop":
            publisher.step(arg)  # the relay never gets this batch: a gap
        elif action == "resume":
            core.on_disconnect(1)
            if arg:  # on another relay, which has never seen this stream
                core, _ = relay(), publisher.reconnect()
            request = Subscribe(1, "agents", VIEW, mode="every", resume=subscriber.token())
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


def test_curiosity_is_asked_once_per_range_and_in_chunks() -> None:
    history = History()
    for seq in range(CURIOSITY_CHUNK + 10):
        history.record(ChangeSet(1, seq, seq, 0.0, {}, np.empty(0, np.int64), pure=False))
    assert history.wanted(0, trusted_after=-1) == (0, CURIOSITY_CHUNK - 1)
    history.asked(7, 0, CURIOSITY_CHUNK - 1)
    assert history.wanted(3, trusted_after=-1) is None  # already asked
    assert history.wanted(CURIOSITY_CHUNK, -1) == (CURIOSITY_CHUNK, CURIOSITY_CHUNK + 9)
    history.received(7, CURIOSITY_CHUNK - 1)
    assert not history.owns(7)


def test_the_window_is_bounded_by_rows() -> None:
    history = History(window=100, window_rows=10)
    for seq in range(5):
        rows = {"id": np.arange(4, dtype=np.int64)}
        history.record(ChangeSet(1, seq, seq, 0.0, rows, np.empty(0, np.int64)))
    assert [seq for seq in range(5) if history.get(seq, -1) is not None] == [3, 4]


def test_a_repeated_seq_keeps_its_first_change_set() -> None:
    history = History()
    pure = ChangeSet(1, 4, 40, 0.0, {}, np.empty(0, np.int64))
    history.record(pure)
    history.record(ChangeSet(1, 4, 40, 0.0, {}, np.empty(0, np.int64), pure=False))
    assert history.get(4, trusted_after=3) is pure


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 20), points),
    st.dictionaries(st.integers(0, 20), points),
    st.sets(st.integers(0, 20)),
)
def test_a_delta_takes_the_held_rows_to_the_view_after_the_change(before, moved, deleted) -> None:
    """Oracle: the truth inside the view before and after one change."""
    deleted -= set(moved)

    def inside(truth: dict[int, Point]) -> set[int]:
        return {k for k, p in truth.items() if VIEW.match([p[0]], [p[1]])[0]}

    after = {k: p for k, p in {**before, **moved}.items() if k not in deleted}
    held = np.array(sorted(inside(before)), dtype=np.int64)
    change = ChangeSet(1, 1, 1, 0.0, columns(moved), np.array(sorted(deleted), dtype=np.int64))
    found = delta(change, "id", VIEW, ("x", "y"), held)
    ids = columns(moved)["id"]
    assert set(found.held.tolist()) == inside(after)
    assert set(ids[found.entered].tolist()) == inside(after) - inside(before)
    assert set(ids[found.updated].tolist()) == inside(after) & inside(before) & set(moved)
    assert set(found.left.tolist()) == inside(before) - inside(after)


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
