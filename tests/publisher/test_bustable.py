"""The database connector's side of the bus, without I/O (publisher.bustable)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cache.core import CacheCore
from fanout.errors import ConfigError
from fanout.publisher.bustable import ObjectTable, object_type
from fanout.publisher.config import parse_config
from fanout.wire.bus import InvalidLabel, InvalidSubject, decode_row, parse_object_subject

CONFIG = """
[bus]
url = "nats://127.0.0.1:4222"
domain = "auction"
[datasets.item]
key = "id"
schema = { id = "long", title = "string", category = "string" }
source = { kind = "postgres", url = "postgresql://u@127.0.0.1/db", table = "items" }
bus = { label = "category" }
"""


def table(fragment_bytes: int = 1 << 16) -> ObjectTable:
    item = parse_config(CONFIG).datasets["item"]
    return ObjectTable(object_type(item), "auction", fragment_bytes)


def row(key: int, category: str | None, title: str = "t") -> dict[str, object]:
    return {"id": key, "title": title, "category": category}


def kinds(out: list) -> list[tuple[str, str]]:
    return [(subject.split(".")[0], subject) for subject, _ in out]


def test_the_type_says_where_it_is_stored() -> None:
    info = object_type(parse_config(CONFIG).datasets["item"]).info
    assert (info.key, info.integer_key, info.label, info.table) == ("id", True, "category", "items")


def test_creates_updates_deletes_and_label_moves() -> None:
    objects = table()
    out = objects.changes([row(1, "a.b"), row(2, None)], [2, 1], [False, False], "b1.0", 0.0)
    # in version order, each under its subject
    assert kinds(out) == [
        ("CREATE", "CREATE.item.2.auction.-"),
        ("CREATE", "CREATE.item.1.auction.a.b"),
    ]
    out = objects.changes([row(1, "c")], [3], [False], "b1.1", 0.0)
    assert kinds(out) == [
        ("UPDATENOTIFY", "UPDATENOTIFY.item.1.auction.c"),
        ("UPDATENOTIFY", "UPDATENOTIFY.item.1.auction.a.b"),  # the old label sees it leave
    ]
    assert decode_row(out[1][1].data) == row(1, "c")
    out = objects.changes([row(1, "c")], [4], [True], "b1.2", 0.0)
    assert kinds(out) == [("DELETE", "DELETE.item.1.auction.c")]
    assert not out[0][1].found
    # a delete of what is not there (a re-run micro-batch) publishes nothing
    assert objects.changes([row(1, "c")], [4], [True], "b1.2", 0.0) == []


def test_a_load_is_answered_under_the_objects_subject_and_a_missing_key_is_not_found() -> None:
    objects = table()
    objects.changes([row(7, "x.y")], [5], [False], "b", 0.0)
    [(subject, message)] = objects.load_reply("7", "r1", 0.0)
    assert subject == "LOADREPLY.item.7.auction.x.y"
    assert (message.request, message.version, message.found) == ("r1", 5, True)
    [(subject, message)] = objects.load_reply("8", "r2", 0.0)
    assert subject == "LOADREPLY.item.8.auction.-"
    assert (message.version, message.found, message.data) == (0, False, b"")
    with pytest.raises(InvalidSubject):
        objects.load_reply("eight", "r3", 0.0)


def test_a_query_publishes_what_the_pattern_selects() -> None:
    objects = table()
    labels = ["computer.hardware.misc", "computer.software", "garden", None]
    rows = [row(k, label) for k, label in enumerate(labels)]
    objects.changes(rows, [1, 2, 3, 4], [False] * 4, "b", 0.0)
    out, count = objects.query("computer.>", "q", 0.0)
    assert count == 2
    assert sorted(parse_object_subject(s).key_token for s, _ in out) == ["0", "1"]
    assert objects.query("*", "q", 0.0)[1] == 2  # garden, and the unlabelled one
    with pytest.raises(InvalidLabel):
        objects.query("computer.>.x", "q", 0.0)


@given(st.text(max_size=300), st.integers(64, 128))
def test_large_objects_are_fragmented_with_one_request_and_version(title: str, size: int) -> None:
    objects = table(size)
    out = objects.changes([row(1, "a", title)], [9], [False], "b", 0.0)
    assert len({subject for subject, _ in out}) == 1
    assert {(m.request, m.version, m.parts) for _, m in out} == {("b", 9, len(out))}
    assert [m.part for _, m in out] == list(range(len(out)))
    assert decode_row(b"".join(m.data for _, m in out)) == row(1, "a", title)
    assert all(len(m.data) <= size for _, m in out)
    assert all(len(msgspec.msgpack.encode(m)) <= size + 64 for _, m in out)


def test_a_bad_domain_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"bus\.domain"):
        parse_config(CONFIG.replace('"auction"', '"Auction"'))


def test_it_answers_only_once_the_stream_caught_up() -> None:
    objects = table()
    assert not objects.ready
    objects.changes([], [], [], "b1.0", 0.0)  # a new stream's first micro-batch may be empty
    assert objects.loaded and not objects.ready
    objects.changes([row(1, "a")], [1], [False], "b1.1", 0.0)  # the table's rows
    assert objects.ready
    empty = table()
    empty.mark_ready()
    assert not empty.ready  # idle before any micro-batch: nothing is known yet
    empty.changes([], [], [], "b1.0", 0.0)
    empty.mark_ready()  # idle after one: the table is empty
    assert empty.ready


# -- writes published at once (rule 6) ----------------------------------------------------------

KEYS = [1, 2, 3]
write_rows = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from(["a.x", "b"]))),
    min_size=1,
    max_size=3,
)
events = st.lists(
    st.one_of(
        write_rows.map(lambda rows: ("write", rows)),
        write_rows.map(lambda rows: ("refused", rows)),  # published at once, never carried
        st.just(("publish", None)),  # the oldest write not yet published live is (or is lost)
        st.just(("lose", None)),
        st.just(("batch", None)),
        st.just(("newest", None)),  # the newest write first: threads answered out of order
    ),
    max_size=30,
)


class Bus:
    """The connector's table and the caches' core behind it, with the publisher's ingest log
    and state played by a brute-force model (the newest offset of each key wins)."""

    def __init__(self) -> None:
        self.table = table()
        self.table.changes([], [], [], "b0", 0.0)  # the stream's first micro-batch: empty
        self.core = CacheCore(len(KEYS))
        for key in KEYS:
            self.core.want(("item", key))
        self.log: list[tuple[int, str | None]] = []  # (key, label | None: deleted)
        self.carried = 0  # offsets up to this are in the state
        self.state: dict[int, tuple[int, str]] = {}  # key -> (version, label) of live objects
        self.unpublished: list[tuple[list[dict[str, object]], list[int], list[bool]]] = []
        self.taken: list[tuple[int, int]] = []  # (key, version) of every change the cache took
        self.refused: set[int] = set()  # offsets the micro-batch drops (rule 7)

    def deliver(self, out: list) -> None:
        for subject, message in out:
            parsed = parse_object_subject(subject)
            key = int(parsed.key_token)
            row = decode_row(message.data) if message.found else None
            label = None if row is None else row["category"]
            change = self.core.offer(
                parsed.kind, ("item", key), version=message.version, row=row, label=label
            )
            if change is not None:
                self.taken.append((key, change.version))

    def write(self, rows: list[tuple[int, str | None]], refused: bool = False) -> None:
        first = len(self.log) + 1
        self.log += rows
        versions = list(range(first, first + len(rows)))
        if refused:
            self.refused.update(versions)
        written = [row(key, label) if label else {"id": key} for key, label in rows]
        self.unpublished.append((written, versions, [label is None for _, label in rows]))

    def publish(self, lose: bool = False, newest: bool = False) -> None:
        if self.unpublished:
            rows, versions, deleted = self.unpublished.pop(-1 if newest else 0)
            out = self.table.written(rows, versions, deleted, "written", 0.0)
            if not lose:
                self.deliver(out)

    def batch(self) -> None:
        """The state's changed rows since the last micro-batch, one per key: the newest."""
        newest: dict[int, tuple[int, str | None]] = {}
        for offset in range(self.carried + 1, len(self.log) + 1):
            if offset in self.refused:
                continue
            key, label = self.log[offset - 1]
            newest[key] = (offset, label)
        self.carried = len(self.log)
        keys = sorted(newest)
        for key in keys:
            version, label = newest[key]
            if label is None:
                self.state.pop(key, None)
            else:
                self.state[key] = (version, label)
        rows = [row(k, newest[k][1]) if newest[k][1] else {"id": k} for k in keys]
        versions = [newest[k][0] for k in keys]
        deleted = [newest[k][1] is None for k in keys]
        self.deliver(self.table.changes(rows, versions, deleted, "b", 0.0))


