"""The copy of a topic, object-path or SQL dataset at the relay: rows by key, and the rows a
primitive holds upstream.

The rows of these datasets live in the same double buffer as regions' (``relay.data.buffers``):
sorted by key, each with the seq that last changed it, swapped in at the end of an epoch. What
differs is how a primitive picks rows (``picks``: ``selected`` unless its kind says otherwise), so:

* a **snapshot** drops what was held inside its primitive before its rows are applied, and a
  **released** primitive's rows are pruned (when no other held primitive holds them): both as
  deletes by key (``DoubleBuffer.delete``), which replay on the other buffer like any write.

Which rows a *view* selects is its kind's business (``relay.kinds.topic``, ``relay.kinds.path``,
``relay.kinds.sql``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fanout.relay.core import release
from fanout.relay.data.buffers import Array, Mask, Table
from fanout.relay.data.intake import DatasetState
from fanout.relay.data.nulls import masked
from fanout.views import View
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql, SqlBox
from fanout.views.topic import TopicFilter
from fanout.wire.messages import DatasetInfo

#: Which of some rows (column -> values, aligned) any of some primitives holds upstream.
Picks = Callable[[Iterable[View], Mapping[str, Array], DatasetInfo], Mask]
#: The rows a write of some rows may change, given the dataset's index columns.
Reach = Callable[[Mapping[str, Array], Sequence[str]], Mapping[str, Array]]


@dataclass
class KeyedState(DatasetState):
    """A topic, path or SQL dataset's copy and stream position.

    Attributes:
        dropped: (primitive, when) of primitives released lately, still pruned for a while.
        picks: which rows a primitive holds upstream (as the publisher's matcher pairs them).
    """

    dropped: list[tuple[View, float]] = field(default_factory=list)
    picks: Picks = field(default_factory=lambda: selected)

    def held(self, views: Iterable[View], table: Table) -> Mask:
        """Which rows of ``table`` any of the primitives ``views`` holds upstream."""
        return self.picks(views, table.columns, self.info)

    def drop_inside(self, views: Sequence[View]) -> None:
        """Delete the inert rows inside any of these primitives (a snapshot replaces them)."""
        if views:
            self.buffer.catch_up()
            table = self.buffer.inert
            self.buffer.delete(table.keys[self.held(views, table)])

    def prune(self, now: float, window: float, kept: Sequence[View]) -> None:
        """Delete rows inside primitives released in the last ``window`` seconds but no ``kept``.

        Batches already on their way when a primitive was released may still bring its rows, so
        the caller prunes again at each housekeeping while the window lasts.
        """
        self.dropped = [(view, when) for view, when in self.dropped if now - when <= window]
        if not self.dropped or self.busy:
            return
        self.buffer.catch_up()
        table = self.buffer.inert
        dropped = [view for view, _ in self.dropped]
        gone = self.held(dropped, table)
        if gone.any() and kept:  # only primitives that meet a dropped one can keep its rows
            gone &= ~self.held(release.near(kept, dropped), table)
        self.buffer.delete(table.keys[gone])


def inside(views: Iterable[View], table: Table, info: DatasetInfo) -> Mask:
    """Which rows of ``table`` any of the primitives ``views`` holds upstream (``selected``)."""
    return selected(views, table.columns, info)


def selected(views: Iterable[View], rows: Mapping[str, Array], info: DatasetInfo) -> Mask:
    """Which of ``rows`` (column -> values, aligned, every column the relay holds: a table's,
    or a batch's change) any of the primitives ``views`` holds upstream.

    A topic filter holds its topics; an object path every attribute of the objects in its scope
    (the publisher ignores attribute filters upstream); a SQL primitive the rows in its boxes.
    """
    length = len(next(iter(rows.values()))) if rows else 0
    mask = np.zeros(length, dtype=bool)
    topics: pa.Array | None = None
    paths: npt.NDArray[np.str_] | None = None
    nulls: dict[str, Array] | None = None  # the columns with NULLs masked (``relay.data.nulls``)
    for view in views:
        if not length:
            break
        match view:
            case TopicFilter():
                if topics is None:
                    topics = pa.array(rows[info.index_columns[0]].tolist(), pa.string())
                mask |= view.match_arrow(topics)
            case ObjectPath():
                if paths is None:
                    paths = np.asarray(rows[info.index_columns[0]], dtype=np.str_)
                mask |= view.in_scope(paths)
            case SqlBox():
                nulls = masked(rows) if nulls is None else nulls
                mask |= view.match(nulls)
            case Sql():
                nulls = masked(rows) if nulls is None else nulls
                for prim in view.primitives():
                    if prim.table == info.name.lower():
                        mask |= prim.match(nulls)
    return mask
