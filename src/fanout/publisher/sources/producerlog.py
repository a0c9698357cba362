"""The ingest log: the durable, append-only log of the events producers publish (the producers'
source, ``sources.producers``, reads it). Rules:

1. **Events.** An :class:`IngestEvent` upserts a key's whole row or deletes it; checked against
   the schema when appended (:class:`fanout.errors.BadRequest`, nothing of the call appended).
2. **Durable before acknowledged.** ``append`` is one SQLite transaction, WAL,
   ``synchronous=FULL``.
3. **Offsets** per dataset 1, 2, 3, ..., never reused; ``_version`` is the offset. Events never
   change, so a range reads the same every time.
4. **Trimming** only from the Spark source's ``commit``.
5. **Identity.** ``log_id`` is carried by the source's offsets.
6. **Bounded.** Past ``max_backlog`` untrimmed events an append raises :class:`IngestBacklog`.
7. **Schemas** are stored; changing a dataset's columns while it holds events is refused.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import msgspec
import numpy as np
import pyarrow as pa

from fanout.errors import BadRequest, ConfigError, FanoutError, InvalidView
from fanout.publisher.datasets import DELETED, VERSION, ColumnType, Dataset, decimal_of
from fanout.publisher.sources.fitting import Unfit, stored
from fanout.views import registry
from fanout.views.topic.syntax import topic_levels

#: The log's file name in the publisher's state directory.
LOG_FILE = "ingest.db"
#: Untrimmed events per dataset at most, before appends are refused.
DEFAULT_MAX_BACKLOG = 2_000_000
#: Seconds a writer waits for another process's transaction (the Spark source trims).
BUSY_TIMEOUT = 30.0

ARROW_TYPES: dict[str, pa.DataType] = {
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "float": pa.float32(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
    "bytes": pa.binary(),
}


def arrow_type(kind: ColumnType) -> pa.DataType:
    """The Arrow type of a column type."""
    found = decimal_of(kind)
    return pa.decimal128(*found) if found else ARROW_TYPES[kind]


#: ``head``: the last offset given; ``floor``: events up to it are trimmed. One row per event,
#: its ``body`` a msgpack array of its values in schema order (a delete: the key, then nulls).
_TABLES = (
    "CREATE TABLE IF NOT EXISTS log_meta (one INTEGER PRIMARY KEY CHECK (one = 1), log_id TEXT)",
    "CREATE TABLE IF NOT EXISTS datasets (name TEXT PRIMARY KEY, key TEXT NOT NULL,"
    " columns BLOB NOT NULL, head INTEGER NOT NULL, floor INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS events (dataset TEXT NOT NULL, seq INTEGER NOT NULL,"
    " deleted INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (dataset, seq))",
)


class IngestLogError(FanoutError, RuntimeError):
    """The ingest log and a stream reading it disagree (rule 5), or a range is out of reach."""

    code = "ingest_log"


class IngestBacklog(BadRequest):
    """A dataset's log holds ``max_backlog`` events Spark has not consumed yet (rule 6)."""

    code = "ingest_backlog"


class IngestEvent(msgspec.Struct, frozen=True):
    """One published change: an upsert of ``key``'s whole row, or its delete (``values=None``)."""

    key: Any
    values: dict[str, Any] | None = None


@dataclass(frozen=True)
class EventSchema:
    """A dataset's columns as the log checks and stores events: positional rows.

    ``topic`` names the column of a topic dataset's index, whose values must be MQTT topic
    names: relays and the coverage algebra take them to be (known for declared datasets only;
    appends come through the control plane, which declares every ingest dataset).
    """

    dataset: str
    key: str
    types: tuple[tuple[str, ColumnType], ...]
    topic: str | None = None

    @classmethod
    def of(cls, dataset: Dataset) -> EventSchema:
        """The schema of a declared dataset."""
        topic = dataset.index_columns[0] if registry.language(dataset.index) == "topic" else None
        return cls(dataset.name, dataset.key, tuple(dataset.schema.items()), topic)

    def to_json(self) -> bytes:
        """The stored form of the column list."""
        return msgspec.json.encode(self.types)

    def arrow_schema(self) -> pa.Schema:
        """The columns plus ``_version`` and ``_deleted``, as Arrow types."""
        fields = [pa.field(name, arrow_type(kind)) for name, kind in self.types]
        return pa.schema([*fields, pa.field(VERSION, pa.int64()), pa.field(DELETED, pa.bool_())])

    def encode(self, index: int, event: IngestEvent) -> tuple[bool, bytes]:
        """The stored form of ``event`` (the ``index``-th of its call): (deleted, body).

        Raises:
            BadRequest: the event does not fit the schema (rule 1).
        """
        where = f"dataset {self.dataset!r}, event {index}"
        if event.key is None:
            raise BadRequest(f"{where}: no key (column {self.key!r})")
        deleted = event.values is None
        values = {} if event.values is None else dict(event.values)
        if values.setdefault(self.key, event.key) != event.key:
            raise BadRequest(f"{where}: column {self.key!r} differs from the event's key")
        names = [name for name, _ in self.types]
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise BadRequest(f"{where}: no column {unknown[0]!r} in the dataset")
        missing = [] if deleted else [name for name in names if name not in values]
        if missing:
            raise BadRequest(f"{where}: an upsert gives every column; missing {missing[0]!r}")
        row = [_checked(where, name, kind, values.get(name)) for name, kind in self.types]
        topic = values.get(self.topic) if self.topic is not None else None
        if topic is not None and not deleted:
            try:
                topic_levels(topic)
            except InvalidView as exc:
                raise BadRequest(f"{where}: column {self.topic!r}: {exc}") from None
        return deleted, _ENCODER.encode(row)

    def decode(self, first: int, stored: Sequence[tuple[int, bytes]]) -> pa.Table:
        """Stored events with offsets ``first, first + 1, ...`` as an :meth:`arrow_schema` table."""
        # One msgpack array of every body decodes in one call, untyped: the types were checked
        # on the way in, and Arrow converts each column at once.
        rows = msgspec.msgpack.decode(_msgpack_array([body for _, body in stored]))
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(self.types)
        arrays = [
            _stored_array(values, kind)
            for values, (_, kind) in zip(columns, self.types, strict=True)
        ]
        arrays.append(pa.array(range(first, first + len(rows)), type=pa.int64()))
        deleted = pa.array([flag for flag, _ in stored], type=pa.int8())  # SQLite stores 0/1
        arrays.append(deleted.cast(pa.bool_()))
        return pa.Table.from_arrays(arrays, schema=self.arrow_schema())


