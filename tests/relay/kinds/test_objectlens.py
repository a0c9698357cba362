"""Writes to an objects dataset shown at once (relay/kinds/objectlens.py through the relay's live
path), sans I/O: a real relay core serving object paths, writes forwarded through it or made
through another relay (passed on by the publisher as ``Written``, the request), and the publisher
played by a brute-force model (its own admission store, its log and its state)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidWrite
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import Send
from fanout.testing.relaycore import ready_core, take
from fanout.views.objects import ObjectPath
from fanout.views.objects.store import SCHEMA, Cell, ObjectStore, Row, cell_of, directory_of
from fanout.views.objects.text import SetAttribute, Value
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Batch,
    DatasetInfo,
    Publish,
    Push,
    Subscribe,
    Written,
)

WIRE = {"string": "str", "int": "<i4", "boolean": "|b1"}
DTYPES = {"string": object, "int": np.int32, "boolean": bool}
# As the publisher describes an objects dataset fed by producers: every column but the key may
# hold NULL (its relays carry the numeric columns' validity).
PPS = DatasetInfo(
    "pps",
    "cell",
    {c: WIRE[t] for c, t in SCHEMA.items()},
    "objects",
    ["object"],
    nullable=[c for c in SCHEMA if c != "cell"],
)
CLIENT = 1
Shown = dict[str, tuple[str, int]]  # cell -> (value, quality), as a subscriber holds it


@dataclass(frozen=True)
class Watch:
    """A subscription, and which cells of the publisher's objects its view holds (brute force)."""

    text: str
    scope: Callable[[str], bool]  # of an object's path
    holds: Callable[[dict[str, object]], bool] | None = None  # of an object's typed attributes
    names: frozenset[str] | None = None  # f= attribute names
    confirmed: bool = False


def typed(cell: Cell) -> object:
    return int(cell.value.text) if cell.value.encoding == "n" else cell.value.text


def rpm_over(attributes: dict[str, object]) -> bool:
    rpm = attributes.get("rpm")
    return isinstance(rpm, int) and rpm > 4000


WATCHES = {
    1: Watch("/c/.all", lambda path: directory_of(path) == "/c"),
    2: Watch("/c/.all?f=rpm>4000", lambda path: directory_of(path) == "/c", rpm_over),
    3: Watch("/c/1?f=state=on", lambda path: path == "/c/1", lambda a: a.get("state") == "on"),
    4: Watch("/c/.all?f=rpm", lambda path: directory_of(path) == "/c", names=frozenset({"rpm"})),
    5: Watch("/c/.all?f=rpm>4000", lambda path: directory_of(path) == "/c", rpm_over, None, True),
}


def oracle(cells: dict[str, Row], watch: Watch) -> Shown:
    """The cells the view holds: each object judged on all of its attributes."""
    objects: dict[str, list[Cell]] = {}
    for row in cells.values():
        cell = Cell(row["object"], row["attr"], Value(row["encoding"], row["value"]), 0, True)
        objects.setdefault(cell.object, []).append(cell)
    out: Shown = {}
    for path, members in objects.items():
        attributes = {c.attr: typed(c) for c in members if c.attr not in ("", "/")}
        if not watch.scope(path) or (watch.holds is not None and not watch.holds(attributes)):
            continue
        for cell in members:
            if watch.names is None or cell.attr in watch.names | {"", "/"}:
                out[cell.key] = (cell.value.text, cells[cell.key]["quality"])
    return out


def columns(rows: list[Row]) -> Any:
    return encode_columns(
        {name: np.array([row[name] for row in rows], dtype=DTYPES[t]) for name, t in SCHEMA.items()}
    )


def keys(cells: list[str]) -> Any:
    return encode_columns({"cell": np.array(cells, dtype=object)})


