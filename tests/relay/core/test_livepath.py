"""Writes made through a relay shown at once (relay/core/livepath.py), sans I/O: a relay's core
with a topic dataset, a write forwarded, the publisher's answers and batches played by hand."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import Send
from fanout.testing.catalog import sensors
from fanout.testing.relaycore import ready_core, take
from fanout.views.topic import parse as topic
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Batch,
    Publish,
    Push,
    Subscribe,
    Written,
)

# Its value column may hold NULL, as the publisher's columns other than the key may.
SENSORS = msgspec.structs.replace(sensors(), nullable=["value"])
CLIENT = 1


class Talk:
    """A relay serving ``sensors``; its subscribers' views as the client library keeps them."""

    def __init__(self) -> None:
        self.core = ready_core(SENSORS, policy=Policy(grace=0.0))
        self.live = self.core.serving.live
        self.snapshots: list[int] = []
        self.seq = -1
        self.now = 0.0
        self.views: dict[int, dict[str, float]] = {}
        self.pushes: list[Push] = []
        # Per subscription, how often its relay's active state changed each key since the
        # subscriber last got that key; and the keys of each batch not swapped in yet.
        self.changes: dict[int, dict[str, int]] = {}
        self.unswapped: list[tuple[str, ...]] = []

    def subscribe(self, sub: int, text: str, **options: Any) -> None:
        request = Subscribe(sub, "sensors", topic(text), rate=1000.0, **options)
        self.take(self.core.on_subscribe(CLIENT, request))

    def take(self, sends: list[Send]) -> list[Push]:
        pushes = take(sends, self.snapshots, self.apply)
        self.pushes += pushes
        return pushes

    def apply(self, push: Push) -> None:
        """As the client library does; a delta never enters a held key, nor updates or removes
        one not held, and a push that is not provisional updates a row to what it is only if
        the state changed that row away and back since the subscriber got it (docs/protocol.md,
        "Holding a view": two batches swapped in at once; a provisional push may: the relay did
        not know the value held)."""
        rows = self.views.setdefault(push.sub, {})
        changes = self.changes.setdefault(push.sub, {})
        if push.full:
            rows.clear()
            changes.clear()
        for gone in decode_columns(push.left).get("topic", np.empty(0)).tolist():
            del rows[gone]
            changes.pop(gone, None)
        for section, held in ((push.entered, False), (push.updated, True)):
            columns = decode_columns(section)
            if columns:
                topics = columns["topic"].tolist()
                assert all((t in rows) == held for t in topics), (push.sub, topics, rows)
                sent = dict(zip(topics, columns["value"].tolist(), strict=True))
                if held and not push.provisional:
                    again = {t: v for t, v in sent.items() if rows[t] == v}
                    assert all(changes.get(t, 0) >= 2 for t in again), ("twice", push.sub, again)
                rows.update(sent)
                for t in topics:
                    changes.pop(t, None)

    def swap(self) -> None:
        """The batches given since the last round are swapped in at this one (``end_epoch``)."""
        for keys in self.unswapped:
            for changes in self.changes.values():
                for key in keys:
                    changes[key] = changes.get(key, 0) + 1
        self.unswapped.clear()

    def batch(self, tick: int, upserts: dict[str, float], deletes: tuple[str, ...] = ()) -> None:
        self.seq += 1
        frame = Batch(
            "sensors",
            1,
            self.seq,
            tick,
            0.0,
            _rows(upserts),
            encode_columns({"topic": np.array(deletes, dtype=object)}),
            self.snapshots,
        )
        self.snapshots = []
        self.unswapped.append((*upserts, *deletes))
        self.take(self.core.on_batch(frame))

    def round(self) -> list[Push]:
        self.now += 1.0
        self.swap()
        return self.take(self.core.pushes(self.now, lambda client: True))

    def write(
        self, upstream: int, upserts: dict[str, float], deletes: tuple[str, ...] = ()
    ) -> list[Push]:
        request = Publish(
            7, "sensors", _rows(upserts), encode_columns({"topic": np.array(deletes, dtype=object)})
        )
        return self.take(self.live.write(request, upstream, self.now))


