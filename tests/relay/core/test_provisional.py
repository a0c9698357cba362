"""Live writes on a relay (relay/core/provisional.py) against a brute-force model of a publisher,
a relay's confirmed path and its subscribers: after any interleaving of live writes, answers,
overrides, micro-batches, pushes, deadlines and lost links, every ``latest`` view converges to
the publisher's state, and no row is sent to a subscriber that already holds it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.provisional import Key, LiveWrites, Patch, Row, same

KEYS = range(4)
DATASET = "d"
WITHIN = 3.0


def select(
    row: Mapping[str, object] | None, groups: frozenset[int], columns: tuple[str, ...]
) -> Row:
    if row is None or row["g"] not in groups:
        return None
    return {name: row[name] for name in columns}


@dataclass
class Relay:
    """The relay's confirmed path as the model sees it: its state and tick."""

    state: dict[Key, dict[str, object]] = field(default_factory=dict)
    tick: int = 0
    generation: int = 0


@dataclass
class Sub:
    """A subscription: its view, what the machinery believes it holds, what it holds."""

    name: str
    groups: frozenset[int]
    columns: tuple[str, ...]
    relay: Relay
    believed: dict[Key, Row] = field(default_factory=dict)  # the machinery's belief, K
    generation: int = -1  # the state its last push was cut from
    holds: dict[Key, Mapping[str, object]] = field(default_factory=dict)  # the subscriber's, H
    pushed: bool = False

    def view(self) -> dict[Key, Row]:
        rows = {k: select(r, self.groups, self.columns) for k, r in self.relay.state.items()}
        return {k: r for k, r in rows.items() if r is not None}

    # the Lens the core asks
    def select(self, key: Key, row: Row) -> Row:
        return select(row, self.groups, self.columns)

    def confirmed(self, keys: Iterable[Key]) -> dict[Key, Row]:
        view = self.view()
        return {k: view.get(k) for k in keys}

    def holds_(self, keys: Iterable[Key]) -> dict[Key, bool]:
        return {k: k in self.believed for k in keys}

    def current(self) -> bool:
        return self.generation == self.relay.generation

    def apply(self, patch: Patch, live: bool) -> None:
        """The subscriber applies a patch; no row goes to one that holds it already, and one not
        marked provisional carries confirmed rows only (docs/protocol.md, ``Push``)."""
        if not patch.provisional:
            view = self.view()
            for key, row in (*patch.entered.items(), *patch.updated.items()):
                assert same(view.get(key), row), (self.name, "not provisional, not confirmed")
            for key in patch.left:
                assert key not in view, (self.name, "left, not provisional, yet confirmed")
        for key, row in patch.entered.items():
            assert key not in self.holds, (self.name, "entered twice", key, row)
            self.holds[key] = row
        for key, row in patch.updated.items():
            assert key in self.holds, (self.name, "updated, not held", key)
            # a live row may repeat an unknown held row only while the machinery lags
            if not (live and not self.current()):
                assert not same(self.holds[key], row), (self.name, "sent twice", key, row)
            self.holds[key] = row
        for key in patch.left:
            assert key in self.holds, (self.name, "left, not held", key)
            del self.holds[key]


class Lens:
    def __init__(self, sub: Sub) -> None:
        self.sub = sub

    def show(self, rows: Mapping[Key, Row]) -> dict[Key, Row]:
        return {key: self.sub.select(key, row) for key, row in rows.items()}

    def confirmed(self, keys: Iterable[Key]) -> dict[Key, Row]:
        return self.sub.confirmed(keys)

    def holds(self, keys: Iterable[Key]) -> dict[Key, bool]:
        return self.sub.holds_(keys)

    def current(self) -> bool:
        return self.sub.current()


@dataclass
class Pending:
    id: int
    rows: dict[Key, Mapping[str, object] | None]
    deadline: float
    offset: int | None = None
    told: bool = False  # the relay knows its offset


rows = st.one_of(st.none(), st.fixed_dictionaries({"v": st.integers(0, 2), "g": st.integers(0, 2)}))
events = st.one_of(
    st.tuples(st.just("write"), st.dictionaries(st.sampled_from(KEYS), rows, min_size=1)),
    st.tuples(st.just("answer"), st.booleans()),
    st.tuples(st.just("tell")),
    st.tuples(st.just("override"), st.sampled_from(KEYS), rows),
    st.tuples(st.just("batch"), st.integers(0, 3)),
    st.tuples(st.just("push"), st.integers(0, 2)),
    st.tuples(st.just("time"), st.floats(0.5, 2.0)),
    st.tuples(st.just("lost"), st.booleans()),
)


