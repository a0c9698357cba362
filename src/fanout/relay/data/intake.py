"""Taking in the publisher's batches: one dataset's stream position and inert buffer (CA 3197003
[0137], steps S460-S470, and [0150] step 1070a).

A batch is checked whole before anything is written (its columns are the catalog's, its keys
are keys and unique), then written to the dataset's inert buffer in the protocol's order: drop
what was held inside each snapshot primitive (for an entity primitive: its row), apply the
upserts, apply the deletes; last, the inert buffer's spatial index is built. Nothing here is
visible to subscribers until the relay ends the epoch and the buffers swap.

Writing touches only the dataset's inert buffer and this record, so the relay's shell runs it on
a worker thread while the event loop keeps serving pushes from the active buffer; ``busy`` tells
the core not to swap (or prune) that dataset meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Self

import numpy as np

from fanout.errors import ProtocolError
from fanout.relay.data.buffers import Array, DoubleBuffer, Stamp, Table
from fanout.relay.data.nulls import split, valid_of
from fanout.relay.data.spatial import GridIndex, IndexedRegion
from fanout.views import View
from fanout.views.entity import Entity
from fanout.wire.columns import (
    BYTES,
    NUMERIC_DTYPES,
    STRING,
    Columns,
    decimal_type,
    decode_columns,
    key_column,
)
from fanout.wire.messages import Batch, DatasetInfo


def _check_columns(info: DatasetInfo, coordinates: tuple[str, ...]) -> None:
    """Refuse what the relay could not hold: dtypes that do not travel, no key column, a
    nullable key or unknown nullable column, a NUL in a name, a bad space index.

    Raises:
        ValueError: naming the column and what is wrong with it.
    """
    key, columns = info.key, info.columns
    if key not in columns:
        raise ValueError(f"the key column {key!r} is not one of its columns {sorted(columns)}")
    for name in info.nullable:
        if name == key or name not in columns:
            raise ValueError(f"nullable column {name!r} is not one of its value columns")
    for name, dtype in columns.items():
        if "\x00" in name:
            raise ValueError(f"column {name!r} has a NUL character in its name")
        if dtype not in (STRING, BYTES) and dtype not in NUMERIC_DTYPES and not decimal_type(dtype):
            travel = ", ".join([STRING, BYTES, "decimal(p,s)", *sorted(NUMERIC_DTYPES)])
            raise ValueError(f"column {name!r} has dtype {dtype!r}, not one of {travel}")
    if not coordinates:
        return
    if len(coordinates) not in (2, 3) or len(set(coordinates)) != len(coordinates):
        raise ValueError(f"a space index names 2 or 3 distinct columns, not {list(coordinates)}")
    for name in coordinates:
        if name not in columns:
            raise ValueError(f"space index column {name!r} is not a column")
        if columns[name] not in NUMERIC_DTYPES or np.dtype(columns[name]).kind not in "iuf":
            raise ValueError(f"space index column {name!r} is {columns[name]}, not a number")


@dataclass
class DatasetState:
    """The relay's copy of one dataset and where it is in the stream.

    Attributes:
        info: the catalog entry.
        buffer: the double-buffered rows.
        epoch, seq: the last batch received (written to the inert buffer).
        readying: primitives whose snapshots are in the inert buffer: ready at the next swap.
        released: (region, when) of primitives released lately, still pruned for a while.
        busy: a batch is being written (perhaps on another thread): no swap, no prune.
    """

    info: DatasetInfo
    buffer: DoubleBuffer
    epoch: int = -1
    seq: int = -1
    readying: list[int] = field(default_factory=list)
    released: list[tuple[IndexedRegion, float]] = field(default_factory=list)
    busy: bool = False

    @classmethod
    def of(cls, info: DatasetInfo, coordinates: Sequence[str] = ()) -> Self:
        """An empty copy of the dataset ``info`` describes (``coordinates``: the columns of its
        space index, if its rows are indexed in space).

        Raises:
            ProtocolError: a column's dtype does not travel, its key column is not an integer
                or string column, or a space index does not name 2 or 3 distinct numeric
                columns.
        """
        try:
            _check_columns(info, tuple(coordinates))
            return cls(info, DoubleBuffer(info.key, held_columns(info), tuple(coordinates)))
        except (ValueError, KeyError) as exc:
            raise ProtocolError(f"catalog: dataset {info.name!r}: {exc}") from exc

    @property
    def table(self) -> Table:
        """The active table (what pushes read)."""
        return self.buffer.active

    def is_replay(self, batch: Batch) -> bool:
        """Whether ``batch`` was applied already (Spark re-ran a micro-batch after a failure).

        A batch re-stamped with the last seq that carries snapshots is not: the publisher sends a
        quiet dataset's snapshots that way, and re-applying that seq's changes is harmless.
        """
        if batch.epoch != self.epoch:
            return False
        return batch.seq < self.seq or (batch.seq == self.seq and not batch.snapshots)

    def is_gap(self, batch: Batch) -> bool:
        """Whether batches are missing between the last one and ``batch``."""
        if batch.shared is not None:
            return False  # a whole state (``install``): nothing before it is needed
        return self.seq >= 0 and batch.epoch == self.epoch and batch.seq > self.seq + 1

    def write(
        self, batch: Batch, snapshots: Sequence[tuple[int, View]] = ()
    ) -> tuple[dict[str, Array], Array]:
        """Check ``batch`` and write it to the inert buffer; returns its decoded upserts (column
        -> array) and deleted keys.

        Args:
            batch: the batch.
            snapshots: (id, view) of the held primitives whose snapshots it carries (a region,
                an entity, or a key-selecting view); they become ready when this state is
                swapped in.

        Raises:
            ProtocolError: its columns or keys do not fit the catalog, or keys repeat.
        """
        upserts, deletes = self.decode(batch)
        self.apply(batch, snapshots, upserts, deletes)
        return upserts, deletes

    def apply(
        self,
        batch: Batch,
        snapshots: Sequence[tuple[int, View]],
        upserts: dict[str, Array],
        deletes: Array,
    ) -> None:
        """Write ``batch``, decoded (``decode``), to the inert buffer (``write``)."""
        buffer = self.buffer
        if self.epoch not in (-1, batch.epoch):
            buffer.restart_changes()  # seqs restart in a new epoch
        # A snapshot is its primitive's whole content: drop what we held there first, so rows
        # that left it while we were not subscribed do not linger.
        self.drop_inside([view for _, view in snapshots if not isinstance(view, Entity)])
        buffer.delete([view.key for _, view in snapshots if isinstance(view, Entity)])
        self.readying.extend(prim for prim, _ in snapshots)
        if batch.upserts.length:
            buffer.upsert(upserts, batch.seq)
        buffer.delete(deletes)
        buffer.mark(Stamp(batch.epoch, batch.seq, batch.tick, batch.tick_time))
        buffer.stage_index()
        self.epoch, self.seq = batch.epoch, batch.seq

    def install(
        self,
        batch: Batch,
        snapshots: Sequence[tuple[int, View]],
        table: Table,
        index: GridIndex,
        stamp: Stamp,
    ) -> None:
        """Take ``table`` (with its grid), the leader's whole state at ``stamp`` that ``batch``
        names in its shared memory (``Batch.shared``), as the inert buffer; the primitives
        whose snapshots ``batch`` announces become ready when it is swapped in.

        Raises:
            ProtocolError: the state is not at the batch's seq.
        """
        assert batch.shared is not None
        if (stamp.epoch, stamp.seq) != (batch.epoch, batch.seq):
            raise ProtocolError(
                f"batch {batch.seq}: the shared state is at seq {stamp.seq} of epoch"
                f" {stamp.epoch}, not at seq {batch.seq} of epoch {batch.epoch}"
            )
        self.readying.extend(prim for prim, _ in snapshots)
        self.buffer.install(table, index, stamp, batch.shared.generation)
        self.epoch, self.seq = batch.epoch, batch.seq

    def drop_inside(self, views: Sequence[View]) -> None:
        """Delete the inert rows inside any of these primitives (regions; keyed datasets:
        ``relay.data.keyedstate``)."""
        self.buffer.delete_inside([view for view in views if isinstance(view, IndexedRegion)])

    def decode(self, batch: Batch) -> tuple[dict[str, Array], Array]:
        """``batch``'s upserts (column -> array) and deleted keys, checked against the catalog.

        Raises:
            ProtocolError: its columns or keys do not fit the catalog, or keys repeat.
        """
        info, table = self.info, self.buffer.inert
        upserts = decode_rows(info, batch.upserts, f"batch {batch.seq}")
        keys = key_column(batch.deletes, info.key, f"batch {batch.seq} deletes")
        try:
            deletes = table.as_keys(keys)
            incoming = table.as_keys(upserts[info.key]) if batch.upserts.length else deletes[:0]
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"batch {batch.seq}: bad keys: {exc}") from exc
        if not _unique(incoming):
            raise ProtocolError(f"batch {batch.seq}: duplicate keys in upserts")
        return upserts, deletes


def held_columns(info: DatasetInfo) -> dict[str, str]:
    """The columns the relay holds of dataset ``info``: its own and the companions of its
    nullable non-string columns (``relay.data.nulls``)."""
    companions = {
        valid_of(name): "|b1" for name in info.nullable if info.columns[name] in NUMERIC_DTYPES
    }
    return {**info.columns, **companions}


def decode_rows(info: DatasetInfo, payload: Columns, what: str) -> dict[str, Array]:
    """Whole rows of dataset ``info`` (a batch's upserts, a change from the log) as the relay
    holds them: every column, and each nullable one's companion.

    Raises:
        ProtocolError: the columns are not the dataset's, or a column that may not hold NULL
            does.
    """
    arrays = decode_columns(payload)
    if not payload.length:
        return {}
    if set(arrays) != set(info.columns):
        raise ProtocolError(
            f"{what}: upsert columns {sorted(arrays)} are not {sorted(info.columns)}"
        )
    nullable = set(info.nullable)
    for name, values in arrays.items():
        if isinstance(values, np.ma.MaskedArray) and name not in nullable:
            raise ProtocolError(f"{what}: column {name!r} holds a NULL but may not")
    rows = split(arrays)
    for name in nullable:
        if info.columns[name] in NUMERIC_DTYPES and valid_of(name) not in rows:
            rows[valid_of(name)] = np.ones(payload.length, dtype=bool)
    return rows


def _unique(keys: Array) -> bool:
    """Whether ``keys`` has no duplicates (O(n) when already sorted, as publishers often send)."""
    if len(keys) < 2:
        return True
    if keys.dtype != object and bool(np.all(np.greater(keys[1:], keys[:-1]))):
        return True
    ordered = np.sort(keys)
    return not bool(np.any(ordered[1:] == ordered[:-1]))


@dataclass
class Intake:
    """A batch admitted to its dataset's stream, to be written (perhaps off the event loop).

    Attributes:
        state: the dataset (``busy`` until the core finishes the intake).
        batch: the batch.
        snapshots: (id, view) of the held primitives whose snapshots it carries.
        gap_after: the seq it follows with batches missing in between, or None.
        upserts, deletes: the batch decoded, once decoded.
        forwarded: it went to the relays below (``tiers.below``).
    """

    state: DatasetState
    batch: Batch
    snapshots: list[tuple[int, View]]
    gap_after: int | None
    upserts: dict[str, Array] = field(default_factory=dict)
    deletes: Array | None = None
    forwarded: bool = False

    def write(self, decoded: Callable[[Intake], None] | None = None) -> None:
        """Check and write the batch to the inert buffer (``DatasetState.write``), calling
        ``decoded(self)`` once it is decoded, before it is written.

        Raises:
            ProtocolError: as ``DatasetState.write``, or the batch is in shared memory
                (``install``); nothing was written then.
        """
        if self.batch.shared is not None:  # no rows to write: ``install`` takes it
            raise ProtocolError(f"batch {self.batch.seq} is in shared memory; read it there")
        self.upserts, self.deletes = self.state.decode(self.batch)
        if decoded is not None:
            decoded(self)
        self.state.apply(self.batch, self.snapshots, self.upserts, self.deletes)

    def install(self, read: SharedReader | None) -> None:
        """Take the leader's whole state the batch names in shared memory (``Batch.shared``),
        read by ``read`` (``relay.shell.sharedstate``), instead of writing rows.

        Raises:
            ProtocolError: this relay reads no shared memory, or the state cannot be read.
        """
        batch = self.batch
        if read is None:
            raise ProtocolError(f"batch {batch.seq} is in shared memory; this relay reads none")
        try:
            table, index, stamp = read(batch, self.state.buffer.active)
        except (OSError, ValueError) as exc:
            raise ProtocolError(f"batch {batch.seq}: its shared state: {exc}") from exc
        self.deletes = self.state.buffer.active.as_keys([])
        self.state.install(batch, self.snapshots, table, index, stamp)


#: Reads the state a batch names in shared memory, given a table of the dataset's schema.
SharedReader = Callable[[Batch, Table], tuple[Table, GridIndex, Stamp]]
