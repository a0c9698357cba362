"""The relay's copy of the rows its upstream primitives cover (CA 3197003 [0137], state data store),
double-buffered (CA 3197003 [0147]-[0151]). Rules:

1. Batches are written to the **inert** buffer only; pushes read the **active** buffer only.
2. At the end of an epoch the buffers swap atomically (one assignment on the event loop, between
   two pushes), so every push is cut from one state, at one publisher tick.
3. After a swap the new inert buffer is made equal to the active one: the writes since the last
   swap replayed on it, or a copy when they touched much of the table.
4. The active buffer carries a spatial index (``relay.data.spatial``), built just before it
   becomes active.
5. Rows are column-wise, sorted by key (int64 or ``str``), each with the ``seq`` that last
   changed it: "updated" rows are those changed since a subscription's last push.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fanout.relay.data.nulls import is_companion, with_companions
from fanout.relay.data.spatial import GridIndex, IndexedRegion
from fanout.relay.data.writelog import (
    BufferCounters,
    Delete,
    DeleteInside,
    Log,
    RestartChanges,
    Upsert,
    Write,
)
from fanout.relay.kernels.compiled import COMPILED, fixed_width, tablekernel
from fanout.wire.columns import NUMERIC_DTYPES, STRING

Array = npt.NDArray[np.generic]
Keys = npt.NDArray[np.generic]  # int64, or object holding str
Mask = npt.NDArray[np.bool_]
Positions = npt.NDArray[np.intp]

#: ``changed`` of every row after an epoch change: older than any seq of the new epoch.
BEFORE_EPOCH = -1


def _dtype(wire: str) -> np.dtype[np.generic]:
    """Strings and decimals (``Decimal``) are held as objects, the rest as their numpy dtype."""
    return np.dtype(wire) if wire in NUMERIC_DTYPES else np.dtype(object)


def key_dtype(wire: str) -> np.dtype[np.generic]:
    """The dtype keys of wire dtype ``wire`` are held as: int64 for integers, object for str.

    Raises:
        ValueError: ``wire`` is neither an integer dtype nor ``"str"``.
    """
    if wire == STRING:
        return np.dtype(object)
    if np.dtype(wire).kind not in "iu":
        raise ValueError(f"a key column must hold integers or strings, not {wire}")
    return np.dtype(np.int64)


class Table:
    """Rows of one dataset, keyed by an integer or string key column, sorted by key."""

    def __init__(self, key: str, columns: Mapping[str, str]) -> None:
        """Create an empty table.

        Args:
            key: name of the key column (must be in ``columns``).
            columns: column name -> wire dtype (numpy dtype string or ``"str"``).

        Raises:
            ValueError: the key column is not an integer or string column.
        """
        self.key = key
        self.wire = dict(columns)
        self.dtypes = {name: _dtype(wire) for name, wire in columns.items()}
        self.dtypes[key] = key_dtype(columns[key])
        self.columns: dict[str, Array] = {
            name: np.empty(0, dtype=dtype) for name, dtype in self.dtypes.items()
        }
        self.changed: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        #: Whether some column has a companion (``relay.data.nulls``): only then does ``take`` look.
        self.nullable = any(map(is_companion, columns))

    @classmethod
    def restore(
        cls, like: Table, columns: dict[str, Array], changed: npt.NDArray[np.int64]
    ) -> Table:
        """A table of ``like``'s schema holding these arrays as they are (not copied: views of
        a leader's shared memory, ``relay.data.layout``)."""
        table = cls.__new__(cls)
        table.key, table.wire, table.dtypes = like.key, like.wire, like.dtypes
        table.nullable = like.nullable
        table.columns, table.changed = columns, changed
        return table

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def keys(self) -> Keys:
        """The sorted keys."""
        return self.columns[self.key]

    def as_keys(self, values: npt.ArrayLike) -> Keys:
        """``values`` as keys of this table (int64 or object array)."""
        return np.asarray(values, dtype=self.dtypes[self.key])

    def locate(self, keys: Keys) -> Positions:
        """The position of each key, or -1 where it is not held."""
        held = self.keys
        pos = np.searchsorted(held, keys)
        found = pos < len(held)
        found[found] = held[pos[found]] == keys[found]
        return np.where(found, pos, -1)

    def upsert(self, rows: Mapping[str, npt.ArrayLike], seq: int) -> None:
        """Insert or overwrite rows (unique keys); every column of the table must be present.

        Raises:
            KeyError: a column is missing from ``rows``.
        """
        incoming = {
            name: np.asarray(rows[name], dtype=dtype) for name, dtype in self.dtypes.items()
        }
        keys = incoming[self.key]
        if not len(keys):
            return
        names = list(incoming)
        targets = [self.columns[name] for name in names]
        sources = [incoming[name] for name in names]
        if tablekernel is not None and keys.dtype == np.int64 and fixed_width(*targets, *sources):
            # One pass without the GIL (the writer thread's; ``relay.kernels.tablekernel``).
            at = tablekernel.overwrite(self.keys, keys, targets, sources, self.changed, seq)
            found = at >= 0
        else:
            at = self.locate(keys)
            found = at >= 0
            hit = at[found]
            for name, values in incoming.items():
                self.columns[name][hit] = values[found]
            self.changed[hit] = seq
        if not found.all():
            self._insert({name: values[~found] for name, values in incoming.items()}, seq)

    def _insert(self, rows: Mapping[str, Array], seq: int) -> None:
        keys = np.concatenate([self.keys, rows[self.key]])
        order = np.argsort(keys, kind="stable")
        for name, values in rows.items():
            self.columns[name] = np.concatenate([self.columns[name], values])[order]
        fresh = np.full(len(rows[self.key]), seq, dtype=np.int64)
        self.changed = np.concatenate([self.changed, fresh])[order]

    def delete(self, keys: npt.ArrayLike) -> bool:
        """Remove rows by key; keys not present are ignored (a delete may race a prune).

        Returns:
            Whether any row was removed.
        """
        at = self.locate(self.as_keys(keys))
        at = at[at >= 0]
        if not len(at):
            return False
        keep = np.ones(len(self), dtype=bool)
        keep[at] = False
        self._keep(keep)
        return True

    def delete_where(self, mask: Mask) -> bool:
        """Remove the rows where ``mask`` is True; returns whether there were any."""
        if not mask.any():
            return False
        self._keep(~mask)
        return True

    def _keep(self, keep: Mask) -> None:
        for name in self.columns:
            self.columns[name] = self.columns[name][keep]
        self.changed = self.changed[keep]

    def restart_changes(self) -> None:
        """Mark every row as changed before any seq (a new epoch restarts seqs)."""
        self.changed[:] = BEFORE_EPOCH

    def column(self, name: str) -> Array:
        """One column, aligned with ``keys``."""
        return self.columns[name]

    def take(self, index: Positions, names: Sequence[str] | None = None) -> dict[str, Array]:
        """The rows at ``index`` (positions), column by column (only ``names`` if given, with
        their companions: ``relay.data.nulls``)."""
        if not names:
            chosen: Sequence[str] = list(self.columns)
        elif self.nullable:
            chosen = with_companions(names, self.columns)
        else:
            chosen = names
        return {name: self.columns[name].take(index) for name in chosen}

    def copy_from(self, other: Table) -> None:
        """Become an independent copy of ``other`` (same columns)."""
        arrays = [*other.columns.values(), other.changed]
        if tablekernel is not None and fixed_width(*arrays):
            copied = tablekernel.copies(arrays)  # without the GIL (the writer thread's)
        else:
            copied = [values.copy() for values in arrays]
        self.columns = dict(zip(other.columns, copied[:-1], strict=True))
        self.changed = copied[-1]