class World:
    def __init__(self) -> None:
        self.core = LiveWrites(within=WITHIN)
        self.relay = Relay()
        views = [
            (frozenset({0, 1}), ("v", "g")),
            (frozenset({1, 2}), ("v",)),
            (frozenset({0, 1, 2}), ("v", "g")),
        ]
        self.subs = [Sub(f"s{i}", g, c, self.relay) for i, (g, c) in enumerate(views)]
        for sub in self.subs:
            self.core.watch(sub.name, DATASET, Lens(sub))
        self.log: list[tuple[Key, Mapping[str, object] | None]] = []  # the ingest log
        self.applied = 0  # log entries the publisher's state holds
        self.publisher: dict[Key, dict[str, object]] = {}
        self.unanswered: list[Pending] = []  # forwarded, in order
        self.untold: list[tuple[Pending, bool]] = []  # answered, the answer on its way
        self.pending: dict[int, Pending] = {}  # the model's own view of what is pending
        self.ids = 0
        self.now = 0.0
        self.held = False  # the link came back and no state since: accepted writes wait

    def deliver(self, patches: list[Patch], live: bool = False) -> None:
        for patch in patches:
            sub = next(s for s in self.subs if s.name == patch.sub)
            sub.apply(patch, live)

    def step(self, event: tuple[object, ...]) -> None:
        match event:
            case ("write", dict() as written):
                self.write(written)
            case ("answer", bool() as accept) if self.unanswered:
                write = self.unanswered.pop(0)
                if accept:
                    self.log.extend(write.rows.items())
                    write.offset = len(self.log)
                self.untold.append((write, accept))
            case ("tell",) if self.untold:
                self.tell(*self.untold.pop(0))
            case ("override", key, row):
                self.log.append((key, row))
            case ("batch", int() as more):
                self.batch(more)
            case ("push", int() as index):
                self.push(self.subs[index])
            case ("time", float() as seconds):
                self.now += seconds
                for write in list(self.pending.values()):
                    if self.held:  # no state since the link came back: deadlines wait
                        write.deadline = max(write.deadline, self.now + WITHIN)
                    if write.deadline <= self.now:
                        del self.pending[write.id]
                self.deliver(self.core.expire(self.now))
            case ("lost", bool() as logged):
                self.lost(logged)

    def write(self, written: dict[Key, Mapping[str, object] | None]) -> None:
        self.ids += 1
        write = Pending(self.ids, dict(written), self.now + WITHIN)
        self.unanswered.append(write)
        self.pending[write.id] = write
        self.deliver(self.core.write(write.id, DATASET, written, self.now), live=True)
        for sub in self.subs:
            if sub.pushed:
                for key, row in written.items():
                    assert sub.holds.get(key) == sub.select(key, row)

    def tell(self, write: Pending, accept: bool) -> None:
        if write.id not in self.pending:
            return  # withdrawn (its deadline) before the answer came
        if not accept:
            del self.pending[write.id]
            self.deliver(self.core.refused(write.id))
            return
        assert write.offset is not None
        write.told = True
        self.deliver(self.core.accepted(write.id, write.offset))
        if self.relay.tick >= write.offset:
            del self.pending[write.id]

    def batch(self, more: int) -> None:
        self.applied = min(len(self.log), self.applied + more + 1)
        for key, row in self.log[: self.applied]:
            self.publisher.pop(key, None)
            if row is not None:
                self.publisher[key] = dict(row)
        self.relay.state = {k: dict(r) for k, r in self.publisher.items()}
        self.relay.tick = self.applied
        self.relay.generation += 1
        for write in list(self.pending.values()):
            if write.told and write.offset is not None and write.offset <= self.applied:
                del self.pending[write.id]
        self.held = False
        self.deliver(self.core.swapped(DATASET, self.applied))

    def lost(self, logged: bool) -> None:
        for write in self.unanswered:  # the publisher may or may not have logged them
            if logged:
                self.log.extend(write.rows.items())
        for write, _ in self.untold:  # answered, but the answer is lost
            self.unanswered.append(write)
        for write in self.unanswered:
            self.pending.pop(write.id, None)
        self.unanswered.clear()
        self.untold.clear()
        self.deliver(self.core.away())
        self.core.back()  # a new link at once; the accepted writes wait for its first state
        self.held = bool(self.pending)

    def push(self, sub: Sub) -> None:
        """The machinery's exact delta from its belief to the view now, then reconciled."""
        view = sub.view()
        full = not sub.pushed
        before = {} if full else sub.believed
        entered = {k: r for k, r in view.items() if k not in before}
        updated = {k: r for k, r in view.items() if k in before and not same(before[k], r)}
        left = [k for k in before if k not in view]
        cut = Patch(sub.name, entered, updated, left)  # type: ignore[arg-type]
        out = self.core.reconcile(cut, full)
        if full:
            sub.holds = {}
        sub.believed, sub.generation, sub.pushed = dict(view), self.relay.generation, True
        sub.apply(out, live=False)
        assert sub.holds == self.expected(sub), sub.name

    def expected(self, sub: Sub) -> dict[Key, Mapping[str, object]]:
        """The confirmed view with every pending write's newest row on top (brute force)."""
        view: dict[Key, Row] = dict(sub.view())
        for write in sorted(self.pending.values(), key=lambda w: w.id):
            for key, row in write.rows.items():
                view[key] = sub.select(key, row)
        return {k: r for k, r in view.items() if r is not None}

    def settle(self) -> None:
        """Everything answered and accepted, one micro-batch, every subscription pushed."""
        while self.unanswered:
            self.step(("answer", True))
        while self.untold:
            self.step(("tell",))
        self.step(("batch", len(self.log)))
        for sub in self.subs:
            self.push(sub)


