"""One ``latest`` subscription's view of an ``objects`` dataset for the live path: a ``Judging``
lens (``relay.core.provisional``, rule 7; docs/objects.md, "Writes shown at once").

A view's cells are judged per object, on all of the object's cells (``f=`` comparisons), so a
write of some cells reaches the object's other cells: they enter or leave when the object starts
or stops passing. Pending cells are laid over the confirmed ones before judging. A write is
admitted here as the publisher admits it (``views.objects.store``: quality, deletions, missing
directories), over the cells of the objects it names with the pending ones on top; what the
publisher decides otherwise (cells this relay does not hold) is corrected when it answers.
A write made through another relay comes as its request (``Written``) and is admitted here the
same way, over the cells this relay holds (``publisher.passing`` rule 4; docs/objects.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import cast

import numpy as np

from fanout.relay.core.downstream import Subscription
from fanout.relay.core.provisional import Row
from fanout.relay.data.buffers import DoubleBuffer, Positions, Table
from fanout.relay.data.nulls import is_companion
from fanout.relay.kinds.lens import RowLens, Selects
from fanout.views.anyof import members_of
from fanout.views.objects import ObjectPath
from fanout.views.objects.store import KEY, ObjectStore, cell_of, directory_of, split_key


class ObjectLens(RowLens):
    """A subscription's view of cells, judged per whole object (the module's rules)."""

    @classmethod
    def maker(
        cls, selects: Selects
    ) -> Callable[[Subscription, DoubleBuffer, tuple[str, ...]], ObjectLens]:
        """The lenses of a kind whose ``selects`` judges whole objects' cells."""
        return lambda subscription, buffer, index: cls(subscription, buffer, index, selects)

    def confirmed(self, keys: Iterable[Hashable]) -> dict[Hashable, Row]:
        """The active state's cells of ``keys`` in the view, each object judged whole."""
        wanted = list(keys)
        table = self.buffer.active
        shown = self._shown(table, _cells_of(table, _objects(wanted)))
        return {key: shown.get(key) for key in wanted}

    def reach(self, keys: Iterable[Hashable], pending: Mapping[Hashable, Row]) -> set[Hashable]:
        """The cells, confirmed or pending, of the objects of ``keys`` in the view's scope (no
        cell of another can be in the view)."""
        wanted = list(keys)
        objects = self._in_scope(_objects(wanted))
        if not objects:
            return set()
        table = self.buffer.active
        held = table.keys[_cells_of(table, objects)].tolist()
        mine = (key for key in wanted if _object(key) in objects)
        return {*mine, *held, *(key for key in pending if _object(key) in objects)}

    def _in_scope(self, objects: set[str]) -> set[str]:
        """Those of ``objects`` in the scope of the view's paths."""
        if not objects:
            return objects
        ordered = sorted(objects)
        paths = np.asarray(ordered, dtype=np.str_)
        mask = np.zeros(len(ordered), dtype=bool)
        for path in members_of(self.subscription.view):
            mask |= cast(ObjectPath, path).in_scope(paths)
        return {path for path, kept in zip(ordered, mask.tolist(), strict=True) if kept}

    def judged(
        self, keys: Iterable[Hashable], pending: Mapping[Hashable, Row]
    ) -> dict[Hashable, Row]:
        """The cells of ``keys`` in the view, their objects' pending cells on the confirmed."""
        wanted = list(keys)
        cells = self._overlaid(_objects(wanted), pending)
        shown = self._shown(cells, np.arange(len(cells)))
        return {key: shown.get(key) for key in wanted}

    def admitted(
        self, rows: Mapping[Hashable, Row], pending: Mapping[Hashable, Row]
    ) -> dict[Hashable, Row]:
        """The cells a write changes, as the publisher's admission store decides them.

        Raises:
            InvalidWrite: the store refuses it (a bad path, a directory's name...).
        """
        upserts = [row for row in rows.values() if row is not None]
        deletes = [str(key) for key, row in rows.items() if row is None]
        named = {str(row["object"]) for row in upserts} | {split_key(k)[0] for k in deletes}
        cells = self._overlaid(named | _parents(named), pending)
        columns = cells.take(np.arange(len(cells)))
        names = list(columns)
        store = ObjectStore(
            cell_of(dict(zip(names, values, strict=True)))
            for values in zip(*(columns[name].tolist() for name in names), strict=True)
        )
        effects = store.admit(upserts, deletes)
        dtypes = self.buffer.active.dtypes
        out: dict[Hashable, Row] = {
            row[KEY]: {name: row[name] if name in row else is_companion(name) for name in dtypes}
            for row in effects.upserts
        }
        out.update(dict.fromkeys(effects.deletes))
        return out

    def _overlaid(self, objects: set[str], pending: Mapping[Hashable, Row]) -> Table:
        """The confirmed cells of ``objects`` with their pending cells on top."""
        table = self.buffer.active
        cells = Table(table.key, table.wire)
        cells.upsert(table.take(_cells_of(table, objects)), 0)
        mine = {key: row for key, row in pending.items() if _object(key) in objects}
        written = [row for row in mine.values() if row is not None]
        if written:
            cells.upsert(
                {
                    name: np.asarray([row[name] for row in written], dtype=dtype)
                    for name, dtype in table.dtypes.items()
                },
                0,
            )
        gone = [str(key) for key, row in mine.items() if row is None]
        if gone:
            cells.delete(cells.as_keys(gone))
        return cells


@functools.lru_cache(maxsize=1 << 16)
def _object(key: Hashable) -> str:
    """The object of a cell key (looked up for every pending cell, often)."""
    return split_key(str(key))[0]


def _objects(keys: Iterable[Hashable]) -> set[str]:
    return {_object(key) for key in keys}


def _parents(paths: Iterable[str]) -> set[str]:
    """Every directory above ``paths`` (the root's marker is never a cell)."""
    out: set[str] = set()
    for path in paths:
        while (path := directory_of(path)) != "/":
            out.add(path)
    return out


def _cells_of(table: Table, objects: set[str]) -> Positions:
    """Positions of the cells of ``objects`` (markers included): the keys that start with
    ``object?``, a range of the sorted keys (``?`` + 1 is ``@``)."""
    if not objects or not len(table):
        return np.empty(0, dtype=np.intp)
    ordered = sorted(objects)
    keys = table.keys
    starts = np.searchsorted(keys, np.asarray([f"{o}?" for o in ordered], dtype=object))
    ends = np.searchsorted(keys, np.asarray([f"{o}@" for o in ordered], dtype=object))
    ranges = [np.arange(a, b) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    return np.concatenate(ranges).astype(np.intp)