_ENCODER = msgspec.msgpack.Encoder()


def _stored_array(values: Sequence[Any], kind: ColumnType) -> pa.Array:
    """A column of stored values (``_checked``'s forms) as Arrow."""
    if decimal_of(kind):  # stored as exact decimal text
        return pa.array(values, type=pa.string()).cast(arrow_type(kind))
    return pa.array(values, type=arrow_type(kind))  # timestamps, dates: stored as integers


def _msgpack_array(blobs: Sequence[bytes]) -> bytes:
    """Concatenated msgpack values as one msgpack array, so they decode in one call."""
    count = len(blobs)
    if count < 16:
        header = bytes([0x90 | count])
    elif count < 1 << 16:
        header = b"\xdc" + count.to_bytes(2, "big")
    else:
        header = b"\xdd" + count.to_bytes(4, "big")
    return header + b"".join(blobs)


def _checked(where: str, column: str, kind: ColumnType, value: Any) -> Any:
    """``value`` as column ``column`` of type ``kind`` stores it (None stays None).

    Raises:
        BadRequest: the value is not of that type or out of its range (``sources.fitting``).
    """
    if isinstance(value, np.generic):
        value = value.item()  # numpy scalars from columnar frames, as their Python value
    try:
        return stored(column, kind, value)
    except Unfit as exc:
        raise BadRequest(f"{where}: {exc}") from None


