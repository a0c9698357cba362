"""Cutting a relay's stream for a relay below it, sans I/O (CA 3197003 [0135]-[0137], done by a
relay instead of the publisher).

A relay below holds primitives, as it would at the publisher; to the relay above it is much like
an ``every`` subscriber whose view is the union of those primitives. So each of its batches is
that view's step of the seq's change set: rows inside it upserted, held rows that left it or were
deleted deleted. Which rows of a change lie inside its primitives is the dataset kind's answer
(``DatasetKind.holds``: regions by coordinates, topic filters by topic, object paths by path, SQL
primitives by their boxes), so the cutting here is the same for every kind.

What the relay below holds (its *checkout*) is tracked as sorted keys; it may hold more keys than
the relay below still does (rows it pruned itself), which costs at most a delete of a key it no
longer has: deletes of keys not held are no-ops.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fanout.relay.core.changesets import ChangeSet
from fanout.relay.core.relaycore import RelayCore
from fanout.relay.data.buffers import Array, Keys, Mask
from fanout.relay.data.intake import Intake
from fanout.relay.data.nulls import masked
from fanout.relay.kinds import DatasetKind
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Knowledge

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


def step(change: ChangeSet, inside: Mask, held: Keys, *, key: str) -> Cut:
    """The batch of ``change`` for a relay below that holds the sorted keys ``held``.

    Each of the change's keys is looked up in ``held`` by bisection and the keys that leave or
    enter are merged into it in one pass: the cost is the change's size (times log of what is
    held) and one copy of ``held``, none when no key leaves or enters; the relay above does this
    for every relay below on every tick, and sorting all held keys each time was most of it.

    Args:
        change: the seq's change set (rows upserted, keys deleted).
        inside: which of ``change.rows`` lie inside the live primitives of the relay below.
        held: the keys it holds before (sorted, unique).
        key: the dataset's key column.
    """
    keys = np.asarray(change.rows[key]) if change.rows else held[:0]
    gone = np.asarray(change.deleted, dtype=held.dtype)
    outside = keys[~inside]
    leaving = np.concatenate([outside[_held(held, outside)], gone[_held(held, gone)]])
    left = np.unique(leaving).astype(held.dtype)
    entering = _sorted(keys[inside])
    remaining = held
    if len(left):
        kept = np.ones(len(held), dtype=bool)
        kept[np.searchsorted(held, left)] = False
        remaining = held[kept]
    new = entering[~_held(remaining, entering)].astype(held.dtype)
    after = np.insert(remaining, np.searchsorted(remaining, new), new) if len(new) else remaining
    return Cut(_take(change.rows, np.flatnonzero(inside)), left, after)


def _sorted(keys: Keys) -> Keys:
    """``np.unique(keys)`` for a change's distinct keys: as they are when already increasing
    (publishers often send them so; a sort of every key of the tick was a third of the cut)."""
    if len(keys) < 2 or (keys.dtype != object and bool(np.greater(keys[1:], keys[:-1]).all())):
        return keys
    return np.unique(keys)


def union(held: Keys, added: Keys) -> Keys:
    """The sorted distinct keys of the sorted ``held`` and ``added`` (any order), as
    ``np.union1d``, but only the keys not held are sorted and inserted."""
    keys = np.asarray(added)
    fresh = np.unique(keys[~_held(held, keys)]).astype(held.dtype)
    return np.insert(held, np.searchsorted(held, fresh), fresh) if len(fresh) else held


def _held(held: Keys, keys: Keys) -> Mask:
    """Which of ``keys`` are in the sorted ``held`` (by bisection, not by sorting both)."""
    if not len(held) or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(held, keys), len(held) - 1)
    return np.asarray(held[at] == keys, dtype=bool)


def merge(cut: Cut, content: Rows, key: str) -> Cut:
    """``cut`` with the whole ``content`` of some primitives added (rows by key: the content's
    are the newest), and none of its keys deleted."""
    added = np.asarray(content[key]) if content else np.zeros(0)
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
    return Cut(rows, deletes, union(cut.held, added))


def _take(rows: Mapping[str, Array], positions: npt.NDArray[np.intp]) -> Rows:
    return {name: np.asarray(values)[positions] for name, values in rows.items()}


def refreshed(intake: Intake, kind: DatasetKind) -> dict[str, Array]:
    """The rows of ``intake`` inside the primitives whose snapshots it carries: unchanged rows
    among the changes, for all the relay knows (none: a pure change set)."""
    views = [view for _, view in intake.snapshots]
    if not views or not intake.upserts:
        return {}
    mask = kind.holds(views, intake.upserts)
    if not mask.any():
        return {}
    return {name: np.asarray(values)[mask] for name, values in intake.upserts.items()}


def knowledge(req: int, dataset: str, change: ChangeSet, core: RelayCore) -> Knowledge:
    """Curiosity request ``req`` of a relay below answered with one seq's whole change."""
    key = core.datasets[dataset].info.key
    return Knowledge(
        req,
        dataset,
        change.epoch,
        change.seq,
        change.tick,
        change.tick_time,
        upserts=encode_columns(masked(change.rows)),
        deletes=encode_columns({key: change.deleted}),
    )