def written(first: int, last: int, upserts: dict[str, float], deletes: tuple[str, ...] = ()) -> Any:
    """A write made through another relay, logged at ``first..last``, as the publisher passes it."""
    keys = encode_columns({"topic": np.array(deletes, dtype=object)})
    return Written("sensors", first, last, _rows(upserts), keys)


def _rows(upserts: dict[str, float]) -> Any:
    return encode_columns(
        {"topic": np.array(list(upserts), dtype=object), "value": np.array(list(upserts.values()))}
    )


def started() -> Talk:
    talk = Talk()
    talk.subscribe(1, "a/#")
    talk.subscribe(2, "b/#")
    talk.subscribe(3, "a/#", confirmed=True)
    talk.subscribe(4, "a/#", mode="every")
    talk.batch(1, {"a/1": 1.0, "b/1": 2.0})
    talk.round()
    assert talk.views == {1: {"a/1": 1.0}, 2: {"b/1": 2.0}, 3: {"a/1": 1.0}, 4: {"a/1": 1.0}}
    return talk


def test_a_write_reaches_its_latest_subscribers_at_once_marked_provisional() -> None:
    talk = started()
    (shown,) = talk.write(-1, {"a/1": 5.0, "a/2": 6.0})
    assert shown.sub == 1 and shown.provisional and not shown.full
    assert talk.views[1] == {"a/1": 5.0, "a/2": 6.0}
    assert talk.views[3] == {"a/1": 1.0}  # confirmed rows only
    assert talk.views[4] == {"a/1": 1.0}  # mode every stays on the log's path


def test_the_batch_that_carries_it_is_not_delivered_twice() -> None:
    talk = started()
    talk.write(-1, {"a/1": 5.0, "a/2": 6.0})
    assert talk.live.accepted(-1, 2) == []
    talk.batch(2, {"a/1": 5.0, "a/2": 6.0})
    talk.pushes.clear()
    talk.round()
    to_one = [p for p in talk.pushes if p.sub == 1]
    assert all(not decode_columns(p.entered) and not decode_columns(p.updated) for p in to_one)
    assert talk.views[1] == talk.views[3] == {"a/1": 5.0, "a/2": 6.0}
    counters = talk.live.writes.counters
    assert (counters.confirmed, counters.deduplicated, counters.corrected) == (1, 2, 0)


def test_a_refused_write_is_undone_where_it_was_shown() -> None:
    talk = started()
    talk.write(-1, {"a/2": 6.0}, deletes=("a/1",))
    assert talk.views[1] == {"a/2": 6.0}
    (undone,) = talk.take(talk.live.refused(-1))
    assert not undone.provisional
    assert talk.views[1] == {"a/1": 1.0}
    assert talk.live.writes.counters.corrected == 2


def test_an_overridden_write_is_corrected_and_counted() -> None:
    talk = started()
    talk.write(-1, {"a/1": 5.0})
    talk.live.accepted(-1, 2)
    talk.batch(3, {"a/1": 9.0})  # a later producer's write of the same topic
    talk.pushes.clear()
    talk.round()  # its state swapped in: corrected at once, its push then carries nothing new
    assert talk.views[1] == {"a/1": 9.0}
    counters = talk.live.writes.counters
    assert (counters.confirmed, counters.corrected, counters.deduplicated) == (1, 1, 1)
    assert [p.sub for p in talk.pushes if decode_columns(p.updated)] == [1, 3, 4]