class IngestLog:
    """The durable, append-only log of ingest events of one publisher (rules 2-7).

    One SQLite file (``state_dir / LOG_FILE``) holds every ingest dataset's events. Several
    processes may open it: the control plane appends, Spark's source reads and trims. Methods
    are thread-safe.

    Args:
        path: the log's file; created if missing.
        datasets: datasets to :meth:`declare` at once.
        max_backlog: untrimmed events per dataset at most (rule 6).
    """

    def __init__(
        self,
        path: str | Path,
        datasets: Iterable[Dataset] = (),
        max_backlog: int = DEFAULT_MAX_BACKLOG,
    ) -> None:
        self.path = Path(path)
        self.max_backlog = max_backlog
        self._lock = threading.Lock()
        self._schemas: dict[str, EventSchema] = {}
        self._db = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with self._transaction() as db:
            for statement in _TABLES:
                db.execute(statement)
            db.execute("INSERT OR IGNORE INTO log_meta VALUES (1, ?)", (uuid.uuid4().hex,))
            (self.log_id,) = db.execute("SELECT log_id FROM log_meta").fetchone()
        for dataset in datasets:
            self.declare(dataset)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front so concurrent writers queue instead of failing."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; the log is unusable afterwards."""
        with self._lock:
            self._db.close()

    def declare(self, dataset: Dataset) -> None:
        """Make ``dataset`` take events, with its current columns.

        Raises:
            ConfigError: the dataset's key is not one of its columns, or its columns changed
                while the log still holds untrimmed events written with the old ones.
        """
        if dataset.key not in dataset.schema:
            raise ConfigError(f"dataset {dataset.name!r}: key {dataset.key!r} is not a column")
        schema = EventSchema.of(dataset)
        with self._transaction() as db:
            found = db.execute(
                "SELECT key, columns, head, floor FROM datasets WHERE name = ?", (dataset.name,)
            ).fetchone()
            if found is None:
                db.execute(
                    "INSERT INTO datasets VALUES (?, ?, ?, 0, 0)",
                    (dataset.name, schema.key, schema.to_json()),
                )
            elif (found[0], bytes(found[1])) != (schema.key, schema.to_json()):
                if found[2] > found[3]:
                    raise ConfigError(
                        f"dataset {dataset.name!r}: its columns changed but the ingest log still"
                        f" holds events {found[3] + 1}..{found[2]} written with the old ones"
                    )
                db.execute(
                    "UPDATE datasets SET key = ?, columns = ? WHERE name = ?",
                    (schema.key, schema.to_json(), dataset.name),
                )
            self._schemas[dataset.name] = schema

    def schema(self, dataset: str) -> EventSchema:
        """The schema events of ``dataset`` are checked and stored with.

        Raises:
            BadRequest: the dataset was never declared in this log.
        """
        cached = self._schemas.get(dataset)
        if cached is not None:
            return cached
        with self._lock:
            found = self._db.execute(
                "SELECT key, columns FROM datasets WHERE name = ?", (dataset,)
            ).fetchone()
        if found is None:
            raise BadRequest(f"dataset {dataset!r} takes no published events")
        types = msgspec.json.decode(found[1], type=tuple[tuple[str, ColumnType], ...])
        schema = EventSchema(dataset, found[0], types)
        self._schemas[dataset] = schema
        return schema

    def append(self, dataset: str, events: Sequence[IngestEvent]) -> list[int]:
        """Append ``events`` to ``dataset``'s log, all or none, durably (rules 1-3, 6).

        Returns:
            The offsets given to the events, in order: consecutive, after every earlier one.

        Raises:
            BadRequest: an event does not fit the schema, or the dataset takes no events.
            IngestBacklog: the dataset's untrimmed events would exceed ``max_backlog``.
        """
        schema = self.schema(dataset)
        stored = [schema.encode(index, event) for index, event in enumerate(events)]
        if not stored:
            return []
        with self._transaction() as db:
            head, floor = _bounds(db, dataset)
            if head - floor + len(stored) > self.max_backlog:
                raise IngestBacklog(
                    f"dataset {dataset!r}: {head - floor} published events are not yet in the"
                    f" state (at most {self.max_backlog}); publish again later"
                )
            db.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?)",
                [
                    (dataset, head + 1 + index, deleted, body)
                    for index, (deleted, body) in enumerate(stored)
                ],
            )
            db.execute("UPDATE datasets SET head = ? WHERE name = ?", (head + len(stored), dataset))
        return list(range(head + 1, head + 1 + len(stored)))

    def read(self, dataset: str, after: int, upto: int) -> pa.Table:
        """The events of ``dataset`` with offsets in ``(after, upto]``, in offset order.

        Returns:
            A table of the dataset's columns plus ``_version`` (the offset) and ``_deleted``.

        Raises:
            BadRequest: the dataset takes no events.
            IngestLogError: part of the range is trimmed or not appended yet.
        """
        schema = self.schema(dataset)
        with self._lock:
            self._db.execute("BEGIN")  # one snapshot for the bounds and the rows
            try:
                head, floor = _bounds(self._db, dataset)
                stored = self._db.execute(
                    "SELECT deleted, body FROM events WHERE dataset = ? AND seq > ? AND seq <= ?"
                    " ORDER BY seq",
                    (dataset, after, upto),
                ).fetchall()
            finally:
                self._db.execute("COMMIT")
        if not floor <= after <= upto <= head or len(stored) != upto - after:
            raise IngestLogError(
                f"dataset {dataset!r}: cannot read offsets {after + 1}..{upto}: the log holds"
                f" {floor + 1}..{head}"
            )
        return schema.decode(after + 1, stored)

    def latest(self, dataset: str) -> int:
        """The last offset given to an event of ``dataset`` (0 if none)."""
        with self._lock:
            return _bounds(self._db, dataset)[0]

    def trimmed(self, dataset: str) -> int:
        """The offset up to which ``dataset``'s events were trimmed (0 if none)."""
        with self._lock:
            return _bounds(self._db, dataset)[1]

    def trim(self, dataset: str, upto: int) -> None:
        """Drop ``dataset``'s events up to offset ``upto`` (rule 4: the source calls this).

        Raises:
            IngestLogError: ``upto`` is past the last event.
        """
        with self._transaction() as db:
            head, floor = _bounds(db, dataset)
            if upto > head:
                raise IngestLogError(
                    f"dataset {dataset!r}: cannot trim up to {upto}, the last event is {head}"
                )
            if upto <= floor:
                return
            db.execute("DELETE FROM events WHERE dataset = ? AND seq <= ?", (dataset, upto))
            db.execute("UPDATE datasets SET floor = ? WHERE name = ?", (upto, dataset))


def _bounds(db: sqlite3.Connection, dataset: str) -> tuple[int, int]:
    """(head, floor) of ``dataset``: its last offset and its trimmed offset (0, 0 if unknown)."""
    found = db.execute("SELECT head, floor FROM datasets WHERE name = ?", (dataset,)).fetchone()
    return (0, 0) if found is None else (int(found[0]), int(found[1]))
