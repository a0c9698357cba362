"""The driver's copy of a dataset's live rows, for snapshots (CA 3197003 [0155]-[0156]; why:
docs/concepts.md, "Batches, snapshots and sequence numbers").

Rules:

1. **Updated from the changed rows** the pipeline collects each micro-batch; re-applying a
   micro-batch leaves it as it was.
2. **Matched as Spark matches.** Snapshots are cut with the views' own numpy matching, which
   follows the Spark matchers' rules (regions, entities, topic filters, object paths whole,
   SQL boxes), so a snapshot and the changes after it agree on every row; a null topic or path
   is matched by nothing.
3. **Spark's state store is the authority.** The mirror is loaded from it when first needed
   and dropped (back to the state store) past ``max_rows`` or when a micro-batch does not
   follow the one it is as of.
4. **Cost by rows changed:** one numpy array per column and a dict from key to position.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fanout.publisher.datasets import DELETED
from fanout.publisher.delivery import rows_by_relay
from fanout.publisher.matching.base import Prim
from fanout.views.entity import Entity
from fanout.views.members import members
from fanout.views.objects import ObjectPath
from fanout.views.region import Box, RegionUnion, Sector, Sphere
from fanout.views.sql import SqlBox
from fanout.views.topic import TopicFilter

log = logging.getLogger(__name__)

#: Default ``max_rows``: with the ``agents`` columns about 225 bytes a row (the key dict
#: included), so about 450 MB of the driver's memory at most.
MAX_ROWS = 2_000_000

Positions = npt.NDArray[np.int64]


class Mirror:
    """The live rows of one dataset as of one micro-batch (see the module docstring).

    Attributes:
        seq: the micro-batch the rows are as of (-1: not loaded).
        too_big: the state outgrew ``max_rows``; snapshots come from the state store until a
            restart.
    """

    def __init__(self, key: str, index_columns: Sequence[str], max_rows: int = MAX_ROWS) -> None:
        self.key = key
        self.index_columns = tuple(index_columns)
        self.max_rows = max_rows
        self.seq = -1
        self.too_big = max_rows <= 0
        self._rows: _Rows | None = None
        self._views: _Views | None = None

    @property
    def rows(self) -> int:
        """How many live rows it holds (0 when not loaded)."""
        return 0 if self._rows is None else self._rows.count

    def holds(self, seq: int) -> bool:
        """Whether it holds the live rows as of micro-batch ``seq``."""
        return self._rows is not None and self.seq == seq

    def load(self, live: pa.Table, seq: int) -> bool:
        """Hold ``live`` (every live row, one per key, as of micro-batch ``seq``).

        Returns:
            Whether it is held (False: more than ``max_rows``, now or before).
        """
        if self.too_big:
            return False
        if live.num_rows > self.max_rows:
            self._give_up(live.num_rows)
            return False
        self._rows, self._views, self.seq = _Rows(_public(live), self.key), None, seq
        log.info("mirror loaded: %d live rows as of micro-batch %d", live.num_rows, seq)
        return True

    def apply(self, changes: pa.Table, seq: int) -> None:
        """Lay micro-batch ``seq``'s changed rows (one per key, with ``_deleted``) over it.

        Micro-batch 0 (a new stream's first: the state before it is empty) loads it. Otherwise
        nothing happens when it is not loaded, and it is dropped when ``seq`` does not follow the
        micro-batch it is as of (``seq`` itself again is a re-run: the same result).
        """
        if self.too_big:
            return
        if seq == 0:
            self.load(changes.filter(pc.invert(_deleted(changes))), 0)
            return
        if self._rows is None:
            return
        if seq not in (self.seq, self.seq + 1):
            log.info("mirror of micro-batch %d dropped: micro-batch %d is next", self.seq, seq)
            self.drop()
            return
        deleted = _deleted(changes).to_numpy(zero_copy_only=False)
        self._rows.change(_public(changes), deleted)
        self._views, self.seq = None, seq
        if self._rows.count > self.max_rows:
            self._give_up(self._rows.count)

    def drop(self) -> None:
        """Forget the rows (the next snapshot loads them again)."""
        self._rows, self._views, self.seq = None, None, -1

    def snapshots(self, prims: Iterable[Prim]) -> dict[int, pa.Table]:
        """relay -> the live rows inside any of its ``prims``.

        Raises:
            RuntimeError: it is not loaded.
            TypeError: a primitive is of no kind a dataset holds (see the module docstring).
        """
        rows = self._rows
        if rows is None:
            raise RuntimeError("the mirror is not loaded")
        if self._views is None:
            self._views = _Views(rows, self.index_columns)
        relays: list[npt.NDArray[np.int32]] = []
        positions: list[Positions] = []
        for relay, _, view in prims:
            hits = self._views.inside(view)
            relays.append(np.full(len(hits), relay, dtype=np.int32))
            positions.append(hits)
        if not positions:
            return {}
        matched = rows.take(np.concatenate(positions)).append_column(
            "_relay", pa.array(np.concatenate(relays))
        )
        return rows_by_relay(matched)

    def _give_up(self, count: int) -> None:
        log.warning(
            "%d live rows exceed the mirror's %d (max_rows): snapshots read Spark's state store",
            count,
            self.max_rows,
        )
        self.drop()
        self.too_big = True


class _Rows:
    """Rows as numpy columns with a key -> position dict; updated in place."""

    def __init__(self, table: pa.Table, key: str) -> None:
        self.schema = table.schema
        self.key = key
        # Copies: the rows are changed in place, and Arrow's zero-copy arrays are read-only.
        self.columns = {name: _values(table.column(name)).copy() for name in table.column_names}
        keys = self.columns[key].tolist()
        self.index: dict[Hashable, int] = dict(zip(keys, range(len(keys)), strict=True))
        self.count = len(keys)

    def positions(self, keys: Sequence[Hashable]) -> Positions:
        """Each key's position, -1 where it is not held."""
        index = self.index
        return np.fromiter((index.get(key, -1) for key in keys), np.int64, count=len(keys))

    def change(self, changes: pa.Table, deleted: npt.NDArray[np.bool_]) -> None:
        """Upsert the rows of ``changes`` that are not ``deleted``; remove those that are."""
        keys = changes.column(self.key).to_numpy(zero_copy_only=False).tolist()
        at = self.positions(keys)
        held = at >= 0
        changed = {name: _values(changes.column(name)) for name in self.columns}
        updated = held & ~deleted
        for name, values in changed.items():
            self._column(name, values)[at[updated]] = values[updated]
        added = ~held & ~deleted
        if added.any():
            first = self.count
            for name, values in changed.items():
                column = self._column(name, values)
                self.columns[name] = np.concatenate([column, values[added].astype(column.dtype)])
            new_keys = [key for key, new in zip(keys, added.tolist(), strict=True) if new]
            self.index.update(zip(new_keys, range(first, first + len(new_keys)), strict=True))
            self.count += len(new_keys)
        self._remove(at[held & deleted])

    def take(self, positions: Positions) -> pa.Table:
        """The rows at ``positions``, in the schema they came in."""
        return pa.table(
            {
                field.name: pa.array(self.columns[field.name][positions], type=field.type)
                for field in self.schema
            },
            schema=self.schema,
        )

    def _column(self, name: str, values: np.ndarray) -> np.ndarray:
        """Column ``name``, made able to hold ``values`` (nulls: an object column from then on)."""
        column = self.columns[name]
        if values.dtype == object and column.dtype != object:
            column = self.columns[name] = column.astype(object)
        return column

    def _remove(self, gone: Positions) -> None:
        """Remove the rows at ``gone``: the last rows move into the holes they leave."""
        if not len(gone):
            return
        for key in self.columns[self.key][gone].tolist():
            del self.index[key]
        remaining = self.count - len(gone)
        is_gone = np.zeros(self.count, dtype=bool)
        is_gone[gone] = True
        holes = np.flatnonzero(is_gone[:remaining])
        movers = remaining + np.flatnonzero(~is_gone[remaining:])
        for name, column in self.columns.items():
            column[holes] = column[movers]
            self.columns[name] = column[:remaining]
        moved = self.columns[self.key][holes].tolist()
        self.index.update(zip(moved, holes.tolist(), strict=True))
        self.count = remaining


class _Views:
    """What primitives are matched on, derived from the rows once per micro-batch, when first
    needed: positions sorted by the first index column (regions), the index column as Arrow
    strings (topics) or numpy ones (paths), the rows as Arrow (SQL)."""

    def __init__(self, rows: _Rows, index_columns: Sequence[str]) -> None:
        self.rows = rows
        self.index_columns = index_columns
        self._sorted: _Sorted | None = None
        self._topics: pa.Array | None = None
        self._named: tuple[Positions, npt.NDArray[np.str_]] | None = None
        self._table: pa.Table | None = None

    def inside(self, view: object) -> Positions:
        """Positions of the rows ``view`` selects, sorted.

        Raises:
            TypeError: ``view`` is not a primitive of any dataset.
        """
        rows = self.rows
        match view:
            case Entity():
                hits = rows.positions([view.key])
                return hits[hits >= 0]
            case Box() | Sphere() | Sector() | RegionUnion():
                if self._sorted is None:
                    self._sorted = _Sorted(rows, self.index_columns)
                return self._sorted.inside(view)
            case TopicFilter():
                if self._topics is None:
                    self._topics = pa.array(rows.columns[self.index_columns[0]], pa.string())
                return np.flatnonzero(view.match_arrow(self._topics))
            case ObjectPath():
                named, paths = self._paths()
                return named[view.in_scope(paths)]
            case SqlBox():
                if self._table is None:
                    self._table = rows.take(np.arange(rows.count))
                return np.flatnonzero(view.match(self._table))
        raise TypeError(f"a dataset holds no {type(view).__name__} primitives")

    def _paths(self) -> tuple[Positions, npt.NDArray[np.str_]]:
        """Where the (one) index column is not null, and its values there."""
        if self._named is None:
            values = self.rows.columns[self.index_columns[0]].tolist()
            named = [at for at, value in enumerate(values) if value is not None]
            paths = np.array([values[at] for at in named], dtype=np.str_)
            self._named = (np.array(named, dtype=np.int64), paths)
        return self._named


class _Sorted:
    """The rows' positions sorted by the first index column, so a region's candidates are one
    binary search away; the region's ``match`` decides among them."""

    def __init__(self, rows: _Rows, index_columns: Sequence[str]) -> None:
        self.columns = {name: _coordinates(rows.columns[name]) for name in index_columns}
        self.index_columns = index_columns
        first = self.columns[index_columns[0]]
        self.order = np.argsort(first)
        self.first = first[self.order]

    def inside(self, view: Box | Sphere | Sector | RegionUnion) -> Positions:
        """Positions of the rows inside ``view``."""
        bounds = view.bounds()
        start = int(np.searchsorted(self.first, bounds.lo[0], side="left"))
        stop = int(np.searchsorted(self.first, bounds.hi[0], side="right"))
        candidates = self.order[start:stop]
        picked = {name: values[candidates] for name, values in self.columns.items()}
        return np.sort(candidates[members(view, picked, self.index_columns)])


def _values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column's values as numpy: its own dtype, or objects (``None`` for null) if it has nulls
    or is not numeric."""
    if column.null_count or not (pa.types.is_integer(column.type) or _plain(column.type)):
        return np.array(column.to_pylist(), dtype=object)
    return np.asarray(column.to_numpy())


def _coordinates(values: np.ndarray) -> npt.NDArray[np.float64]:
    """An index column as floats, a null as NaN (inside no region)."""
    if values.dtype == object:
        return np.array([np.nan if v is None else v for v in values.tolist()], dtype=np.float64)
    return values.astype(np.float64, copy=False)


def _plain(kind: pa.DataType) -> bool:
    return bool(pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _deleted(changes: pa.Table) -> pa.ChunkedArray:
    return changes.column(DELETED).fill_null(False)


def _public(table: pa.Table) -> pa.Table:
    """The table without ``_`` columns, every field nullable (tables from Spark differ in that)."""
    table = table.drop_columns([name for name in table.column_names if name.startswith("_")])
    schema = pa.schema([field.with_nullable(True) for field in table.schema])
    return table.cast(schema)