def test_a_subscription_changed_to_confirmed_gets_back_to_the_confirmed_rows() -> None:
    talk = started()
    talk.write(-1, {"a/1": 5.0})
    talk.subscribe(1, "a/+", confirmed=True)  # a view change, asking confirmed rows only
    talk.round()
    assert talk.views[1] == {"a/1": 1.0}
    assert talk.write(-2, {"a/2": 7.0}) == []  # not shown any more
    talk.take(talk.live.refused(-1))
    talk.take(talk.live.refused(-2))
    talk.round()
    assert talk.views[1] == {"a/1": 1.0}


def test_a_write_the_publisher_never_confirms_is_withdrawn_at_its_deadline() -> None:
    talk = started()
    talk.write(-1, {"a/9": 5.0})
    assert talk.take(talk.live.expire(talk.now + 1.0)) == []
    talk.take(talk.live.expire(talk.now + 60.0))
    assert talk.views[1] == {"a/1": 1.0}
    assert talk.live.writes.counters.withdrawn == 1


def test_a_write_not_of_the_datasets_columns_is_not_shown() -> None:
    talk = started()
    bad = Publish(7, "sensors", encode_columns({"topic": np.array(["a/3"], dtype=object)}))
    assert talk.live.write(bad, -1, 0.0) == []
    assert talk.live.invalid == 1 and len(talk.live.writes) == 0


def test_a_null_written_is_shown_as_null_and_not_sent_again() -> None:
    talk = started()
    value = np.ma.MaskedArray([0.0], mask=[True])
    columns = encode_columns({"topic": np.array(["a/1"], dtype=object), "value": value})
    request = Publish(7, "sensors", columns, encode_columns({"topic": np.array([], dtype=object)}))
    talk.take(talk.live.write(request, -1, talk.now))
    assert talk.views[1] == {"a/1": None}
    talk.live.accepted(-1, 2)
    frame = Batch("sensors", 1, talk.seq + 1, 2, 0.0, columns, encode_columns({}), [])
    talk.seq += 1
    talk.take(talk.core.on_batch(frame))
    talk.pushes.clear()
    talk.round()
    assert talk.views[1] == talk.views[3] == {"a/1": None}
    assert talk.live.writes.counters.deduplicated == 1
    assert all(not decode_columns(p.updated) for p in talk.pushes if p.sub == 1)


def test_a_write_made_elsewhere_is_shown_and_confirmed_by_its_tick() -> None:
    talk = started()
    (shown,) = talk.take(talk.live.from_elsewhere(written(2, 3, {"a/2": 6.0}, ("a/1",)), 0.0))
    assert shown.sub == 1 and shown.provisional
    assert talk.views[1] == {"a/2": 6.0} and talk.views[3] == {"a/1": 1.0}
    talk.batch(2, {}, ("a/1",))  # carries only part of it: still pending
    talk.round()
    assert talk.views[1] == {"a/2": 6.0} and len(talk.live.writes) == 1
    talk.batch(3, {"a/2": 6.0})
    talk.pushes.clear()
    talk.round()
    assert talk.views[1] == talk.views[3] == {"a/2": 6.0}
    assert all(not decode_columns(p.entered) for p in talk.pushes if p.sub == 1)
    counters = talk.live.writes.counters
    assert (talk.live.passed, counters.confirmed, counters.corrected) == (1, 1, 0)


def test_a_write_made_elsewhere_that_the_state_carries_already_is_not_shown() -> None:
    talk = started()  # its state is of tick 1
    assert talk.live.from_elsewhere(written(1, 1, {"a/1": 9.0}), 0.0) == []
    assert (talk.live.late, len(talk.live.writes)) == (1, 0)


TOPICS = ["a/0", "a/1", "b/0"]
values = st.one_of(st.none(), st.sampled_from([1.0, 2.0]))  # None: deleted
events = st.one_of(
    st.tuples(st.just("write"), st.dictionaries(st.sampled_from(TOPICS), values, min_size=1)),
    st.tuples(st.just("answer"), st.booleans()),
    st.tuples(st.just("elsewhere"), st.dictionaries(st.sampled_from(TOPICS), values, min_size=1)),
    st.tuples(st.just("override"), st.sampled_from(TOPICS), values),
    st.tuples(st.just("batch")),
    st.tuples(st.just("round")),
    st.tuples(st.just("late")),
)