@dataclass(frozen=True)
class Stamp:
    """Where in the publisher's stream a buffer is: the last batch applied to it."""

    epoch: int
    seq: int
    tick: int
    tick_time: float


def new_tick(before: Stamp | None, after: Stamp | None) -> float | None:
    """The tick time of the new seq (or epoch) a swap from ``before`` to ``after`` brought;
    None if it brought none, only snapshots of primitives at the seq already held: no news to
    a reader served at that seq, only the completion of a view that waited for them."""
    if after is None or (
        before is not None and (before.epoch, before.seq) == (after.epoch, after.seq)
    ):
        return None
    return after.tick_time


@dataclass
class DoubleBuffer:
    """Active and inert copies of one dataset's table, the active one spatially indexed.

    Every write and ``mark`` first catches the inert table up with the last swap, then applies
    to it; ``swap`` itself only exchanges the tables (and installs the inert table's index if
    ``stage_index`` built it already). So the heavy steps — writing, indexing, catching up —
    may all run off the event loop (the relay's shell runs them on a worker thread), while the
    loop keeps reading the active table; the shell must only never ``swap`` during them.

    Attributes:
        active: the table pushes read; not modified while active.
        inert: the table writes go to.
        stamp: the stream position of the active table (None before the first swap).
        written: the stream position of the inert table (None before the first batch).
        generation: how many swaps brought new state; identifies the active state.
        shared: the leader's shared generation the active table was installed from
            (``install``), or -1: a table of its own.
        index: the grid over the active table's index columns.
        replay_limit: replay the writes on the new inert table when they touched at most this
            fraction of its rows, else copy.
        max_writes: writes kept for replay at most; past it the next catch-up copies (bounded).
    """

    key: str
    columns: Mapping[str, str]
    coordinates: tuple[str, ...]
    replay_limit: float = 0.25
    max_writes: int = 256
    active: Table = field(init=False)
    inert: Table = field(init=False)
    stamp: Stamp | None = None
    written: Stamp | None = None
    generation: int = 0
    shared: int = -1
    counters: BufferCounters = field(default_factory=BufferCounters)
    index: GridIndex = field(init=False)
    _pending: Log = field(init=False)  # written to the inert table since the last swap
    _behind: Log | None = None  # what the inert table lacks since the last swap
    _staged: GridIndex | None = None  # the inert table's index, if built since its last write
    _installed: int = -1  # the shared generation installed as the inert table, not swapped in
    _borrowed: bool = False  # the inert table is not ours to write (shared, or the active one)

    def __post_init__(self) -> None:
        self.active = Table(self.key, self.columns)
        self.inert = Table(self.key, self.columns)
        self.index = self._index(self.active)
        self._pending = Log(self.max_writes)

    def _index(self, table: Table) -> GridIndex:
        # The compiled kernel reads every column in the grid's cell order (``GridIndex.carried``).
        carry = COMPILED and table.keys.dtype == np.int64 and len(self.coordinates) in (2, 3)
        return GridIndex(
            [table.column(name) for name in self.coordinates],
            carry=(table.columns, table.changed) if carry else None,
        )

    @property
    def dirty(self) -> bool:
        """Whether the inert table holds writes the active one does not show yet."""
        return bool(self._pending) or self.written != self.stamp or self._installed >= 0

    # -- writes (inert buffer) ------------------------------------------------------------

    def upsert(self, rows: Mapping[str, npt.ArrayLike], seq: int) -> None:
        """Insert or overwrite rows in the inert table (see :meth:`Table.upsert`)."""
        count = len(np.asarray(rows[self.key]))
        if count:
            self._write(Upsert(rows, seq, count))

    def delete(self, keys: npt.ArrayLike) -> None:
        """Remove rows by key from the inert table."""
        keys = self.inert.as_keys(keys)
        if len(keys):
            self._write(Delete(keys))

    def delete_inside(
        self,
        regions: Sequence[IndexedRegion],
        kept: Sequence[IndexedRegion] = (),
        kept_keys: npt.ArrayLike = (),
    ) -> None:
        """Remove the inert table's rows inside any of ``regions`` but inside none of ``kept``.

        Rows keyed one of ``kept_keys`` stay wherever they are (entity primitives hold them).
        """
        if regions:
            self.catch_up()
            rows = len(self.inert)
            keys = self.inert.as_keys(kept_keys)
            write = DeleteInside(tuple(regions), tuple(kept), self.coordinates, rows, keys)
            self._write(write)

    def restart_changes(self) -> None:
        """A new epoch: every row of the inert table counts as changed before any new seq."""
        self.catch_up()
        self._write(RestartChanges(len(self.inert)))

    def mark(self, stamp: Stamp) -> None:
        """Record the stream position the inert table has reached."""
        self.catch_up()
        self.written = stamp

    def _write(self, write: Write) -> None:
        self.catch_up()
        # A write that changes nothing here changes nothing on the other buffer either (it is
        # replayed at the same point of the same sequence), so it is neither kept nor counted.
        if not write.apply(self.inert):
            return
        self._staged = None
        self.counters.writes += 1
        self._pending.add(write)

    def stage_index(self) -> None:
        """Build the inert table's index now, so that ``swap`` need not."""
        self.catch_up()
        if self._staged is None:
            self._staged = self._index(self.inert)

    # -- the epoch's end ------------------------------------------------------------------

    def swap(self) -> bool:
        """End the epoch: the inert table becomes active, with its index.

        The new inert table is caught up by the next write (or ``catch_up``).

        Returns:
            Whether there was anything to swap in.
        """
        if not self.dirty:
            return False
        self.index = self._staged if self._staged is not None else self._index(self.inert)
        leaving = self.shared  # the table that stops being active came from shared memory
        self.active, self.inert = self.inert, self.active
        self.stamp = self.written
        self.generation += 1
        self.counters.swaps += 1
        self._behind, self._pending = self._pending, Log(self.max_writes)
        self._staged = None
        self.shared, self._installed = self._installed, -1
        if self.shared >= 0 or leaving >= 0:  # no shared table stays inert: borrow the active
            self.inert, self._borrowed, self._behind = self.active, True, None
        return True

    def install(self, table: Table, index: GridIndex, stamp: Stamp, generation: int) -> None:
        """Make ``table`` (a leader's whole state at ``stamp``, read from its shared memory,
        with its grid) the inert table, in place of everything written to it since the last
        swap; ``swap`` makes it active. Its arrays are never written: a write after it goes
        to a copy (``catch_up``)."""
        self.inert, self._staged, self.written = table, index, stamp
        self._pending, self._behind = Log(self.max_writes), None
        self._installed, self._borrowed = generation, True

    def catch_up(self) -> None:
        """Bring the inert table up to date with the active one (CA 3197003 [0150], step 1070d)."""
        behind, self._behind = self._behind, None
        if self._borrowed:  # first a table of our own, equal to the one borrowed
            source = self.inert if self._installed >= 0 else self.active
            self.inert, self._borrowed = Table(self.key, self.columns), False
            self.inert.copy_from(source)
            self.counters.copies += 1
            return
        if behind is None:
            return
        if behind.overflowed or behind.rows > self.replay_limit * max(len(self.active), 1):
            self.inert.copy_from(self.active)
            self.counters.copies += 1
        else:
            for write in behind.writes:
                write.apply(self.inert)
            self.counters.replays += 1

    # -- reads (active buffer) ------------------------------------------------------------

    def query(self, region: IndexedRegion) -> Positions:
        """Sorted positions of the active rows ``region`` matches."""
        return self.index.query(region)