class Played:
    """A relay serving ``pps``, its subscribers' views, and the publisher as a model."""

    def __init__(self) -> None:
        self.core = ready_core(PPS, policy=Policy(grace=0.0))
        self.live = self.core.serving.live
        self.snapshots: list[int] = []
        self.views: dict[int, Shown] = {}
        self.now = 0.0
        self.seq = -1
        self.store = ObjectStore()  # the publisher's admission store
        self.log: list[tuple[str, Row | None]] = []
        self.sent: dict[str, Row] = {}  # the state the relay was last sent
        self.waiting: list[tuple[int, list[Row], list[str]]] = []
        self.ids = 0
        # What the relay shows, by brute force: its active state, the batch to swap in at its
        # next round, and each write it shows, the cells it changes by the admission rules
        # over the active cells and the writes before it, and its offset once accepted.
        self.active: dict[str, Row] = {}
        self.tick = -1
        self.batched: tuple[dict[str, Row], int] | None = None
        self.shown: dict[int, tuple[dict[str, Row | None], int | None]] = {}
        # Per subscription, how often the active state changed each cell since the subscriber
        # last got it; and the cells of each batch not swapped in yet.
        self.changes: dict[int, dict[str, int]] = {}
        self.unswapped: list[list[str]] = []
        for number, rpm, state in ((1, "900", "on"), (2, "5000", "off")):
            self.admit(*request(f"/c/{number}", [("rpm", rpm, 0), ("state", state, 0)]))
        for sub, watch in WATCHES.items():
            frame = Subscribe(sub, "pps", ObjectPath(watch.text), rate=1000.0)
            if watch.confirmed:
                frame = Subscribe(sub, "pps", ObjectPath(watch.text), rate=1000.0, confirmed=True)
            self.take(self.core.on_subscribe(CLIENT, frame))
        self.micro_batch()
        self.round()

    def take(self, sends: list[Send]) -> None:
        take(sends, self.snapshots, self.apply)

    def apply(self, push: Push) -> None:
        """As the client library does: a delta never enters a held cell, nor updates or removes
        one not held; a confirmed push updates a cell to what it is only if the state changed
        it away and back since the subscriber got it (two batches swapped in at once)."""
        rows = self.views.setdefault(push.sub, {})
        changes = self.changes.setdefault(push.sub, {})
        if push.full:
            rows.clear()
            changes.clear()
        for gone in decode_columns(push.left).get("cell", np.empty(0)).tolist():
            assert gone in rows, (push.sub, "left, not held", gone)
            del rows[gone]
            changes.pop(gone, None)
        for section, held in ((push.entered, False), (push.updated, True)):
            got = decode_columns(section)
            if not got:
                continue
            cells = got["cell"].tolist()
            sent = zip(got["value"].tolist(), got["quality"].tolist(), strict=True)
            for cell, row in zip(cells, sent, strict=True):
                assert (cell in rows) == held, (push.sub, cell, rows)
                if held and not push.provisional and rows[cell] == row:
                    assert changes.get(cell, 0) >= 2, ("twice", push.sub, cell, row)
                rows[cell] = row
                changes.pop(cell, None)

    def round(self) -> None:
        self.now += 1.0
        for cells in self.unswapped:  # swapped in now (``end_epoch``)
            for changes in self.changes.values():
                for cell in cells:
                    changes[cell] = changes.get(cell, 0) + 1
        self.unswapped.clear()
        if self.batched is not None:
            (self.active, self.tick), self.batched = self.batched, None
            for id, (_, offset) in list(self.shown.items()):
                if offset is not None and offset <= self.tick:
                    del self.shown[id]
        self.take(self.core.pushes(self.now, lambda client: True))

    def showing(self) -> dict[str, Row]:
        """The active cells with the shown writes' on top, in order."""
        cells = dict(self.active)
        for changed, _ in self.shown.values():
            for key, row in changed.items():
                cells.pop(key, None)
                if row is not None:
                    cells[key] = row
        return cells

    def admit(self, upserts: list[Row], deletes: list[str]) -> bool:
        try:
            effects = self.store.admit(upserts, deletes)
        except InvalidWrite:
            return False
        self.log += [(row["cell"], row) for row in effects.upserts]
        self.log += [(key, None) for key in effects.deletes]
        return True

    def micro_batch(self) -> None:
        state: dict[str, Row] = {}
        for key, row in self.log:
            state.pop(key, None)
            if row is not None:
                state[key] = row
        upserts = [row for key, row in state.items() if self.sent.get(key) != row]
        gone = [key for key in self.sent if key not in state]
        self.sent = state
        self.batched = (dict(state), len(self.log))
        self.unswapped.append([row["cell"] for row in upserts] + gone)
        self.seq += 1
        frame = Batch(
            "pps", 1, self.seq, len(self.log), 0.0, columns(upserts), keys(gone), self.snapshots
        )
        self.snapshots = []
        self.take(self.core.on_batch(frame))

    def step(self, event: tuple[Any, ...]) -> None:
        match event:
            case ("write", str() as path, list() as lines):
                self.forward(*request(path, lines))
            case ("delete", str() as path):
                self.forward([], [f"{path}?"])
            case ("answer", bool() as accept) if self.waiting:
                upstream, upserts, deletes = self.waiting.pop(0)
                if accept and self.admit(upserts, deletes):
                    if upstream in self.shown:
                        self.shown[upstream] = (self.shown[upstream][0], len(self.log))
                        if len(self.log) <= self.tick:
                            del self.shown[upstream]
                    self.take(self.live.accepted(upstream, len(self.log)))
                else:
                    self.shown.pop(upstream, None)
                    self.take(self.live.refused(upstream))
            case ("override", str() as path, list() as lines):  # another producer's
                self.admit(*request(path, lines))
            case ("elsewhere", str() as path, lines):  # through another relay (None: delete)
                self.passed(*(request(path, lines) if lines else ([], [f"{path}?"])))
            case ("batch",):
                self.micro_batch()
            case ("round",):
                self.round()
            case ("late",):
                self.now += 60.0
                self.shown.clear()
                self.take(self.live.expire(self.now))

    def forward(self, upserts: list[Row], deletes: list[str]) -> None:
        self.ids += 1
        self.waiting.append((-self.ids, upserts, deletes))
        self.shown[-self.ids] = (self.admitted(upserts, deletes), None)
        frame = Publish(7, "pps", columns(upserts), keys(deletes))
        self.take(self.live.write(frame, -self.ids, self.now))

    def passed(self, upserts: list[Row], deletes: list[str]) -> None:
        """A write made through another relay: if the publisher admits it, it is passed here
        once logged (the request, at its offsets), shown unless the active state carries it,
        admitted over what this relay shows, and confirmed by the first state of its offset."""
        first = len(self.log)
        if not self.admit(upserts, deletes):
            return  # refused: passed to no relay
        last = len(self.log)
        if last > self.tick:
            self.ids += 1
            self.shown[1_000_000 + self.ids] = (self.admitted(upserts, deletes), last)
        frame = Written("pps", first, last, columns(upserts), keys(deletes))
        self.take(self.live.from_elsewhere(frame, self.now))

    def admitted(self, upserts: list[Row], deletes: list[str]) -> dict[str, Row | None]:
        """The cells a write changes as this relay admits it, over what it shows (none if its
        rules refuse it)."""
        store = ObjectStore(cell_of(row) for row in self.showing().values())
        try:
            effects = store.admit(upserts, deletes)
        except InvalidWrite:
            return {}
        changed: dict[str, Row | None] = {row["cell"]: row for row in effects.upserts}
        return {**changed, **dict.fromkeys(effects.deletes)}

    def check(self) -> None:
        """Each view is what the relay shows: live writes on top, or the confirmed cells."""
        showing = self.showing()
        for sub, watch in WATCHES.items():
            assert self.views[sub] == oracle(self.active if watch.confirmed else showing, watch)

    def state(self) -> dict[str, Row]:
        return {cell.key: cell.row() for cell in self.store}