class Played(Talk):
    """A relay, with the publisher played by a brute-force model: its log and its state."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, float | None]] = []
        self.state: dict[str, float] = {}
        self.sent: dict[str, float] = {}  # the state the relay was last sent
        self.waiting: list[tuple[int, dict[str, float | None]]] = []
        self.ids = 0

    def step(self, event: tuple[Any, ...]) -> None:
        match event:
            case ("write", dict() as rows):
                self.ids += 1
                self.waiting.append((-self.ids, rows))
                upserts = {k: v for k, v in rows.items() if v is not None}
                deletes = tuple(k for k, v in rows.items() if v is None)
                self.write(-self.ids, upserts, deletes)
            case ("answer", bool() as accept) if self.waiting:
                upstream, rows = self.waiting.pop(0)
                if accept:
                    self.log += rows.items()
                    self.take(self.live.accepted(upstream, len(self.log)))
                else:
                    self.take(self.live.refused(upstream))
            case ("elsewhere", dict() as rows):  # through another relay: logged, passed on
                first = len(self.log) + 1
                self.log += rows.items()
                upserts = {k: v for k, v in rows.items() if v is not None}
                deletes = tuple(k for k, v in rows.items() if v is None)
                frame = written(first, len(self.log), upserts, deletes)
                self.take(self.live.from_elsewhere(frame, self.now))
            case ("override", str() as key, value):
                self.log.append((key, value))
            case ("batch",):
                self.micro_batch()
            case ("round",):
                self.round()
            case ("late",):  # past every deadline: what is pending is withdrawn
                self.now += 60.0
                self.take(self.live.expire(self.now))

    def micro_batch(self) -> None:
        for key, value in self.log:
            self.state.pop(key, None)
            if value is not None:
                self.state[key] = value
        upserts = {k: v for k, v in self.state.items() if self.sent.get(k) != v}
        deletes = tuple(k for k in self.sent if k not in self.state)
        self.sent = dict(self.state)
        self.batch(len(self.log), upserts, deletes)


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=25))
@example(  # a/0 deleted and back between two pushes of 3: sent again, as it changed twice
    [
        ("write", {"a/0": None}),
        ("elsewhere", {"a/0": 1.0}),
        ("batch",),
        ("answer", True),
        ("round",),
        ("write", {"a/0": None}),
        ("batch",),
        ("write", {"a/0": 1.0, "a/1": None}),
    ]
)
def test_latest_views_of_a_real_relay_converge_to_the_publishers_state(script: list[Any]) -> None:
    """The relay's core, kinds and encodings as they run, live writes (its own and others'
    passed on) and the publisher's answers, overrides and micro-batches in any order: once
    everything is answered and carried, every view is the publisher's state, and no delta was
    inconsistent on the way."""
    talk = Played()
    talk.subscribe(1, "a/#")
    talk.subscribe(2, "#")
    talk.subscribe(3, "a/#", confirmed=True)
    talk.micro_batch()
    talk.round()
    for event in script:
        talk.step(event)
    while talk.waiting:
        talk.step(("answer", True))
    talk.micro_batch()
    talk.round()
    expected = dict(talk.state)
    assert talk.views[2] == expected
    assert talk.views[1] == talk.views[3] == {k: v for k, v in expected.items() if k[0] == "a"}
    assert len(talk.live.writes) == 0


def test_each_durable_write_goes_at_once_to_whom_takes_them() -> None:
    """Rule 4 (the MQTT front end's clients): ours once logged, never a refused one; one made
    elsewhere as it comes, unless the state carries it (the log delivers it then); and the
    relay asks for the dataset's writes though no ``latest`` view here takes them."""
    talk = Talk()
    got: list[list[str]] = []
    talk.live.durable = lambda dataset, upserts: got.append(
        decode_columns(upserts)["topic"].tolist()
    )
    talk.live.durable_datasets = frozenset({"sensors"})
    assert talk.live.wanted() == {"sensors"}
    talk.subscribe(1, "a/#", mode="every")
    talk.batch(1, {"a/1": 1.0})
    talk.round()
    for upstream, name in ((-1, "a/2"), (-2, "a/3"), (-3, "a/4"), (-4, "a/5")):
        talk.write(upstream, {name: 5.0})
    assert got == []  # forwarded, not logged yet
    talk.live.accepted(-1, 2)
    talk.live.refused(-2)
    talk.live.lost()  # -3 and -4 answered unavailable: they may or may not be logged
    talk.live.accepted(-3, 3)
    talk.live.from_elsewhere(written(2, 3, {"b/1": 1.0}), 0.0)
    talk.live.from_elsewhere(written(1, 1, {"b/2": 1.0}), 0.0)  # the state carries it
    assert got == [["a/2"], ["b/1"]]


def test_durable_writes_are_asked_for_only_while_a_client_could_take_one() -> None:
    """Rule 4: of ``durable_datasets``, those ``durable_wanted`` names now (an MQTT port's
    subscriptions, ``mqtt.fromlog.LogFeed.wanted``); a ``latest`` view asks for its own."""
    talk = Talk()
    talk.live.durable_datasets = frozenset({"sensors"})
    clients: set[str] = set()
    talk.live.durable_wanted = lambda: clients
    assert talk.live.wanted() == set()
    clients.add("sensors")
    assert talk.live.wanted() == {"sensors"}


def test_a_write_the_state_carried_already_is_late_only_for_a_dataset_watched_here() -> None:
    """``live_late`` counts writes a ``latest`` view here would have shown had the confirmed
    path not been faster; one of a dataset nobody here watches was late for no one."""
    talk = Talk()
    talk.subscribe(1, "a/#", mode="every")  # no lens: watches nothing
    talk.batch(2, {"a/1": 1.0})
    talk.round()
    assert talk.live.from_elsewhere(written(1, 2, {"a/2": 1.0}), 0.0) == []
    assert talk.live.stats()["live_late"] == 0
    talk.subscribe(2, "a/#")
    talk.round()
    assert talk.live.from_elsewhere(written(1, 2, {"a/2": 1.0}), 0.0) == []
    assert talk.live.stats()["live_late"] == 1


def test_a_write_on_a_link_of_our_own_is_shown_at_once_and_its_copy_passed_back_not_again() -> None:
    """``ours`` (the MQTT port's producer link): shown before any answer, as a forwarded write
    is; the publisher's copy passed back is not shown twice, and confirms it by its offset
    whichever of it and the link's answer comes first; a refused one is undone."""
    talk = started()
    request = Publish(1, "sensors", _rows({"a/1": 5.0}), encode_columns({}))
    id, sends = talk.live.ours(request, talk.now)
    (shown,) = talk.take(sends)
    assert shown.sub == 1 and shown.provisional and talk.views[1] == {"a/1": 5.0}
    copy = Written("sensors", 2, 2, request.upserts, request.deletes)
    assert talk.live.from_elsewhere(copy, talk.now) == []
    assert talk.live.accepted(id, 2) == []
    assert (talk.live.passed, talk.live.writes.counters.writes) == (0, 1)
    talk.batch(2, {"a/1": 5.0})
    talk.round()
    assert talk.views[1] == talk.views[3] == {"a/1": 5.0} and len(talk.live.writes) == 0
    refused = Publish(2, "sensors", _rows({"a/2": 7.0}), encode_columns({}))
    id, sends = talk.live.ours(refused, talk.now)
    talk.take(sends)
    assert talk.views[1] == {"a/1": 5.0, "a/2": 7.0}
    talk.take(talk.live.refused(id))
    assert talk.views[1] == {"a/1": 5.0} and talk.live.writes.counters.corrected == 1
