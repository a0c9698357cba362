"""Fake peers for ``every`` mode tests: a publisher (``Publisher``) that keeps the truth and a log,
answers ``Acquire`` with snapshots and ``Curious`` with ``Knowledge``, and a subscriber
(``Subscriber``) that checks, after each seq it receives, that its rows equal the truth's rows
inside its view as of that seq; datasets of each index kind (``Kind``) with a brute-force
oracle."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.testing.catalog import AGENTS, sensors
from fanout.testing.relaycore import ready_core
from fanout.views import Box, View
from fanout.views.anyof import AnyOf
from fanout.views.members import Selecting
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql, SqlBox
from fanout.views.sql import parse as sql
from fanout.views.topic import TopicFilter
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    Curious,
    DatasetInfo,
    Error,
    Knowledge,
    NoUpdate,
    Push,
    Release,
    Subscribed,
)
from fanout.wire.options import Resume

INFO = AGENTS
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
        return ready_core(self.info)


points = st.tuples(st.integers(-4, 24).map(float), st.integers(-4, 24).map(float))
SPACE = Kind(INFO, VIEW, st.integers(1, 12), points)
TOPICS = Kind(
    sensors(),
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
