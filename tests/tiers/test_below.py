"""A relay serving relays below it (``tiers.below``), sans I/O: a fake publisher feeds the
mid relay's real ``RelayCore`` (through ``Relays``, as the writer does), and what ``Relays``
sends down is fed to a real ``RelayCore`` as the edge relay.

The oracle is the publisher's truth: after every seq, the edge's active rows inside its ready
primitives are exactly the truth's rows inside them — while primitives are acquired below at any
time, which makes the mid relay acquire upstream and take snapshot-carrying batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.relay.data.intake import Intake
from fanout.testing import oracle
from fanout.testing.catalog import AGENTS, sensors
from fanout.testing.relaycore import ready_core
from fanout.tiers.below import FIRST_PASSED, Relays
from fanout.tiers.held import Below, Held
from fanout.views import Box, View
from fanout.views.entity import Entity
from fanout.views.objects import parse as path
from fanout.views.topic import TopicFilter
from fanout.views.topic import parse as topic
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    Curious,
    DatasetInfo,
    DatasetState,
    Error,
    Hello,
    Horizon,
    Knowledge,
    LiveWrites,
    Release,
    Written,
)

TOPICS = sensors(value="v")
EDGE = 7  # the edge relay's connection at the mid relay
Rows = dict[int, tuple[float, float]]


def within(view: View, x: float, y: float) -> bool:
    assert isinstance(view, Box)
    return view.lo[0] <= x <= view.hi[0] and view.lo[1] <= y <= view.hi[1]


def columns(rows: Rows) -> dict[str, np.ndarray]:
    keys = sorted(rows)
    return {
        "id": np.array(keys, dtype=np.int64),
        "x": np.array([rows[k][0] for k in keys]),
        "y": np.array([rows[k][1] for k in keys]),
    }


def topic_columns(rows: dict[str, float]) -> dict[str, np.ndarray]:
    keys = sorted(rows)
    return {"topic": np.array(keys, dtype=object), "v": np.array([rows[k] for k in keys])}


def topic_within(view: View, name: str, value: float) -> bool:
    """Brute force: MQTT filter levels against topic levels (no ``$`` topics here)."""
    assert isinstance(view, TopicFilter)
    return oracle.filter_matches(view.topic_filter, name)


@dataclass
class Publisher:
    """The truth and the mid relay's primitives and checkout, as the publisher keeps them, of
    one dataset (``agents`` unless told)."""

    dataset: str = "agents"
    selects: Callable[..., bool] = within
    encode: Callable[[Any], dict[str, np.ndarray]] = columns
    seq: int = -1
    truth: dict[Any, Any] = field(default_factory=dict)
    prims: dict[int, View] = field(default_factory=dict)
    fresh: set[int] = field(default_factory=set)
    held: set[int] = field(default_factory=set)

    def take(self, sends: list[Send]) -> None:
        for send in sends:
            match send.frame:
                case Acquire(prim=prim, view=view) if send.to == UPSTREAM:
                    self.prims[prim] = view
                    self.fresh.add(prim)
                case Release(prim=prim) if send.to == UPSTREAM:
                    self.prims.pop(prim, None)

    def step(self, changes: dict[int, tuple[float, float] | None]) -> Batch:
        self.seq += 1
        upserted = {k: p for k, p in changes.items() if p is not None}
        self.truth.update(upserted)
        for key, p in changes.items():
            if p is None:
                self.truth.pop(key, None)
        prims = list(self.prims.values())
        fresh = [self.prims[p] for p in self.fresh if p in self.prims]
        inside = {k: p for k, p in upserted.items() if any(self.chosen(v, k, p) for v in prims)}
        inside |= {k: p for k, p in self.truth.items() if any(self.chosen(v, k, p) for v in fresh)}
        gone = sorted((set(changes) & self.held) - set(inside))
        self.held = (self.held - set(gone)) | set(inside)
        snapshots, self.fresh = sorted(self.fresh), set()
        key = next(iter(self.encode({})))
        return Batch(
            self.dataset,
            1,
            self.seq,
            self.seq,
            float(self.seq),
            encode_columns(self.encode(inside)),
            encode_columns({key: np.array(gone, dtype=self.encode({})[key].dtype)}),
            snapshots,
        )

    def chosen(self, view: View, key: Any, value: Any) -> bool:
        """Whether ``view`` selects the row (a position unpacks into coordinates)."""
        if isinstance(view, Entity):
            return bool(key == view.key)
        if isinstance(value, tuple):
            return self.selects(view, *value)
        return self.selects(view, key, value)


def core() -> RelayCore:
    return ready_core(AGENTS, TOPICS, policy=Policy(widen="margin", margin=0.25))


class Tree:
    """Publisher -> mid relay (with ``Relays``) -> edge relay."""

    def __init__(self, publisher: Publisher | None = None) -> None:
        self.publisher = publisher or Publisher()
        self.mid = core()
        self.relays = Relays(self.mid)
        self.edge = core()
        self.sent: list[Batch] = []
        self.down(self.relays.welcome(EDGE, Hello(version=1, role="relay", name="edge")))

    def down(self, sends: list[Send] | Error) -> None:
        """Frames from the mid relay: upstream ones to the publisher, the edge's to the edge."""
        assert isinstance(sends, list)
        self.publisher.take([s for s in sends if s.to == UPSTREAM])
        for send in sends:
            if send.to != EDGE:
                continue
            match send.frame:
                case Batch() as batch:
                    self.sent.append(batch)
                    self.take(batch)
                case Catalog() as catalog:
                    self.edge.on_catalog(catalog)
                case frame:
                    raise AssertionError(f"unexpected {frame!r} sent down")

    def take(self, batch: Batch) -> None:
        """The edge relay takes a batch and swaps it in."""
        self.up(self.edge.on_batch(batch))
        self.edge.end_epoch()

    def up(self, sends: list[Send]) -> None:
        """Frames from the edge relay to the mid relay."""
        for send in sends:
            assert send.to == UPSTREAM
            self.down(self.relays.on_frame(EDGE, send.frame))

    def acquire(self, view: View) -> None:
        """The edge relay wants ``view`` (as a subscription would make it)."""
        added = self.edge.parts.kinds[self.publisher.dataset].acquire(view, None, True)
        self.up([Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in added])

    def step(self, changes: dict[Any, Any], told: str = "decoded") -> None:
        """One micro-batch through the mid relay, as its writer takes it: told it is decoded
        before it is written (``told="decoded"``), or only after it is written and swapped in
        (``"late"``: the pump saw it written first), or never (``"never"``)."""
        intake = self.relays.admit(self.publisher.step(changes))
        if intake is not None:
            if told == "decoded":
                intake.write(lambda decoded: self.down(self.relays.decoded(decoded)))
            else:
                intake.write()
            self.down(self.relays.finish(intake))
            self.down(self.relays.end_epoch())
            if told == "late":
                assert self.relays.decoded(intake) == []  # it went at finish

    def check(self) -> None:
        """The edge's rows inside its ready primitives are the truth's."""
        publisher = self.publisher
        prims = [p.view for p in self.edge.upstream if p.ready]
        table = self.edge.datasets[publisher.dataset].table
        names = [name for name in table.columns if name != table.key]
        values = [table.column(name).tolist() for name in names]
        rows = {
            k: (tuple(v) if len(v) > 1 else v[0])
            for k, *v in zip(table.keys.tolist(), *values, strict=True)
        }
        held = {k: p for k, p in rows.items() if any(publisher.chosen(v, k, p) for v in prims)}
        truth = {
            k: p
            for k, p in publisher.truth.items()
            if any(publisher.chosen(v, k, p) for v in prims)
        }
        assert held == truth


