"""PostgreSQL's ``pgoutput`` logical decoding messages (protocol version 1), decoded, and the
transactions they make (PostgreSQL docs, "Logical Replication Message Formats"). Sans-I/O:
bytes in, typed messages and transactions out. Rules:

1. **Messages.** Begin, Commit, Relation, Insert, Update, Delete and Truncate are decoded; Origin
   and Type carry nothing the source uses and are skipped; any other tag is an error.
2. **Values stay text** (``bytes``), as the server's output function spelled them, or ``None``
   (NULL) or ``UNCHANGED`` (a TOASTed value the update left alone and did not send).
3. **Transactions whole.** ``transactions`` groups the changes between a Begin and its Commit;
   a transaction is known by its Commit's end position (LSN), the position a slot is advanced
   to once it is durable, and is never split across micro-batches.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


#: A TOASTed value an update did not change, so not sent (rule 2).
UNCHANGED: Final = _Unchanged()

Value = bytes | None | _Unchanged


class DecodeError(ValueError):
    """The bytes are not a pgoutput version 1 message."""


@dataclass(frozen=True)
class Column:
    """One column of a relation: its name, type OID, and whether it is in the replica identity."""

    name: str
    type_oid: int
    key: bool


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    xid: int


@dataclass(frozen=True)
class Commit:
    lsn: int
    end_lsn: int


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Insert:
    relation: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    """``old``: the old key (replica identity) if the key changed, or the whole old row if the
    table's replica identity is FULL; None otherwise."""

    relation: int
    old: tuple[Value, ...] | None
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Delete:
    """``old``: the old key, or the whole old row (replica identity FULL)."""

    relation: int
    old: tuple[Value, ...]


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate
Change = Insert | Update | Delete | Truncate


@dataclass(frozen=True)
class Transaction:
    """A committed transaction's changes in order, and the relations they name (rule 3)."""

    end_lsn: int
    changes: tuple[Change, ...]
    relations: dict[int, Relation] = field(default_factory=dict)


_BEGIN = struct.Struct("!QqI")  # final LSN, commit time, xid
_COMMIT = struct.Struct("!BQQq")  # flags, commit LSN, end LSN, commit time
_U8, _U16, _U32, _I32 = (struct.Struct(f) for f in ("!B", "!H", "!I", "!i"))
_NULL, _TOASTED, _TEXT = b"n"[0], b"u"[0], b"t"[0]


class _Reader:
    """A cursor over one message's bytes (running past its end: ``struct.error`` or
    ``IndexError``, which ``decode`` turns into a DecodeError)."""

    def __init__(self, data: bytes, at: int = 1) -> None:
        self.data, self.at = data, at

    def take(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.at)
        self.at += fmt.size
        return int(value)

    def byte(self) -> str:
        self.at += 1
        return chr(self.data[self.at - 1])

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError("a string without its terminating NUL")
        text = self.data[self.at : end].decode()
        self.at = end + 1
        return text

    def tuple(self) -> tuple[Value, ...]:
        data, at = self.data, self.at
        (count,) = _U16.unpack_from(data, at)
        at += 2
        values: list[Value] = []
        for _ in range(count):
            kind = data[at]
            if kind == _TEXT:
                (size,) = _I32.unpack_from(data, at + 1)
                at += 5
                if size < 0 or at + size > len(data):
                    raise DecodeError(f"a value of {size} bytes past the message's end")
                values.append(data[at : at + size])
                at += size
            elif kind == _NULL:
                values.append(None)
                at += 1
            elif kind == _TOASTED:
                values.append(UNCHANGED)
                at += 1
            else:
                raise DecodeError(f"a column value of kind {chr(kind)!r}")
        self.at = at
        return tuple(values)


def decode(data: bytes) -> Message | None:
    """One pgoutput message; None for the kinds the source does not use (rule 1).

    Raises:
        DecodeError: the bytes are not a version 1 message.
    """
    if not data:
        raise DecodeError("an empty message")
    tag = chr(data[0])
    try:  # the commonest, of fixed size, first
        if tag == "B" and len(data) == 1 + _BEGIN.size:
            final_lsn, _, xid = _BEGIN.unpack_from(data, 1)
            return Begin(final_lsn, xid)
        if tag == "C" and len(data) == 1 + _COMMIT.size:
            _, lsn, end_lsn, _ = _COMMIT.unpack_from(data, 1)
            return Commit(lsn, end_lsn)
        if tag in ("O", "Y"):
            return None
        if tag not in _DECODERS:
            raise DecodeError(f"a message of kind {tag!r}")
        read = _Reader(data)
        message = _DECODERS[tag](read)
    except (struct.error, IndexError):
        raise DecodeError(f"message ends at byte {len(data)}, before its fields do") from None
    if read.at != len(data):
        raise DecodeError(f"{len(data) - read.at} bytes after a {tag!r} message")
    return message


def _begin(read: _Reader) -> Begin:  # of another size than a Begin's: an error either way
    final_lsn, _, xid = _BEGIN.unpack_from(read.data, read.at)
    read.at += _BEGIN.size
    return Begin(final_lsn, xid)