def request(path: str, lines: list[tuple[str, str | None, int]]) -> tuple[list[Row], list[str]]:
    """A write of attributes (value None: deleted) as ``client.objects.Objects.write`` sends it."""
    upserts = [Cell(path, "", Value("", ""), 0, True).row()]
    for attr, value, quality in lines:
        if value is not None:
            encoding = "n" if attr == "rpm" else ""
            line = SetAttribute(attr, Value(encoding, value), quality, True)
            upserts.append(Cell(path, attr, line.value, quality, True).row())
    return upserts, [f"{path}?{attr}" for attr, value, _ in lines if value is None]


PATHS = ["/c/1", "/c/2", "/c/3"]
line = st.one_of(
    st.tuples(st.just("rpm"), st.sampled_from(["900", "5000", None]), st.integers(0, 2)),
    st.tuples(st.just("state"), st.sampled_from(["on", "off", None]), st.integers(0, 2)),
)
lines = st.lists(line, min_size=1, max_size=2, unique_by=lambda t: t[0])
events = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), lines),
    st.tuples(st.just("delete"), st.sampled_from(PATHS)),
    st.tuples(st.just("answer"), st.booleans()),
    st.tuples(st.just("override"), st.sampled_from(PATHS), lines),
    st.tuples(st.just("elsewhere"), st.sampled_from(PATHS), lines),
    st.tuples(st.just("elsewhere"), st.sampled_from(PATHS), st.none()),
    st.tuples(st.just("batch")),
    st.tuples(st.just("round")),
    st.tuples(st.just("late")),
)