@given(events)
def test_writes_published_at_once_converge_and_are_taken_once(script: list) -> None:
    """Writes published at once (in the order their threads get there, some lost on the way,
    some never carried by a micro-batch), micro-batches in between: afterwards every cache
    holds the publisher's state, no version of an object was taken twice, none went back, and
    a load answers the cache's version; a key no refused write touched has the state's."""
    bus = Bus()
    for what, arg in script:
        match what:
            case "write":
                bus.write(arg)
            case "refused":
                bus.write(arg, refused=True)
            case "publish":
                bus.publish()
            case "lose":
                bus.publish(lose=True)
            case "newest":
                bus.publish(newest=True)
            case "batch":
                bus.batch()
    while bus.unpublished:
        bus.publish()
    bus.write([(KEYS[0], "b")])  # a refused write is judged once a batch carries a later one
    bus.publish()
    bus.batch()
    touched = {bus.log[offset - 1][0] for offset in bus.refused}
    for key in KEYS:
        entry = bus.core.read(("item", key))
        expected = bus.state.get(key)
        if expected is None:
            assert entry is None or not entry.found, (key, entry)
        else:
            assert entry is not None and entry.found, (key, entry)
            assert entry.row == row(key, expected[1])
            (reply,) = bus.table.load_reply(str(key), "r", 0.0)
            assert reply[1].version == entry.version
            assert key in touched or entry.version == expected[0], (key, entry)
    assert len(bus.taken) == len(set(bus.taken))
    for key in KEYS:
        versions = [v for k, v in bus.taken if k == key]
        assert versions == sorted(versions)


