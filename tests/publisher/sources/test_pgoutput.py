"""pgoutput's messages decoded, against an encoder written here from PostgreSQL's "Logical
Replication Message Formats" (the oracle), and the transactions they make, against brute
force. No server: the server's own messages are decoded in test_postgres_logical."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.publisher.sources import pgoutput
from fanout.publisher.sources.pgoutput import (
    UNCHANGED,
    Begin,
    Column,
    Commit,
    DecodeError,
    Delete,
    Insert,
    Relation,
    Transaction,
    Truncate,
    Update,
    Value,
)


def text(value: str) -> bytes:
    return value.encode() + b"\0"


def tuple_data(values: tuple[Value, ...]) -> bytes:
    out = struct.pack("!H", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is UNCHANGED:
            out += b"u"
        else:
            assert isinstance(value, bytes)
            out += b"t" + struct.pack("!i", len(value)) + value
    return out


def encode(message: pgoutput.Message) -> bytes:  # noqa: PLR0911 (one return per kind)
    """The bytes PostgreSQL sends for ``message`` (protocol version 1)."""
    match message:
        case Begin():
            return b"B" + struct.pack("!QqI", message.final_lsn, 7, message.xid)
        case Commit():
            return b"C" + struct.pack("!BQQq", 0, message.lsn, message.end_lsn, 7)
        case Relation():
            out = b"R" + struct.pack("!I", message.oid) + text(message.namespace)
            out += text(message.name) + b"d" + struct.pack("!H", len(message.columns))
            for column in message.columns:
                out += struct.pack("!B", int(column.key)) + text(column.name)
                out += struct.pack("!Ii", column.type_oid, -1)
            return out
        case Insert():
            return b"I" + struct.pack("!I", message.relation) + b"N" + tuple_data(message.new)
        case Update():
            old = b"" if message.old is None else b"K" + tuple_data(message.old)
            return b"U" + struct.pack("!I", message.relation) + old + b"N" + tuple_data(message.new)
        case Delete():
            return b"D" + struct.pack("!I", message.relation) + b"O" + tuple_data(message.old)
        case Truncate():
            count = len(message.relations)
            return b"T" + struct.pack(f"!IB{count}I", count, 0, *message.relations)


u32, u64 = st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
names = st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"]), max_size=12)
values = st.tuples(*[st.one_of(st.none(), st.just(UNCHANGED), st.binary(max_size=20))] * 3)
MESSAGES = st.one_of(
    st.builds(Begin, u64, u32),
    st.builds(Commit, u64, u64),
    st.builds(
        Relation,
        u32,
        names,
        names,
        st.lists(st.builds(Column, names, u32, st.booleans()), max_size=4).map(tuple),
    ),
    st.builds(Insert, u32, values),
    st.builds(Update, u32, st.none() | values, values),
    st.builds(Delete, u32, values),
    st.builds(Truncate, st.lists(u32, max_size=3).map(tuple)),
)


@given(MESSAGES)
def test_a_message_decodes_to_what_was_encoded(message: pgoutput.Message) -> None:
    assert pgoutput.decode(encode(message)) == message


@given(MESSAGES, st.data())
def test_a_message_cut_short_or_with_bytes_after_is_an_error(
    message: pgoutput.Message, data: st.DataObject
) -> None:
    whole = encode(message)
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(DecodeError):
        pgoutput.decode(whole[:cut])
    with pytest.raises(DecodeError, match="bytes after"):
        pgoutput.decode(whole + b"\0")


def test_origin_and_type_messages_are_skipped_and_others_refused() -> None:
    assert pgoutput.decode(b"O" + struct.pack("!Q", 5) + text("node")) is None
    assert pgoutput.decode(b"Y" + struct.pack("!I", 5) + text("public") + text("mood")) is None
    with pytest.raises(DecodeError, match="a message of kind 'M'"):
        pgoutput.decode(b"M\0")
    with pytest.raises(DecodeError, match="a column value of kind 'b'"):
        pgoutput.decode(b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"b")


RELATION = Relation(16384, "public", "orders", (Column("id", 20, True),))
CHANGES = st.lists(
    st.builds(Insert, st.just(RELATION.oid), st.tuples(st.binary(max_size=3))), max_size=4
)


@given(st.lists(CHANGES, max_size=6), CHANGES, st.booleans())
def test_transactions_are_the_committed_ones_whole(
    committed: list[list[Insert]], unfinished: list[Insert], cut: bool
) -> None:
    messages: list[pgoutput.Message | None] = [RELATION]
    for number, changes in enumerate(committed):
        messages += [Begin(100 * number + 99, number), None, *changes]
        messages.append(Commit(100 * number + 99, 100 * number + 100))
    if cut:  # the peek ended inside a transaction
        messages += [Begin(10**6, 999), *unfinished]
    found = pgoutput.transactions(messages)
    assert [(t.end_lsn, list(t.changes)) for t in found] == [
        (100 * number + 100, changes) for number, changes in enumerate(committed)
    ]
    assert all(t.relations[RELATION.oid] == RELATION for t in found)


def test_changes_outside_a_transaction_are_an_error() -> None:
    with pytest.raises(DecodeError, match="Insert outside a transaction"):
        pgoutput.transactions([Insert(1, ())])
    with pytest.raises(DecodeError, match="Begin inside"):
        pgoutput.transactions([Begin(1, 1), Begin(2, 2)])
    with pytest.raises(DecodeError, match="Commit outside"):
        pgoutput.transactions([Commit(1, 2)])


@given(
    st.lists(st.integers(0, 6), max_size=10),
    st.integers(0, 12),
    st.integers(1, 10),
)
def test_after_takes_the_next_transactions_whole_up_to_the_limit(
    sizes: list[int], lsn: int, limit: int
) -> None:
    """Oracle: of the transactions ending after ``lsn``, the longest prefix holding at most
    ``limit`` changes, or the first alone."""
    found = [
        Transaction(number + 1, tuple(Insert(1, ()) for _ in range(size)))
        for number, size in enumerate(sizes)
    ]
    pending = [t for t in found if t.end_lsn > lsn]
    want: list[Transaction] = []
    for count in range(len(pending), 0, -1):
        if count == 1 or sum(len(t.changes) for t in pending[:count]) <= limit:
            want = pending[:count]
            break
    assert pgoutput.after(found, lsn, limit) == want


@given(u64)
def test_an_lsn_is_spelled_as_postgresql_does(lsn: int) -> None:
    spelled = pgoutput.lsn_text(lsn)
    high, low = spelled.split("/")
    assert int(high, 16) * 2**32 + int(low, 16) == lsn and spelled == spelled.upper()
    assert pgoutput.lsn_of(spelled) == lsn


@given(
    st.integers(0, 20),
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 30), st.integers(0, 4)),
            st.tuples(st.just("replace"), st.integers(0, 30), st.integers(0, 4)),
            st.tuples(st.just("look"), st.just(0), st.just(0)),
        ),
        max_size=30,
    ),
)
def test_pending_counts_the_changes_after_its_lsn_as_brute_force_does(
    lsn: int, steps: list[tuple[str, int, int]]
) -> None:
    """Oracle: the changes of every held transaction ending after ``lsn``, summed anew."""
    pending, held = pgoutput.Pending(lsn), []
    for step, end, size in steps:
        made = Transaction(end, tuple(Insert(1, ()) for _ in range(size)))
        if step == "append":
            held.append(made)
        elif step == "replace":  # reopened, or confirmed: a new list, maybe shorter
            held = [t for t in held if t.end_lsn > end // 2] + [made]
        assert pending.changes(held) == sum(len(t.changes) for t in held if t.end_lsn > lsn)
