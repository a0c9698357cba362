"""``every`` mode at the relay (relay/core/every.py, relay/core/relaycore.py): every seq in order,
exactly once, across lost batches, curiosity, resumes on another relay and a publisher log that
forgets.

The publisher here is a fake (``Publisher``) that keeps the truth and a log, answers ``Acquire``
with snapshots and ``Curious`` with ``Knowledge``; the relay is the real ``RelayCore``. The oracle
is the truth itself: after each seq a subscriber received, its rows equal the truth's rows inside
its view as of that seq.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import ProtocolError
from fanout.relay.core.changesets import CURIOSITY_CHUNK, IDLE_WINDOW, ChangeSet, History, delta
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.relay.core.rules import restrict
from fanout.relay.data.tables import TableStore
from fanout.views import Box, View
from fanout.views.anyof import AnyOf
from fanout.views.members import SELECTING as SELECTING_VIEWS
from fanout.views.members import Selecting
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql, SqlBox
from fanout.views.sql import parse as sql
from fanout.views.topic import TopicFilter
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
    Unsubscribe,
    Unsubscribed,
)

INFO = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
VIEW = Box((0, 0), (10, 10))
Point = tuple[float, float]
Key = int | str
Row = tuple[float, ...]  # the values of the columns after the key, in the catalog's order


@dataclass(frozen=True)
class Kind:
    """A dataset of one index kind, an ``every`` view of it, and a brute-force oracle."""

    info: DatasetInfo
    view: View
    keys: st.SearchStrategy[Key]
    rows: st.SearchStrategy[Row]
    oracle: Callable[[Key, Row], bool] | None = None  # for a SQL view: its WHERE, by hand

    @property
    def values(self) -> list[str]:
        return [c for c in self.info.columns if c != self.info.key]

    def columns(self, rows: dict[Key, Row]) -> dict[str, np.ndarray]:
        keys = sorted(rows)
        out = {self.info.key: self.key_array(keys)}
        for at, name in enumerate(self.values):
            out[name] = np.array([rows[k][at] for k in keys], dtype=np.float64)
        return out

    def key_array(self, keys: Iterable[Key]) -> np.ndarray:
        dtype = np.int64 if self.info.columns[self.info.key] == "<i8" else object
        return np.array(sorted(keys), dtype=dtype)

    def inside(self, view: object, key: Key, row: Row) -> bool:
        """One row at a time, without ``views.members``."""
        match view:
            case AnyOf():
                return any(self.inside(member, key, row) for member in view.views)
            case TopicFilter():
                return view.matches(str(key))
            case ObjectPath():
                attrs = dict(zip(self.values, row, strict=True))
                return bool(view.match([str(key)], [attrs])[0])
            case Sql():
                assert self.oracle is not None
                return self.oracle(key, row)
            case SqlBox():
                columns = {self.info.key: self.key_array([key])}
                columns |= {name: np.array([v]) for name, v in zip(self.values, row, strict=True)}
                return bool(view.match(columns)[0])
            case _:
                return bool(view.match([row[0]], [row[1]])[0])  # type: ignore[attr-defined]

    def relay(self) -> RelayCore:
        core = RelayCore(Policy(widen="margin", grace=0.0), engine=TableStore())
        core.on_catalog(Catalog([self.info]))
        core.on_upstream_connected()
        return core


points = st.tuples(st.integers(-4, 24).map(float), st.integers(-4, 24).map(float))
SPACE = Kind(INFO, VIEW, st.integers(1, 12), points)
TOPICS = Kind(
    DatasetInfo("sensors", "topic", {"topic": "str", "value": "<f8"}, "topic", ["topic"]),
    TopicFilter("plant/+/temp"),
    st.sampled_from(["plant/a/temp", "plant/b/temp", "plant/a/rpm", "yard/a/temp", "plant/temp"]),
    st.tuples(st.integers(0, 9).map(float)),
)
PATHS = Kind(
    DatasetInfo("cars", "path", {"path": "str", "rpm": "<f8"}, "path", ["path"]),
    ObjectPath("/cars/.all?f=rpm>4"),
    st.sampled_from(["/cars/c1", "/cars/c2", "/cars/c3", "/boats/b1", "/cars/old/c4"]),
    st.tuples(st.integers(0, 9).map(float)),
)
ORDERS = Kind(
    DatasetInfo("orders", "id", {"id": "<i8", "amount": "<f8"}, "sql", ["id", "amount"]),
    sql("SELECT * FROM orders WHERE amount > 4 AND amount <> 7"),
    st.integers(1, 12),
    st.tuples(st.integers(0, 9).map(float)),
    oracle=lambda key, row: row[0] > 4 and row[0] != 7,
)
SELECTING = [SPACE, TOPICS, PATHS]  # views that select rows by their own columns
KINDS = [*SELECTING, ORDERS]


def relay() -> RelayCore:
    return SPACE.relay()


def columns(points: dict[Key, Row]) -> dict[str, np.ndarray]:
    return SPACE.columns(points)


@dataclass
class Publisher:
    """The truth, a log of whole changes by seq, and one relay's primitives and checkout."""

    kind: Kind = SPACE
    epoch: int = 1
    seq: int = -1
    truth: dict[Key, Row] = field(default_factory=dict)
    states: dict[int, dict[Key, Row]] = field(default_factory=dict)
    log: dict[int, tuple[dict[Key, Row], list[Key]]] = field(default_factory=dict)
    oldest: int = 0  # the log's retention: seqs before it are gone
    prims: dict[int, View] = field(default_factory=dict)
    snapshots: set[int] = field(default_factory=set)
    held: set[Key] = field(default_factory=set)

    def step(self, changes: dict[Key, Row | None]) -> Batch:
        """Apply one micro-batch and return the relay's batch of it."""
        self.seq += 1
        upserted = {k: p for k, p in changes.items() if p is not None}
        deleted = sorted(k for k, p in changes.items() if p is None and k in self.truth)
        self.truth.update(upserted)
        for key in deleted:
            del self.truth[key]
        self.states[self.seq] = dict(self.truth)
        self.log[self.seq] = (upserted, deleted)
        inside = {k: p for k, p in upserted.items() if self._in_prims(k, p, self.prims.values())}
        fresh = [self.prims[p] for p in self.snapshots if p in self.prims]
        inside.update({k: p for k, p in self.truth.items() if self._in_prims(k, p, fresh)})
        gone = sorted((set(changes) & self.held) - set(inside))
        self.held = (self.held - set(gone)) | set(inside)
        snapshots, self.snapshots = sorted(self.snapshots), set()
        return Batch(
            self.kind.info.name,
            self.epoch,
            self.seq,
            10 * self.seq,
            float(self.seq),
            encode_columns(self.kind.columns(inside)),
            encode_columns({self.kind.info.key: self.kind.key_array(gone)}),
            snapshots,
        )

    def _in_prims(self, key: Key, row: Row, prims: Iterable[View]) -> bool:
        return any(self.kind.inside(prim, key, row) for prim in prims)

    def take(self, sends: list[Send]) -> list[Knowledge | Error]:
        """What the relay sent upstream; returns the answers to its curiosity."""
        answers: list[Knowledge | Error] = []
        for send in sends:
            frame = send.frame
            if send.to != UPSTREAM:
                continue
            match frame:
                case Acquire(prim=prim, view=view):
                    self.prims[prim] = view
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
                    self.kind.info.name,
                    self.epoch,
                    seq,
                    10 * seq,
                    float(seq),
                    encode_columns(self.kind.columns(upserted)),
                    encode_columns({self.kind.info.key: self.kind.key_array(deleted)}),
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

    kind: Kind = SPACE
    view: Selecting | None = None  # None: the kind's
    rows: dict[Key, Row] = field(default_factory=dict)
    epoch: int = -1
    seq: int = -1
    seqs: list[int] = field(default_factory=list)
    resyncs: int = 0
    errors: list[Error] = field(default_factory=list)

    def take(self, frame: object, publisher: Publisher) -> None:
        match frame:
            case Push() as push:
                self._apply(push)
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
            view = self.kind.view if self.view is None else self.view
            expected = {k: r for k, r in truth.items() if self.kind.inside(view, k, r)}
            assert self.rows == expected, f"after seq {self.seq}"

    def _apply(self, push: Push) -> None:
        key, values = self.kind.info.key, self.kind.values
        if push.full:
            self.rows.clear()
            self.seqs.append(-1)  # a restart mark: the sequence begins again
        else:
            assert push.seq == self.seq + 1, (push.seq, self.seq)
        for gone in decode_columns(push.left).get(key, np.empty(0)).tolist():
            del self.rows[gone]
        for part in (push.entered, push.updated):
            rows = decode_columns(part)
            if rows:
                listed = [rows[c].tolist() for c in values]
                for k, *row in zip(rows[key].tolist(), *listed, strict=True):
                    self.rows[k] = tuple(row)
        self.epoch, self.seq = push.epoch, push.seq
        self.seqs.append(push.seq)

    def token(self) -> Resume:
        keys = self.kind.key_array(self.rows)
        return Resume(self.epoch, self.seq, encode_columns({self.kind.info.key: keys}))