def expected(talk: Played) -> dict[int, Shown]:
    state = talk.state()
    return {sub: oracle(state, watch) for sub, watch in WATCHES.items()}


def answered_and_carried(talk: Played) -> None:
    """Every write answered and accepted, one micro-batch, every view pushed: each view is the
    publisher's, and nothing is pending."""
    while talk.waiting:
        talk.step(("answer", True))
    talk.micro_batch()
    talk.round()
    assert talk.views == expected(talk)
    assert len(talk.live.writes) == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=25))
@example(  # /c/2?rpm 900 and back to 5000 between two pushes of 5: sent again, changed twice
    [
        ("write", "/c/2", [("rpm", "900", 0)]),
        ("write", "/c/1", [("rpm", "900", 0)]),
        ("answer", True),
        ("batch",),
        ("write", "/c/1", [("rpm", "900", 0)]),
        ("write", "/c/2", [("rpm", "5000", 0)]),
    ]
)
def test_latest_objects_views_converge_to_the_publishers_objects(script: list[Any]) -> None:
    """Live writes, refusals (the publisher's rules or its choice), other producers' writes and
    micro-batches in any order: at every step each view holds what a brute-force relay shows
    (writes admitted in order over its confirmed cells, each object judged whole), and once
    everything is answered and carried the publisher's cells; no delta was inconsistent."""
    talk = Played()
    for event in script:
        talk.step(event)
        talk.check()
    answered_and_carried(talk)


def test_a_write_that_makes_an_object_pass_shows_all_of_its_cells_at_once() -> None:
    talk = Played()
    assert "/c/1?state" not in talk.views[2]
    talk.step(("write", "/c/1", [("rpm", "9000", 0)]))
    # /c/1 passes rpm>4000 now: its marker and its state, never written, enter with it
    assert {"/c/1?", "/c/1?rpm", "/c/1?state"} <= set(talk.views[2])
    assert talk.views[2]["/c/1?rpm"] == ("9000", 0)
    assert talk.views[5] == expected(talk)[5]  # confirmed rows only: not yet
    talk.step(("write", "/c/2", [("rpm", "100", 0)]))
    assert not any(cell.startswith("/c/2") for cell in talk.views[2])  # /c/2 stops passing
    talk.step(("answer", False))  # the first is refused: /c/1 leaves again
    assert not any(cell.startswith("/c/1") for cell in talk.views[2])
    assert talk.live.writes.counters.corrected >= 3