coordinate = st.integers(0, 40).map(float)
position = st.tuples(coordinate, coordinate)
changes = st.dictionaries(st.integers(0, 40), st.none() | position, max_size=12)


@st.composite
def boxes(draw: st.DrawFn) -> Box:
    x, y = draw(coordinate), draw(coordinate)
    return Box((x, y), (x + draw(st.integers(1, 15)), y + draw(st.integers(1, 15))))


@settings(max_examples=150, deadline=None)
@given(
    first=st.dictionaries(st.integers(0, 40), position, max_size=30),
    script=st.lists(
        st.tuples(
            changes,
            st.none() | boxes() | st.integers(0, 40).map(Entity),
            st.sampled_from(["decoded", "late", "never"]),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_the_edge_holds_the_truth_inside_its_primitives(
    first: Rows, script: list[tuple[dict[int, tuple[float, float] | None], View | None, str]]
) -> None:
    """Regions, and entities (the rows of keys an edge follows for its relative views); each
    batch forwarded when decoded (before the mid relay writes it) or when written."""
    tree = Tree()
    tree.step(dict(first))
    for changed, wanted, told in script:
        if wanted is not None:
            tree.acquire(wanted)
        tree.sent.clear()
        tree.step(changed, told)
        tree.check()
        # A batch listing no snapshots is a pure change set: only rows that changed.
        for batch in tree.sent:
            if not batch.snapshots and batch.seq == tree.publisher.seq:
                assert set(decode_columns(batch.upserts).get("id", [])) <= set(changed)
    # Every primitive got its snapshot (one with no rows is swapped in with the next seq).
    tree.step({})
    assert all(p.ready for p in tree.edge.upstream)


TOPIC_NAMES = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map("/".join)
TOPIC_FILTERS = st.sampled_from(["a/+", "a/#", "#", "+/b", "a/b", "+", "+/+/c", "$share/g/b/#"])
topic_changes = st.dictionaries(TOPIC_NAMES, st.none() | st.integers(0, 9).map(float), max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    first=st.dictionaries(TOPIC_NAMES, st.integers(0, 9).map(float), max_size=20),
    script=st.lists(st.tuples(topic_changes, st.none() | TOPIC_FILTERS), min_size=1, max_size=8),
)
def test_the_edge_holds_the_truth_inside_its_topic_filters(
    first: dict[str, float], script: list[tuple[dict[str, float | None], str | None]]
) -> None:
    """As for regions, with a topic dataset: the kind cuts, the tier code is the same."""
    tree = Tree(Publisher("sensors", topic_within, topic_columns))
    tree.step(dict(first))
    for changed, wanted in script:
        if wanted is not None:
            tree.acquire(topic(wanted))
        tree.sent.clear()
        tree.step(changed)
        tree.check()
        for batch in tree.sent:
            if not batch.snapshots and batch.seq == tree.publisher.seq:
                assert set(decode_columns(batch.upserts).get("topic", [])) <= set(changed)
    tree.step({})
    assert all(p.ready for p in tree.edge.upstream)


def test_a_batch_with_the_mids_own_snapshots_goes_down_as_a_snapshot_of_what_it_touches() -> None:
    tree = Tree()
    tree.step({1: (5.0, 5.0), 2: (30.0, 30.0)})
    tree.acquire(Box((0, 0), (10, 10)))
    tree.step({})  # the mid's snapshot comes, then the edge's
    (live,) = [p for p in tree.edge.upstream if p.ready]
    sent: list[Batch] = []
    # The edge now wants an overlapping region: the mid acquires more upstream; the batch with
    # that snapshot mixes unchanged rows with changes, so the live primitive goes down whole.
    tree.acquire(Box((5, 5), (20, 20)))
    finish = tree.relays.finish
    tree.relays.finish = lambda intake: _seen(finish(intake), sent)  # type: ignore[method-assign]
    tree.step({1: (6.0, 6.0)})
    (batch,) = sent
    assert live.prim in batch.snapshots
    assert decode_columns(batch.upserts)["id"].tolist() == [1]
    tree.check()


def _seen(sends: list[Send], into: list[Batch]) -> list[Send]:
    into.extend(s.frame for s in sends if isinstance(s.frame, Batch) and s.to == EDGE)
    return sends


def test_a_pure_batch_goes_below_when_decoded_and_one_with_snapshots_once_written() -> None:
    """A pure change set reads nothing of the mid relay's state: it goes below before the mid
    relay writes it, and not again at finish; a batch carrying the mid relay's own snapshots
    (whose cut reads the written state) goes at finish only."""
    tree = Tree()
    tree.step({1: (5.0, 5.0)})
    tree.acquire(Box((0.0, 0.0), (10.0, 10.0)))  # the mid acquires: its next batch snapshots
    tree.step({})
    tree.step({})

    def written(changes: Rows) -> tuple[Intake, list[Send]]:
        intake = tree.relays.admit(tree.publisher.step(changes))
        assert intake is not None
        went: list[Send] = []
        intake.write(lambda decoded: went.extend(tree.relays.decoded(decoded)))
        return intake, went

    for changes in ({1: (6.0, 6.0)}, {2: (7.0, 7.0)}):
        intake, went = written(changes)
        assert not intake.snapshots and [s.to for s in went] == [EDGE]
        assert isinstance(went[0].frame, Batch) and went[0].frame.seq == tree.publisher.seq
        assert intake.state.busy  # not swapped in here yet
        assert [s for s in tree.relays.finish(intake) if s.to == EDGE] == []
        tree.relays.end_epoch()
    tree.acquire(Box((20.0, 20.0), (30.0, 30.0)))
    intake, went = written({})
    assert intake.snapshots and went == []
    assert [s.to for s in tree.relays.finish(intake)] == [EDGE]


def test_what_a_relay_cannot_forward_is_refused_naming_the_primitive() -> None:
    relays = Relays(core())
    relays.welcome(EDGE, Hello(version=1, role="relay", name="edge"))
    box = Box((0, 0), (1, 1))
    cases = [
        (Acquire(1, "nowhere", box), "invalid_view", "unknown dataset 'nowhere'"),
        (Acquire(2, "sensors", box), "invalid_view", "takes MQTT topic filters, not Box"),
        (Acquire(3, "agents", Entity("five")), "invalid_view", "'five' is no key of 'agents'"),
        (Acquire(4, "agents", Box((0, 0, 0), (1, 1, 1))), "invalid_view", "2-D, not 3-D"),
        (Release(9), "primitive", "not held"),
    ]
    for frame, code, words in cases:
        (send,) = relays.on_frame(EDGE, frame)
        assert isinstance(send.frame, Error) and send.to == EDGE
        assert send.frame.code == code and words in send.frame.message
    assert relays.on_frame(EDGE, Acquire(5, "agents", box))  # taken: acquired upstream
    (again,) = relays.on_frame(EDGE, Acquire(5, "agents", box))
    assert isinstance(again.frame, Error) and again.frame.code == "primitive"


def test_a_relay_without_a_catalog_refuses_relays_and_a_resume_is_resynced() -> None:
    fresh = RelayCore()
    refused = Relays(fresh).welcome(EDGE, Hello(version=1, role="relay", name="edge"))
    assert isinstance(refused, Error) and refused.code == "unavailable"
    welcomed = Relays(core()).welcome(
        EDGE, Hello(version=1, role="relay", name="e", resume={"agents": (1, 4)})
    )
    assert isinstance(welcomed, list)
    frames = [s.frame for s in welcomed]
    assert isinstance(frames[0], Catalog) and [i.name for i in frames[0].datasets] == [
        "agents",
        "sensors",
    ]
    assert isinstance(frames[1], Error) and frames[1].code == "resync"


def test_curiosity_is_passed_upstream_and_answered_from_the_window_after() -> None:
    tree = Tree()
    tree.step({1: (1.0, 1.0)})
    ask = Curious(req=3, dataset="agents", epoch=1, first=0, last=0)
    (passed,) = tree.relays.on_frame(EDGE, ask)
    assert passed.to == UPSTREAM and isinstance(passed.frame, Curious)
    assert passed.frame.req >= FIRST_PASSED and (passed.frame.first, passed.frame.last) == (0, 0)
    knowledge = Knowledge(
        passed.frame.req,
        "agents",
        1,
        0,
        0,
        0.0,
        encode_columns(columns({1: (1.0, 1.0)})),
        encode_columns({"id": np.array([], dtype=np.int64)}),
    )
    _, sends = tree.relays.on_knowledge(knowledge)
    (back,) = sends
    assert back.to == EDGE and isinstance(back.frame, Knowledge) and back.frame.req == 3
    # Learnt whole: the next relay asking is answered here.
    (answered,) = tree.relays.on_frame(EDGE, Curious(4, "agents", 1, 0, 0))
    assert answered.to == EDGE and isinstance(answered.frame, Knowledge)
    assert answered.frame.req == 4 and tree.relays.answered == 1
    # Seq 0 held, 1..9 not: 0 is answered here, upstream is asked only for the rest.
    local, passed = tree.relays.on_frame(EDGE, Curious(5, "agents", 1, 0, 9))
    assert local.to == EDGE and isinstance(local.frame, Knowledge) and local.frame.seq == 0
    assert isinstance(passed.frame, Curious) and (passed.frame.first, passed.frame.last) == (1, 9)
    # A refusal upstream goes back to the relay that asked, under its number.
    (refusal,) = tree.relays.on_upstream_error(Error("lost", "gone", ref=passed.frame.req)) or []
    assert refusal.to == EDGE and refusal.frame == Error("lost", "gone", ref=5)
    assert tree.relays.on_upstream_error(Error("lost", "gone", ref=12345)) is None


def _knowledge(req: int, seq: int) -> Knowledge:
    rows, deletes = columns({1: (1.0, 1.0)}), {"id": np.array([], dtype=np.int64)}
    return Knowledge(req, "agents", 1, seq, seq, 0.0, encode_columns(rows), encode_columns(deletes))


@pytest.mark.parametrize("told", ["horizon", "curious"])
def test_a_gap_longer_than_the_idle_window_is_answered_from_here_to_the_next_relay_below(
    told: str,
) -> None:
    """The mid relay has no ``every`` subscription of its own: its window is the idle one (8)
    unless relays below read in ``every`` mode (a horizon told, or an ask waiting). A gap of 20
    learnt for one edge answers the next edge's ask here, every seq of it (stop 53's CI
    failure: the first seqs forgotten as the last were learnt, and asked upstream again)."""
    tree = Tree()
    tree.step({1: (1.0, 1.0)})
    if told == "horizon":
        tree.relays.on_frame(EDGE, Horizon("agents", 1, 0))
    (passed,) = tree.relays.on_frame(EDGE, Curious(3, "agents", 1, 0, 19))
    assert isinstance(passed.frame, Curious)
    for seq in range(20):
        tree.relays.on_knowledge(_knowledge(passed.frame.req, seq))
    other = 8
    tree.relays.welcome(other, Hello(version=1, role="relay", name="edge-2"))
    answers = tree.relays.on_frame(other, Curious(4, "agents", 1, 0, 19))
    assert [s.to for s in answers] == [other] * 20
    assert [s.frame.seq for s in answers if isinstance(s.frame, Knowledge)] == list(range(20))
    assert tree.relays.passed_seqs == 20
    # Every relay below gone, nothing waiting: the window is the idle one again.
    tree.relays.gone(EDGE)
    tree.relays.gone(other)
    assert tree.mid.every.histories["agents"].window == 8


@pytest.mark.parametrize(("own", "below", "told"), [(None, 7, 7), (4, 7, 4), (9, 7, 7)])
def test_the_horizon_told_upstream_is_the_lowest_here_and_below(
    own: int | None, below: int, told: int
) -> None:
    tree = Tree()
    tree.step({1: (1.0, 1.0)})
    relays = tree.relays
    if own is not None:
        relays.upward.own["agents"] = (1, own)
    relays.on_frame(EDGE, Horizon("agents", 1, below))
    horizons = [s.frame for s in relays.housekeeping(0.0) if isinstance(s.frame, Horizon)]
    assert horizons == [Horizon("agents", 1, told)]
    relays.on_frame(EDGE, Horizon("agents", 1, -1))
    relays.upward.own.clear()
    horizons = [s.frame for s in relays.housekeeping(1.0) if isinstance(s.frame, Horizon)]
    assert horizons == [Horizon("agents", 1, -1)]


def test_a_relay_below_that_goes_away_leaves_nothing_pinned() -> None:
    tree = Tree()
    tree.step({1: (1.0, 1.0)})
    tree.acquire(Box((0, 0), (10, 10)))
    assert tree.mid.downstream.views("agents")
    tree.relays.gone(EDGE)
    assert tree.mid.downstream.views("agents") == []
    assert tree.relays.upstream_lost() == []


def test_a_relay_below_holds_at_most_its_share_of_primitives() -> None:
    relays = Relays(core(), max_primitives=2)
    relays.welcome(EDGE, Hello(version=1, role="relay", name="edge"))
    for prim in (1, 2):
        relays.on_frame(EDGE, Acquire(prim, "agents", Box((prim, 0), (prim + 1, 1))))
    (refused,) = relays.on_frame(EDGE, Acquire(3, "agents", Box((0, 0), (1, 1))))
    assert refused.frame == Error("bad_request", refused.frame.message, ref=3)
    assert "2 primitives" in refused.frame.message


def test_a_stopped_upstream_dataset_is_passed_down_and_told_to_relays_arriving_meanwhile() -> None:
    relays = Relays(core())
    relays.welcome(EDGE, Hello(version=1, role="relay", name="edge"))
    stopped = DatasetState("agents", running=False, reason="worker lost", retry_in=4.0)
    assert relays.on_dataset_state(stopped) == [Send(EDGE, stopped)]
    assert relays.stats()["upstream_datasets_stopped"] == 1
    late = relays.welcome(EDGE + 1, Hello(version=1, role="relay", name="late"))
    assert isinstance(late, list) and Send(EDGE + 1, stopped) in late
    running = DatasetState("agents", running=True)
    assert relays.on_dataset_state(running) == [Send(EDGE, running), Send(EDGE + 1, running)]
    last = relays.welcome(EDGE + 2, Hello(version=1, role="relay", name="last"))
    assert isinstance(last, list) and not any(isinstance(s.frame, DatasetState) for s in last)
    relays.on_dataset_state(stopped)
    relays.upstream_lost()  # the next upstream says again what is stopped
    assert relays.stats()["upstream_datasets_stopped"] == 0


def test_a_write_made_elsewhere_goes_down_to_the_relays_below_that_hold_a_row_of_it() -> None:
    """Rule 3: per relay below that wants the dataset's live writes, by its live primitives; a
    write that deletes goes to every such relay holding a primitive of the dataset (a key alone
    says nothing of where the row was); one that never said it wants them gets none."""
    tree = Tree(Publisher("sensors", topic_within, topic_columns))
    tree.down(tree.relays.welcome(EDGE + 1, Hello(version=1, role="relay", name="idle")))
    tree.down(tree.relays.welcome(EDGE + 2, Hello(version=1, role="relay", name="deaf")))
    for wanting in (EDGE, EDGE + 1):  # the third takes no live writes: it never said so
        tree.relays.on_frame(wanting, LiveWrites("sensors"))
    tree.down(tree.relays.on_frame(EDGE + 2, Acquire(1, "sensors", topic("#"))))
    tree.step({"a/1": 1.0})
    tree.acquire(topic("a/#"))
    tree.step({})
    tree.step({})

    def written(rows: dict[str, float], deletes: tuple[str, ...] = ()) -> Written:
        keys = encode_columns({"topic": np.array(deletes, dtype=object)})
        return Written("sensors", 5, 5, encode_columns(topic_columns(rows)), keys)

    assert [s.to for s in tree.relays.on_written(written({"a/2": 2.0, "b/2": 1.0}))] == [EDGE]
    assert tree.relays.on_written(written({"b/2": 2.0})) == []
    assert [s.to for s in tree.relays.on_written(written({}, ("b/9",)))] == [EDGE]


PPS = DatasetInfo(
    "pps", "cell", {"cell": "str", "object": "str", "attr": "str"}, "objects", ["object"]
)
#: Object paths a relay below may hold (acquired without options) and the objects written.
OBJECT_PATHS = ["/a/.all", "/a/b/.all", "/a/b/x", "/a/b/c/.all", "/d/.all", "/.all"]
objects = st.lists(st.sampled_from(["a", "b", "c", "x", "d"]), min_size=1, max_size=4).map(
    lambda levels: "/" + "/".join(levels)
)


def passed_down(held: dict[int, list[str]], written: list[str], deletes: bool) -> list[int]:
    """Brute force, as the publisher chooses (tests/publisher/test_passing.py): the relays
    holding a path whose scope holds an object written or a directory above it (a write makes
    its parents); every relay holding a path when it deletes."""
    made = set()
    for name in written:
        parts = name.strip("/").split("/")
        made |= {"/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1)}

    def holds(view: str, path: str) -> bool:
        if view.endswith("/.all"):
            return path.rsplit("/", 1)[0] == view[: -len("/.all")]
        return path == view

    return sorted(
        client
        for client, views in held.items()
        if views and (deletes or any(holds(v, p) for v in views for p in made))
    )


@settings(max_examples=200, deadline=None)
@given(
    held=st.dictionaries(
        st.integers(EDGE, EDGE + 4), st.lists(st.sampled_from(OBJECT_PATHS), max_size=2)
    ),
    written=st.lists(objects, max_size=3, unique=True),
    deletes=st.booleans(),
)
def test_an_objects_write_goes_down_to_the_relays_holding_its_objects_or_a_directory_above(
    held: dict[int, list[str]], written: list[str], deletes: bool
) -> None:
    """Rule 3 for ``objects``: chosen by the paths the write may change, parents included (a
    relay below holding ``/a/.all`` gets a write of ``/a/b/x``, which makes ``/a/b``)."""
    relays = Relays(ready_core(PPS))
    kind = relays.core.parts.kinds["pps"]
    for client, views in held.items():
        prims = {n: Held(n, "pps", kind.primitive(path(v)), live=True) for n, v in enumerate(views)}
        relays.below[client] = Below(client, "below", prims, live_writes={"pps"})
    cells = {"cell": [f"{p}?" for p in written], "object": written, "attr": [""] * len(written)}
    gone = ["/d/gone?"] if deletes else []
    frame = Written(
        "pps",
        5,
        5,
        encode_columns({name: np.array(values, dtype=object) for name, values in cells.items()}),
        encode_columns({"cell": np.array(gone, dtype=object)}),
    )
    assert sorted(send.to for send in relays.on_written(frame)) == passed_down(
        held, written, deletes
    )
