"""A leader's state in shared memory for its workers (``tiers.shared``, ``relay.shell.sharedstate``,
``relay.data.layout``), sans sockets: the mid relay of ``test_below``'s tree writes its state to
real files, and the edge reads them as a worker does.

Oracles: the publisher's truth inside the edge's ready primitives (as ``test_below``), and for
the files, a model of what each worker may still read: the generations it was told, from the
one it adopted on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.tiers.test_below import EDGE, Rows, Tree, boxes, changes, position

from fanout.errors import ProtocolError
from fanout.relay.core.relaycore import UPSTREAM, Send
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.relay.shell.sharedstate import SharedReader, SharedStore
from fanout.tiers.shared import LAG, SHARED_STATE, Adopting, Holdings
from fanout.views import Box, View
from fanout.views.entity import Entity
from fanout.wire.columns import Columns
from fanout.wire.messages import Adopted, Batch, Hello, SharedRef


class SharedTree(Tree):
    """``Tree`` whose edge is a worker: told the mid relay's state in shared memory."""

    def __init__(self, directory: Path) -> None:
        self.store = SharedStore(directory)
        self.reader = SharedReader(directory)
        self.adopting = Adopting()
        self.notices = 0
        super().__init__()
        self.relays.shared = self.store
        self.relays.gone(EDGE)
        hello = Hello(version=1, role="relay", name="worker-1", capabilities=[SHARED_STATE])
        self.down(self.relays.welcome(EDGE, hello))

    def take(self, batch: Batch) -> None:
        """A worker takes the leader's state named in shared memory (never rows), swaps it in
        and says which generation it adopted."""
        assert batch.shared is not None, f"rows sent to a worker reading shared memory: {batch}"
        self.notices += 1
        intake = self.edge.admit(batch)
        if intake is not None:
            intake.install(self.reader)
            self.up(self.edge.finish(intake))
        self.edge.end_epoch()
        self.up([Send(UPSTREAM, frame) for frame in self.adopting.adopted(self.edge.datasets)])


@settings(max_examples=100, deadline=None)
@given(
    first=st.dictionaries(st.integers(0, 40), position, max_size=30),
    script=st.lists(
        st.tuples(changes, st.none() | boxes() | st.integers(0, 40).map(Entity)),
        min_size=1,
        max_size=8,
    ),
)
def test_a_worker_holds_the_truth_inside_its_primitives_from_shared_memory(
    tmp_path_factory: pytest.TempPathFactory,
    first: Rows,
    script: list[tuple[dict[int, tuple[float, float] | None], View | None]],
) -> None:
    """The edge, told only the mid relay's generations (never rows), holds the truth inside
    its ready primitives after every seq; and the files are never more than the ring."""
    tree = SharedTree(tmp_path_factory.mktemp("shared"))
    tree.acquire(Box((0.0, 0.0), (20.0, 20.0)))
    tree.step(dict(first))
    for changed, wanted in script:
        if wanted is not None:
            tree.acquire(wanted)
        tree.step(changed)
        tree.check()
    tree.step({})
    assert all(p.ready for p in tree.edge.upstream)
    assert tree.notices >= len(script)
    assert len(list(tree.store.directory.iterdir())) <= LAG + 2
    tree.store.close()


def test_a_shared_batch_is_refused_by_a_relay_that_reads_no_shared_memory() -> None:
    """Neither written as rows nor installed: a clear error (the link drops, rule 2 of the
    writer)."""
    tree = Tree()
    tree.step({1: (1.0, 1.0)})
    shared = Batch("agents", 1, 5, 5, 5.0, tree.sent[0].upserts, tree.sent[0].deletes)
    batch = Batch(**{**_fields(shared), "shared": SharedRef("0-0", 1)})
    intake = tree.edge.admit(batch)
    assert intake is not None
    with pytest.raises(ProtocolError, match="shared memory"):
        intake.write()
    with pytest.raises(ProtocolError, match="reads none"):
        intake.install(None)