def test_a_write_of_lower_quality_is_not_shown_as_the_publisher_drops_it() -> None:
    talk = Played()
    talk.step(("write", "/c/1", [("state", "off", 5)]))
    assert talk.views[1]["/c/1?state"] == ("off", 5)
    talk.step(("write", "/c/1", [("state", "on", 1)]))  # lower than the pending 5
    assert talk.views[1]["/c/1?state"] == ("off", 5)
    talk.step(("answer", True))
    talk.step(("answer", True))
    talk.micro_batch()
    talk.round()
    assert talk.views == expected(talk)
    assert talk.views[1]["/c/1?state"] == ("off", 5)


def test_deleting_an_object_withdraws_its_cells_at_once() -> None:
    talk = Played()
    talk.step(("delete", "/c/2"))
    live = [view for sub, view in talk.views.items() if not WATCHES[sub].confirmed]
    assert not any(cell.startswith("/c/2") for view in live for cell in view)
    assert "/c/2?rpm" in talk.views[5]
    talk.step(("answer", True))
    talk.micro_batch()
    talk.round()
    assert talk.views == expected(talk)
    counters = talk.live.writes.counters
    assert (counters.confirmed, counters.corrected) == (1, 0)


def test_a_confirmed_cell_of_an_object_a_pending_write_shows_reaches_its_watcher() -> None:
    talk = Played()
    talk.step(("override", "/c/1", [("state", "on", 1)]))  # another producer's, not swapped yet
    talk.step(("batch",))
    talk.step(("write", "/c/1", [("rpm", "5000", 0)]))  # /c/1 enters rpm>4000, state as on/0
    talk.step(("round",))  # no push of the confirmed view (/c/1 fails it) carries on/1
    talk.check()
    assert talk.views[2]["/c/1?state"] == ("on", 1)


def test_a_cell_shown_with_a_pending_write_leaves_when_its_object_loses_it() -> None:
    talk = Played()
    talk.step(("write", "/c/1", [("rpm", "900", 1), ("state", None, 0)]))
    talk.step(("late",))  # withdrawn at the relay, yet logged by the publisher
    talk.step(("write", "/c/1", [("rpm", "5000", 0)]))  # shows /c/1?state: on; lower quality
    assert talk.views[2]["/c/1?state"] == ("on", 0)
    answered_and_carried(talk)


def test_a_write_through_another_relay_is_admitted_here_and_confirmed_by_its_offset() -> None:
    talk = Played()
    talk.step(("elsewhere", "/c/1", [("rpm", "9000", 0)]))  # passed on: /c/1 enters rpm>4000
    assert talk.views[2]["/c/1?rpm"] == ("9000", 0) and "/c/1?state" in talk.views[2]
    assert "/c/1?rpm" not in talk.views[5]  # confirmed only: not yet
    talk.step(("elsewhere", "/c/2", None))  # deleting the object: all of its cells, here too
    assert not any(cell.startswith("/c/2") for cell in talk.views[1])
    talk.step(("batch",))
    talk.step(("round",))
    assert talk.views == expected(talk)
    counters = talk.live.writes.counters
    assert (talk.live.passed, counters.confirmed, counters.corrected) == (2, 2, 0)
    upserts, deletes = request("/c/3", [("rpm", "5000", 0)])
    talk.step(("override", "/c/3", [("rpm", "5000", 0)]))
    talk.step(("batch",))
    talk.step(("round",))  # the batch carried it before it was passed on: not shown again
    frame = Written("pps", 0, len(talk.log), columns(upserts), keys(deletes))
    talk.take(talk.live.from_elsewhere(frame, talk.now))
    assert talk.live.late == 1 and len(talk.live.writes) == 0
    assert talk.views == expected(talk)
