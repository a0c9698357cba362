"""Topic, object-path and SQL datasets at the relay: rows by key, primitives that select by key.

The rows of these datasets live in the same double buffer as regions' (``relay.state``): sorted by
key, each with the seq that last changed it, swapped in at the end of an epoch. What differs is
how a primitive or a view picks rows, so this module supplies that:

* a **snapshot** drops what was held inside its primitive before its rows are applied, and a
  **released** primitive's rows are pruned (when no other held primitive holds them): both as
  deletes by key (``DoubleBuffer.delete``), which replay on the other buffer like any write;
* a **view's rows** on the active buffer: a topic filter's through the match index
  (``views.topic.index``; every distinct filter of the dataset in one pass over its topics, once
  per buffer generation), an object path's by scope and attribute filters. The push is then cut
  like a region's (``relay.pushes.cut_positions``): entered, updated since the held seq, left.

SQL views are answered by DuckDB (``relay.tables``); their datasets still use :class:`KeyedState`
for snapshots and pruning, with each ``SqlBox`` primitive matched on the buffer's columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fanout.errors import InvalidView
from fanout.relay import release
from fanout.relay.intake import DatasetState
from fanout.relay.state import Mask, Positions, Table
from fanout.views import View
from fanout.views.members import members
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql, SqlBox
from fanout.views.topic import TopicFilter
from fanout.views.topic.index import TopicIndex
from fanout.wire.messages import DatasetInfo


@dataclass
class KeyedState(DatasetState):
    """A topic, path or SQL dataset's copy and stream position.

    Attributes:
        dropped: (primitive, when) of primitives released lately, still pruned for a while.
    """

    dropped: list[tuple[View, float]] = field(default_factory=list)

    def drop_inside(self, views: Sequence[View]) -> None:
        """Delete the inert rows inside any of these primitives (a snapshot replaces them)."""
        if views:
            self.buffer.catch_up()
            table = self.buffer.inert
            self.buffer.delete(table.keys[inside(views, table, self.info)])

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
        gone = inside(dropped, table, self.info)
        if gone.any() and kept:  # only primitives that meet a dropped one can keep its rows
            gone &= ~inside(release.near(kept, dropped), table, self.info)
        self.buffer.delete(table.keys[gone])


def inside(views: Iterable[View], table: Table, info: DatasetInfo) -> Mask:
    """Which rows of ``table`` any of the primitives ``views`` holds upstream.

    A topic filter holds its topics; an object path every attribute of the objects in its scope
    (the publisher ignores attribute filters upstream); a SQL primitive the rows in its boxes.
    """
    mask = np.zeros(len(table), dtype=bool)
    topics: pa.Array | None = None
    paths: npt.NDArray[np.str_] | None = None
    for view in views:
        if not len(table):
            break
        match view:
            case TopicFilter():
                if topics is None:
                    topics = pa.array(table.column(info.index_columns[0]).tolist(), pa.string())
                mask |= view.match_arrow(topics)
            case ObjectPath():
                if paths is None:
                    paths = _paths(table, info)
                mask |= view.in_scope(paths)
            case SqlBox():
                mask |= view.match(table.columns)
            case Sql():
                for prim in view.primitives():
                    if prim.table == info.name.lower():
                        mask |= prim.match(table.columns)
    return mask


def _paths(table: Table, info: DatasetInfo) -> npt.NDArray[np.str_]:
    return np.asarray(table.column(info.index_columns[0]), dtype=np.str_)


@dataclass
class TopicMatches:
    """The active rows each topic filter of a dataset matches, for one buffer generation.

    Attributes:
        passes: passes made over the dataset's topics (one per generation and new filters).
        not_topics: rows those passes found whose topic is no topic name (matched by nothing).
    """

    passes: int = 0
    not_topics: int = 0
    _generation: int = -1
    _positions: dict[str, Positions] = field(default_factory=dict)

    def positions(
        self,
        view: TopicFilter,
        table: Table,
        info: DatasetInfo,
        generation: int,
        wanted: Callable[[], Iterable[View]],
    ) -> Positions:
        """Sorted positions of the rows ``view`` matches in ``table`` (the active buffer).

        The first call for a generation matches every topic filter ``wanted()`` lists (the
        dataset's views) in one pass: each topic walks the match index once, whatever the number of
        filters.
        """
        if generation != self._generation:
            self._generation, self._positions = generation, {}
        found = self._positions.get(view.filter)
        if found is None:
            filters = {v.filter for v in wanted() if isinstance(v, TopicFilter)} | {view.filter}
            self._match(sorted(filters - set(self._positions)), table, info)
            found = self._positions[view.filter]
        return found

    def _match(self, filters: Sequence[str], table: Table, info: DatasetInfo) -> None:
        index = TopicIndex()
        for number, text in enumerate(filters):
            index.add(text, number)
        hits: list[list[int]] = [[] for _ in filters]
        for position, topic in enumerate(table.column(info.index_columns[0]).tolist()):
            try:
                numbers = index.match(topic)
            except InvalidView:  # null, empty, a wildcard...: counted, matched by nothing
                self.not_topics += 1
                continue
            for number in numbers:
                hits[number].append(position)
        for text, positions in zip(filters, hits, strict=True):
            self._positions[text] = np.asarray(positions, dtype=np.intp)
        self.passes += 1


def path_positions(view: ObjectPath, table: Table, info: DatasetInfo) -> Positions:
    """Sorted positions of the objects ``view`` selects: in its scope, passing a filter if any."""
    return np.flatnonzero(members(view, table.columns, info.index_columns))


def path_columns(view: ObjectPath, columns: Sequence[str], key: str) -> tuple[str, ...]:
    """The columns a path view sends: the key and the attributes ``f=`` names (all if none)."""
    if view.attributes is None:
        return tuple(columns)
    return tuple(name for name in columns if name == key or name in view.attributes)
