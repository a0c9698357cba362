"""Cutting a relay's stream for a relay below it, sans I/O (CA 3197003 [0135]-[0137], done by a
relay instead of the publisher).

A relay below holds primitives, as it would at the publisher; to the relay above it is much like
an ``every`` subscriber whose view is the union of those primitives. So each of its batches is
that view's step of the seq's change set (``relay.changesets.delta``: rows inside it upserted,
held rows that left it or were deleted deleted), and each snapshot is the rows of the relay's own
copy inside the primitive, as the publisher's checkout and snapshots do.

What the relay below holds (its *checkout*) is tracked as sorted keys; it may hold more keys than
the relay below still does (rows it pruned itself), which costs at most a delete of a key it no
longer has: deletes of keys not held are no-ops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fanout.relay.changesets import ChangeSet, delta
from fanout.relay.state import Array, DoubleBuffer, Keys, Table
from fanout.views.members import members
from fanout.views.region import Box, RegionUnion, Sector, Sphere

#: What relays below acquire (an intersection is a subscriber's effective view, never theirs).
Region = Box | Sphere | Sector | RegionUnion

Rows = dict[str, Array]


@dataclass(frozen=True)
class Cut:
    """One seq's batch for a relay below, before encoding.

    Attributes:
        upserts: rows to upsert, column -> array (every column of the dataset).
        deletes: keys to delete.
        held: the keys the relay below holds after it.
    """

    upserts: Rows
    deletes: Keys
    held: Keys


def union(views: Sequence[Region]) -> Region:
    """The union of one or more regions, as one view."""
    if len(views) == 1:
        return views[0]
    return RegionUnion(tuple(_members(views)))


def _members(views: Sequence[Region]) -> list[Box | Sphere | Sector]:
    out: list[Box | Sphere | Sector] = []
    for view in views:
        out.extend(view.members if isinstance(view, RegionUnion) else (view,))
    return out


def inside(
    rows: Mapping[str, npt.ArrayLike], views: Sequence[Region], index: Sequence[str]
) -> npt.NDArray[np.bool_]:
    """Which of ``rows`` lie inside any of ``views`` (none: no row)."""
    if not views:
        length = len(np.asarray(next(iter(rows.values())))) if rows else 0
        return np.zeros(length, dtype=bool)
    return members(union(views), rows, index)


def step(
    change: ChangeSet, views: Sequence[Region], held: Keys, *, key: str, index: Sequence[str]
) -> Cut:
    """The batch of ``change`` for a relay below whose ready primitives are ``views`` and which
    holds the sorted keys ``held``."""
    if not views:
        gone = np.asarray(change.deleted, dtype=held.dtype)
        left = gone[np.isin(gone, held)]
        return Cut(_take(change.rows, np.zeros(0, np.intp)), left, np.setdiff1d(held, left))
    found = delta(change, key, union(views), tuple(index), held)
    positions = np.union1d(found.entered, found.updated).astype(np.intp)
    return Cut(_take(change.rows, positions), found.left, found.held)


def snapshot(table: Table, views: Sequence[Region], index: Sequence[str]) -> Rows:
    """The rows of ``table`` inside any of ``views``, every column."""
    mask = inside({name: table.column(name) for name in index}, views, index)
    return table.take(np.flatnonzero(mask))


def snapshot_active(buffer: DoubleBuffer, views: Sequence[Region]) -> Rows:
    """The rows of ``buffer``'s active table inside any of ``views``, found through its grid
    index (``snapshot`` of the active table, without a scan of every row)."""
    if not views:
        return buffer.active.take(np.zeros(0, np.intp))
    return buffer.active.take(buffer.query(union(views)))


def merge(cut: Cut, content: Rows, key: str) -> Cut:
    """``cut`` with the whole ``content`` of some primitives added (rows by key: the content's
    are the newest), and none of its keys deleted."""
    added = np.asarray(content[key])
    if not len(added):
        return cut
    ours = np.asarray(cut.upserts[key]) if cut.upserts else added[:0]
    keep = np.flatnonzero(~np.isin(ours, added))
    rows = {
        name: np.concatenate([np.asarray(cut.upserts[name])[keep], np.asarray(values)])
        if cut.upserts
        else np.asarray(values)
        for name, values in content.items()
    }
    deletes = cut.deletes[~np.isin(cut.deletes, added)]
    held = np.union1d(cut.held, added).astype(cut.held.dtype)
    return Cut(rows, deletes, held)


def _take(rows: Mapping[str, Array], positions: npt.NDArray[np.intp]) -> Rows:
    return {name: np.asarray(values)[positions] for name, values in rows.items()}