def test_a_write_is_published_at_once_and_its_micro_batch_is_a_repeat_caches_drop() -> None:
    bus = Bus()
    bus.write([(1, "a.x")])
    bus.publish()
    assert bus.taken == [(1, 1)]
    bus.batch()
    assert bus.taken == [(1, 1)] and bus.core.counters.stale == 1
    bus.write([(1, "b")])
    bus.write([(1, None)])
    bus.publish(lose=True)  # lost on the way: the micro-batch's message is the cache's
    bus.publish()
    bus.batch()
    assert bus.taken == [(1, 1), (1, 3)]
    assert bus.table.written([row(1, "b")], [2], [False], "w", 0.0) == []  # carried already


def test_a_write_the_batch_never_carries_is_corrected_under_the_batchs_version() -> None:
    bus = Bus()
    bus.write([(1, "a.x")])
    bus.publish()
    bus.batch()
    bus.write([(1, "b")], refused=True)  # shown at once, then dropped by the authority
    bus.publish()
    assert bus.core.read(("item", 1)).row == row(1, "b")
    bus.batch()  # nothing newer carried yet: not judged
    assert bus.table.corrected == 0
    bus.write([(2, "b")])
    bus.batch()
    assert bus.table.corrected == 1
    entry = bus.core.read(("item", 1))
    assert (entry.row, entry.version) == (row(1, "a.x"), 3)  # the batch's newest version
