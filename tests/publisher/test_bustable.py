"""The database connector's side of the bus, without I/O (publisher.bustable)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

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