@settings(max_examples=400, deadline=None)
@given(st.lists(events, max_size=40))
def test_every_latest_view_converges_and_nothing_is_sent_twice(
    script: list[tuple[object, ...]],
) -> None:
    world = World()
    for sub in world.subs:
        world.push(sub)
    for event in script:
        world.step(event)
    world.settle()
    assert len(world.core) == 0
    for sub in world.subs:
        publisher = {k: select(r, sub.groups, sub.columns) for k, r in world.publisher.items()}
        assert sub.holds == {k: r for k, r in publisher.items() if r is not None}
        assert not world.core.watching(sub.name)


def test_a_confirmed_write_is_not_sent_again_and_a_refused_one_is_undone() -> None:
    world = World()
    for sub in world.subs:
        world.push(sub)
    s0 = world.subs[0]
    world.step(("write", {1: {"v": 1, "g": 0}}))
    assert s0.holds == {1: {"v": 1, "g": 0}}
    world.step(("answer", True))
    world.step(("tell",))
    world.step(("batch", 0))
    world.push(s0)
    assert world.core.counters.deduplicated == 1 and world.core.counters.confirmed == 1
    world.step(("write", {1: None, 2: {"v": 2, "g": 1}}))
    assert s0.holds == {2: {"v": 2, "g": 1}}
    world.step(("answer", False))
    world.step(("tell",))
    assert s0.holds == {1: {"v": 1, "g": 0}}  # corrected at once
    assert world.core.counters.refused == 1 and world.core.counters.corrected >= 2


def test_an_overridden_write_is_corrected_when_its_batch_comes() -> None:
    world = World()
    for sub in world.subs:
        world.push(sub)
    s2 = world.subs[2]
    world.step(("write", {3: {"v": 1, "g": 2}}))
    world.step(("answer", True))
    world.step(("tell",))
    world.step(("override", 3, {"v": 2, "g": 2}))  # a later producer's write of the key
    world.step(("batch", 1))
    assert s2.holds == {3: {"v": 2, "g": 2}}
    world.push(s2)  # the machinery's push carries what the correction already sent
    assert s2.holds == {3: {"v": 2, "g": 2}}


def test_past_the_limit_a_write_takes_the_confirmed_path_alone() -> None:
    core = LiveWrites(limit=1)
    assert core.write(1, DATASET, {1: None}, 0.0) == []
    assert core.write(2, DATASET, {2: None}, 0.0) == []
    assert (core.counters.writes, core.counters.skipped, len(core)) == (2, 1, 1)


def test_an_answer_after_its_batch_confirms_at_once() -> None:
    world = World()
    for sub in world.subs:
        world.push(sub)
    s0 = world.subs[0]
    world.step(("write", {0: {"v": 0, "g": 0}}))
    world.step(("answer", True))
    world.step(("override", 0, {"v": 2, "g": 0}))
    world.step(("batch", 1))  # carries both before the relay knows the write's offset
    world.step(("tell",))
    assert s0.holds == {0: {"v": 2, "g": 0}} and len(world.core) == 0
    world.push(s0)
    assert s0.holds == {0: {"v": 2, "g": 0}}


def test_an_accepted_write_waits_while_the_link_is_lost_and_until_the_next_state() -> None:
    """A restarted publisher may take minutes to its first micro-batch: an accepted write is not
    withdrawn meanwhile (it is logged), and its deadline runs again from that state on."""
    core = LiveWrites(within=WITHIN)
    core.write(1, DATASET, {1: None}, 0.0)
    core.write(2, DATASET, {2: None}, 0.0)
    core.accepted(1, 5)
    core.away()
    assert (len(core), core.counters.withdrawn) == (1, 1)  # the unanswered one
    assert core.expire(10 * WITHIN) == [] and len(core) == 1
    core.back()
    assert core.expire(20 * WITHIN) == [] and len(core) == 1
    core.swapped(DATASET, 4)  # the first state over the new link does not carry it yet
    assert core.expire(20 * WITHIN + WITHIN / 2) == [] and len(core) == 1
    core.expire(21 * WITHIN)
    assert (len(core), core.counters.withdrawn) == (0, 2)


def test_a_correction_that_shows_another_pending_write_is_provisional() -> None:
    """Two writes of one key, the later refused: the key goes back to the earlier write's row,
    which the publisher has not confirmed yet, so the correction is provisional."""
    world = World()
    for sub in world.subs:
        world.push(sub)
    s0 = world.subs[0]
    world.step(("write", {1: {"v": 1, "g": 0}}))
    world.step(("write", {1: {"v": 2, "g": 0}}))
    world.step(("answer", True))
    world.step(("answer", False))
    world.step(("tell",))
    corrections = world.core.refused(world.untold[0][0].id)
    assert [(p.updated, p.provisional) for p in corrections if p.sub == s0.name] == [
        ({1: {"v": 1, "g": 0}}, True)
    ]