def _commit(read: _Reader) -> Commit:  # as _begin
    _, lsn, end_lsn, _ = _COMMIT.unpack_from(read.data, read.at)
    read.at += _COMMIT.size
    return Commit(lsn, end_lsn)


def _relation(read: _Reader) -> Relation:
    oid, namespace, name = read.take(_U32), read.string(), read.string()
    read.take(_U8)  # replica identity setting
    columns = []
    for _ in range(read.take(_U16)):
        flags, column = read.take(_U8), read.string()
        columns.append(Column(column, read.take(_U32), bool(flags & 1)))
        read.take(_I32)  # type modifier
    return Relation(oid, namespace, name, tuple(columns))


def _insert(read: _Reader) -> Insert:
    oid = read.take(_U32)
    _expect(read, "N")
    return Insert(oid, read.tuple())


def _update(read: _Reader) -> Update:
    oid, old = read.take(_U32), None
    kind = read.byte()
    if kind in ("K", "O"):
        old = read.tuple()
        kind = read.byte()
    if kind != "N":
        raise DecodeError(f"an update's new row marked {kind!r}, not 'N'")
    return Update(oid, old, read.tuple())


def _delete(read: _Reader) -> Delete:
    oid = read.take(_U32)
    kind = read.byte()
    if kind not in ("K", "O"):
        raise DecodeError(f"a delete's old row marked {kind!r}, not 'K' or 'O'")
    return Delete(oid, read.tuple())


def _truncate(read: _Reader) -> Truncate:
    count = read.take(_U32)
    read.take(_U8)  # options (CASCADE, RESTART IDENTITY)
    return Truncate(tuple(read.take(_U32) for _ in range(count)))


_DECODERS: dict[str, Callable[[_Reader], Message]] = {
    "B": _begin,
    "C": _commit,
    "R": _relation,
    "I": _insert,
    "U": _update,
    "D": _delete,
    "T": _truncate,
}


def _expect(read: _Reader, kind: str) -> None:
    found = read.byte()
    if found != kind:
        raise DecodeError(f"a tuple marked {found!r}, not {kind!r}")


class Assembler:
    """Transactions from messages fed one at a time (rule 3), as a replication stream sends
    them: the relations it described earlier are remembered across transactions (a stream
    describes each relation once, before its first change, and again when it changes)."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self._changes: list[Change] | None = None

    def feed(self, message: Message | None) -> Transaction | None:
        """The transaction ``message`` commits, if it is a Commit.

        Raises:
            DecodeError: a change outside a transaction, or a Begin inside one.
        """
        match message:
            case None:
                return None
            case Begin():
                if self._changes is not None:
                    raise DecodeError("a Begin inside a transaction")
                self._changes = []
            case Relation():
                self.relations = {**self.relations, message.oid: message}
            case Commit():
                if self._changes is None:
                    raise DecodeError("a Commit outside a transaction")
                done = Transaction(message.end_lsn, tuple(self._changes), self.relations)
                self._changes = None
                return done
            case _:
                if self._changes is None:
                    raise DecodeError(f"a {type(message).__name__} outside a transaction")
                self._changes.append(message)
        return None


def transactions(messages: Iterable[Message | None]) -> list[Transaction]:
    """The committed transactions in ``messages`` (decoded in order), each with its changes
    and the relations known when it committed (rule 3). An unfinished last transaction is
    left out.

    Raises:
        DecodeError: a change outside a transaction, or a Begin inside one.
    """
    assembler = Assembler()
    done = (assembler.feed(message) for message in messages)
    return [transaction for transaction in done if transaction is not None]


def after(found: list[Transaction], lsn: int, max_changes: int) -> list[Transaction]:
    """The transactions of ``found`` that end after ``lsn`` (those read already end at or
    before it), as many as hold ``max_changes`` changes, and at least one (rule 3).
    """
    taken: list[Transaction] = []
    count = 0
    for transaction in found:
        if transaction.end_lsn <= lsn:
            continue
        if taken and count + len(transaction.changes) > max_changes:
            break
        taken.append(transaction)
        count += len(transaction.changes)
    return taken


class Pending:
    """The changes of the transactions ending after ``lsn`` in a stream's held list, counted
    as the list grows: each transaction once, not the whole list at every look (a read looks
    each time the stream has received more). A list replaced (the stream opened again, or
    what is confirmed let go) is counted anew."""

    def __init__(self, lsn: int) -> None:
        self.lsn = lsn
        self._seen: list[Transaction] | None = None
        self._counted = self._changes = 0

    def changes(self, held: list[Transaction]) -> int:
        if held is not self._seen or len(held) < self._counted:
            self._seen, self._counted, self._changes = held, 0, 0
        for at in range(self._counted, len(held)):
            if held[at].end_lsn > self.lsn:
                self._changes += len(held[at].changes)
        self._counted = len(held)
        return self._changes


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL spells it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_of(text: str) -> int:
    """An LSN from PostgreSQL's spelling.

    Raises:
        ValueError: it is not ``hex/hex``.
    """
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)