def run(
    core: RelayCore,
    publisher: Publisher,
    subscriber: Subscriber | dict[int, Subscriber],
    now: float,
) -> None:
    """Serve until the relay has nothing more to say (answering its curiosity); ``subscriber``:
    client 1's, or each client's."""
    clients = subscriber if isinstance(subscriber, dict) else {1: subscriber}
    for _ in range(200):
        sends = core.pushes(now, lambda client: True)
        answers = publisher.take(sends)
        for send in sends:
            if send.to != UPSTREAM:
                clients[send.to].take(send.message(), publisher)
        for answer in answers:
            if isinstance(answer, Knowledge):
                core.on_knowledge(answer)
            else:
                core.on_upstream_error(answer)
        if not sends and not answers:
            return
    raise AssertionError("the relay never went quiet")


def script(kind: Kind) -> st.SearchStrategy[list[tuple[str, Any]]]:
    changes = st.dictionaries(kind.keys, st.none() | kind.rows, max_size=6)
    actions = st.one_of(
        st.tuples(st.just("tick"), changes),
        st.tuples(st.just("drop"), changes),
        st.tuples(st.just("resume"), st.booleans()),
        st.tuples(st.just("trim"), st.integers(1, 4)),
    )
    return st.lists(actions, max_size=25)


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