def _fields(batch: Batch) -> dict[str, Any]:
    return {name: getattr(batch, name) for name in batch.__struct_fields__}


# -- the files -------------------------------------------------------------------------------


def _buffer(rows: int, seq: int, name: str = "<f8") -> DoubleBuffer:
    buffer = DoubleBuffer("id", {"id": "<i8", "x": "<f8", "y": "<f8", "name": name}, ("x", "y"))
    keys = np.arange(rows, dtype=np.int64)
    named = keys.astype(str) if name == "str" else keys * 2.0
    buffer.upsert({"id": keys, "x": keys * 1.5, "y": -keys * 0.5, "name": named}, seq)
    buffer.mark(Stamp(1, seq, seq, float(seq)))
    buffer.swap()
    return buffer


def test_a_worker_reads_what_the_leader_wrote_and_sees_it_written_over(tmp_path: Path) -> None:
    store, reader = SharedStore(tmp_path, most=2), SharedReader(tmp_path)
    first = _buffer(100, 3)
    ref = store.publish("agents", first)
    assert ref is not None and store.publish("agents", first) == ref  # once a swap
    batch = Batch("agents", 1, 3, 3, 3.0, Columns(), Columns(), shared=ref)
    table, grid, stamp = reader(batch, first.active)
    assert stamp == first.stamp
    assert table.keys.tolist() == list(range(100)) and not table.keys.flags.writeable
    box = Box((10.0, -20.0), (60.0, 0.0))
    assert grid.query(box).tolist() == first.index.query(box).tolist()
    # Nobody holds it: the next state but one goes into its file, and its reader is told so.
    assert store.publish("agents", _buffer(5, 4)) is not None
    assert store.publish("agents", _buffer(7, 5)) is not None
    with pytest.raises(ValueError, match="not 1"):
        reader(batch, first.active)
    with pytest.raises(ValueError, match="not the name"):
        reader(Batch(**{**_fields(batch), "shared": SharedRef("../x", 1)}), first.active)
    assert store.publish("named", _buffer(5, 6, name="str")) is None  # strings travel as rows


def test_generations_a_worker_may_read_are_never_written_over(tmp_path: Path) -> None:
    """Told and not adopted past: kept; with every file in use, nothing is written (None)."""
    store = SharedStore(tmp_path, most=2)
    ref = store.publish("agents", _buffer(10, 1))
    assert ref is not None
    store.holdings.told("w", "agents", ref.generation)
    second = store.publish("agents", _buffer(20, 2))  # the other file
    assert second is not None and second.name != ref.name
    assert store.publish("agents", _buffer(30, 3)) is None  # one told, one the latest
    store.holdings.told("w", "agents", second.generation)
    store.holdings.adopted("w", "agents", second.generation)  # the first is free again
    third = store.publish("agents", _buffer(30000, 3))  # and grows
    assert third is not None and third.name == ref.name
    assert (tmp_path / third.name).stat().st_size >= 30000 * 8 * 3


