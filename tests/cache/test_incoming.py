"""Reading bus messages (cache.incoming): what the connector sends reads back; anything else is
malformed, never another exception."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cache.core import Reassembly
from fanout.cache.incoming import MALFORMED, read
from fanout.wire.bus import ObjectMessage, TypeInfo, encode_row, fragments, object_subject

TYPES = {
    "item": TypeInfo(key="id", integer_key=True, label="category", columns={}),
    "user": TypeInfo(key="name", integer_key=False, label=None, columns={}),
}


@given(
    st.integers(-(2**63), 2**63 - 1),
    st.one_of(st.none(), st.text(max_size=20)),
    st.text(max_size=200),
    st.integers(8, 64),
)
def test_what_the_connector_sends_reads_back(
    key: int, label: str | None, title: str, size: int
) -> None:
    row = {"id": key, "category": label, "title": title}
    subject = object_subject("UPDATENOTIFY", "item", key, "shop", label)
    pieces = fragments(encode_row(row), size)
    reassembly = Reassembly()
    got = [
        read(
            subject,
            msgspec.msgpack.encode(ObjectMessage("r", 5, True, at, len(pieces), p, 1.0)),
            "shop",
            TYPES,
            reassembly,
        )
        for at, p in enumerate(pieces)
    ]
    assert got[:-1] == [None] * (len(pieces) - 1)
    whole = got[-1]
    assert whole is not None
    assert (whole.kind, whole.ref, whole.version, whole.row, whole.label) == (
        "UPDATENOTIFY",
        ("item", key),
        5,
        row,
        label,
    )


def test_a_deletion_takes_its_label_from_its_subject() -> None:
    subject = object_subject("DELETE", "user", "a.b c", "shop", "x.y")
    data = msgspec.msgpack.encode(ObjectMessage("r", 9, False, 0, 1, b"", 1.0))
    whole = read(subject, data, "shop", TYPES, Reassembly())
    assert whole is not None
    assert (whole.ref, whole.row, whole.label) == (("user", "a.b c"), None, "x.y")


@given(
    st.sampled_from(
        [
            "UPDATENOTIFY.item.1.shop.x",
            "LOADREPLY.user.bob.shop.-",
            "CREATE.item.one.shop.x",
            "DELETE.item.1.other.x",
            "UPDATENOTIFY.nope.1.shop.x",
            "LOAD.item.1.shop",
            "X",
        ]
    ),
    st.one_of(
        st.binary(max_size=60),
        st.builds(
            lambda *fields: msgspec.msgpack.encode(list(fields)),
            st.text(max_size=3),
            st.integers(-5, 5),
            st.booleans(),
            st.integers(-2, 3),
            st.integers(-1, 3),
            st.one_of(st.binary(max_size=10), st.just(encode_row({"id": 2}))),
            st.floats(allow_nan=False),
        ),
    ),
)
def test_anything_else_is_malformed_and_nothing_worse(subject: str, data: bytes) -> None:
    try:
        got = read(subject, data, "shop", TYPES, Reassembly())
    except MALFORMED:
        return  # counted and dropped by the cache: what must happen to these
    # the rare well-formed one: a whole message of a served type, or a fragment to wait on
    assert got is None or (got.ref[0] in TYPES and got.kind in ("UPDATENOTIFY", "LOADREPLY"))


@pytest.mark.parametrize(
    ("subject", "data", "says"),
    [
        ("UPDATENOTIFY.item.one.shop.x", b"", "not an integer key"),
        ("UPDATENOTIFY.nope.1.shop.x", b"", "not a type of domain"),
        (
            "UPDATENOTIFY.item.1.shop.x",
            msgspec.msgpack.encode(ObjectMessage("r", 1, True, 0, 1, encode_row({"id": 2}), 0.0)),
            "is not the subject's",
        ),
        (
            "DELETE.item.1.shop.x",
            msgspec.msgpack.encode(ObjectMessage("r", 1, False, 0, 1, b"x", 0.0)),
            "without state",
        ),
    ],
)
def test_each_kind_of_malformed_message_says_what(subject: str, data: bytes, says: str) -> None:
    with pytest.raises(MALFORMED, match=says):
        read(subject, data, "shop", TYPES, Reassembly())