def test_a_subscription_behind_gets_at_most_a_burst_of_seqs_a_turn() -> None:
    """A resumed subscription 10 seqs behind is sent ``every_burst`` (3) a turn, in order, so
    that a connection's queue never takes more than that from it at once."""
    publisher = Publisher()
    core = RelayCore(Policy(widen="margin", grace=0.0), engine=TableStore(), every_burst=3)
    core.on_catalog(Catalog([INFO]))
    core.on_upstream_connected()
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


@pytest.mark.parametrize("kind", SELECTING, ids=lambda kind: kind.info.index)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_delta_takes_the_held_rows_to_the_view_after_the_change(kind: Kind, data) -> None:
    """Oracle: the truth inside the view before and after one change, row by row."""
    before = data.draw(st.dictionaries(kind.keys, kind.rows), label="before")
    moved = data.draw(st.dictionaries(kind.keys, kind.rows), label="moved")
    deleted = data.draw(st.sets(kind.keys), label="deleted") - set(moved)

    def inside(truth: dict[Key, Row]) -> set[Key]:
        return {k for k, r in truth.items() if kind.inside(kind.view, k, r)}

    after = {k: p for k, p in {**before, **moved}.items() if k not in deleted}
    held = kind.key_array(inside(before))
    change = ChangeSet(1, 1, 1, 0.0, kind.columns(moved), kind.key_array(deleted))
    index = tuple(kind.info.index_columns)
    assert isinstance(kind.view, SELECTING_VIEWS)
    found = delta(change, kind.info.key, kind.view, index, held)
    keys = kind.columns(moved)[kind.info.key]
    assert set(found.held.tolist()) == inside(after)
    assert set(keys[found.entered].tolist()) == inside(after) - inside(before)
    assert set(keys[found.updated].tolist()) == inside(after) & inside(before) & set(moved)
    assert set(found.left.tolist()) == inside(before) - inside(after)


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