@settings(max_examples=150, deadline=None)
@given(script=st.lists(st.sampled_from(["swap", "adopt", "snapshot"]), max_size=25))
def test_what_a_worker_reads_is_the_state_it_was_told(
    tmp_path_factory: pytest.TempPathFactory, script: list[str]
) -> None:
    """States published at their swaps, states of another buffer published between (a
    worker's snapshot), a worker adopting late: every generation it may still read holds the
    rows active when it was published (the oracle: a copy of them taken then)."""
    directory = tmp_path_factory.mktemp("files")
    store, reader = SharedStore(directory, most=4), SharedReader(directory)
    buffers = {"swap": _buffer(4, 1), "snapshot": _buffer(2, 0)}
    expected: dict[SharedRef, dict[int, float]] = {}
    told: list[SharedRef] = []
    for seq, step in enumerate(script, start=2):
        if step == "adopt":
            if told:
                store.holdings.adopted("w", "agents", told.pop(0).generation)
            continue
        buffer = buffers[step]
        rows = np.array([seq % 7, 50 + seq], dtype=np.int64)
        buffer.upsert({"id": rows, "x": rows + seq * 1.0, "y": rows * 0.5, "name": rows}, seq)
        buffer.mark(Stamp(1, seq, seq, float(seq)))
        buffer.swap()
        ref = store.publish("agents", buffer)
        if ref is not None:
            keys, xs = buffer.active.keys.tolist(), buffer.active.column("x").tolist()
            expected[ref] = dict(zip(keys, xs, strict=True))
            if store.holdings.may_tell("w", "agents", ref.generation):
                store.holdings.told("w", "agents", ref.generation)
                told.append(ref)
        for ref in told:
            batch = Batch("agents", 1, 0, 0, 0.0, Columns(), Columns(), shared=ref)
            table, _, _ = reader(batch, buffer.active)
            held = zip(table.keys.tolist(), table.column("x").tolist(), strict=True)
            assert dict(held) == expected[ref]
    store.close()


# -- which generations are in use: against a model of each worker's reading ------------------

operations = st.lists(
    st.tuples(st.sampled_from(["publish", "adopt", "forget", "connect"]), st.sampled_from("ab")),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(script=operations)
def test_what_a_worker_may_read_is_in_use_and_a_lagging_one_holds_few(
    script: list[tuple[str, str]],
) -> None:
    """A leader publishing, telling each worker what ``may_tell`` allows; workers adopting the
    oldest generation told and not adopted, ending, or connecting again. The model: a worker
    may read each generation told to it from the one it adopted on. Every such generation is
    in use; a worker holds at most ``LAG + 1`` of them, and the first told after each time it
    connected again; one that adopted all it was told is told the next."""
    holdings = Holdings()
    told: dict[str, list[int]] = {"a": [], "b": []}
    reading: dict[str, int] = {}
    fresh = {"a": False, "b": False}  # connected again, told nothing since
    granted: dict[str, list[int]] = {"a": [], "b": []}  # the first told after connecting
    generation = 0
    for operation, worker in script:
        if operation == "publish":
            generation += 1
            for name, generations in told.items():
                caught_up = not [g for g in generations if g > reading.get(name, -1)]
                if caught_up:  # liveness: nothing left to adopt, so it is told the new one
                    assert holdings.may_tell(name, "d", generation)
                if holdings.may_tell(name, "d", generation):
                    holdings.told(name, "d", generation)
                    generations.append(generation)
                    if fresh[name]:
                        granted[name].append(generation)
                    fresh[name] = False
        elif operation == "adopt":
            waiting = [g for g in told[worker] if g > reading.get(worker, -1)]
            if waiting:
                reading[worker] = waiting[0]
                holdings.adopted(worker, "d", waiting[0])
        elif operation == "connect":
            holdings.connected(worker)
            fresh[worker] = bool(told[worker])
        else:
            holdings.forget(worker)
            told[worker], reading[worker] = [], generation  # a new process: reads nothing yet
            fresh[worker], granted[worker] = False, []
        for name, generations in told.items():
            readable = [g for g in generations if g >= reading.get(name, -1)]
            assert all(holdings.in_use("d", g) for g in readable)
            extra = [g for g in granted[name] if g in readable]
            assert len(readable) <= LAG + 1 + len(extra)
    assert not holdings.in_use("d", generation + 1)


def test_a_worker_tells_each_generation_it_adopts_once() -> None:
    buffer = _buffer(3, 1)
    adopting = Adopting()

    class State:
        def __init__(self, shared: int) -> None:
            self.buffer = buffer
            buffer.shared = shared

    assert adopting.adopted({"agents": State(-1)}) == []  # type: ignore[dict-item]
    assert adopting.adopted({"agents": State(4)}) == [Adopted("agents", 4)]  # type: ignore[dict-item]
    assert adopting.adopted({"agents": State(4)}) == []  # type: ignore[dict-item]
