"""Which upstream primitives of a SQL, topic or path dataset no subscription needs any more.

A primitive may go when every need (each subscription's part of the dataset,
``relay.kinds.keyed``) stays covered by the other ready primitives; the oldest go first, as for
regions (``relay.core.planner.unneeded``), so a view that moved on lets go of what it held before.

Asked naively that is a coverage check of every need against every primitive but one, for
every primitive: cubic in the subscriptions, on the relay's event loop (``bench/release.py``:
32 s a pass for 400 topic subscribers). But a primitive that shares no topic, object or row
with a need (``meets`` of the view's kind) neither helps nor hinders covering it, so:

* each need is paired once with the ready primitives that meet it: those found under its
  ``probes`` (by a topic filter's literal levels, an object path's directory, a SQL
  primitive's table and, among that table's, by the range of the column their boxes constrain
  most often), then the kind's exact ``meets``;
* a primitive's release is decided by the needs it meets alone, each checked against its own
  meeting primitives still held.

The answer is the naive one's, because the coverage algebra of these kinds is exact (a
property test compares the two).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np

from fanout.relay.core.upstream import Primitive
from fanout.views import View, covers, kind_of, objects, sql, topic
from fanout.views.objects import ObjectPath
from fanout.views.sql import SqlBox
from fanout.views.topic import TopicFilter

T = TypeVar("T")


def unneeded(prims: Sequence[Primitive], needs: Sequence[View]) -> list[Primitive]:
    """Primitives that can go, oldest first: every need stays covered by the other ready ones."""
    alive = sorted(prims, key=lambda p: p.prim)
    meeting = _Meeting([p for p in alive if p.ready], needs)
    if not all(meeting.covered(at) for at in range(len(needs))):
        return []  # a need the ready primitives do not cover: each of them may be part of it
    gone: list[Primitive] = []
    for prim in alive:
        if needs and not meeting.others(prim.prim):
            continue  # the last ready primitive stays while anything is needed
        if all(meeting.covered(at, without=prim.prim) for at in meeting.met_by(prim.prim)):
            gone.append(prim)
            meeting.drop(prim.prim)
    return gone


def meets(a: View, b: View) -> bool:
    """Whether ``a`` and ``b`` could share a topic, object or row (True when not known; views
    of different kinds select from different datasets: False)."""
    if isinstance(a, TopicFilter) and isinstance(b, TopicFilter):
        return topic.meets(a, b)
    if isinstance(a, ObjectPath) and isinstance(b, ObjectPath):
        return objects.meets(a, b)
    if isinstance(a, SqlBox) and isinstance(b, SqlBox):
        return sql.meets(a, b)
    return kind_of(a) == kind_of(b)


def registered(view: View) -> list[Hashable] | None:
    """The keys a held primitive is found under (None: under none, as it may meet any view;
    see ``probes``)."""
    if isinstance(view, TopicFilter):
        prefix = _literal_prefix(view)
        return [("exact", prefix), *(("within", prefix[:end]) for end in range(len(prefix) + 1))]
    if isinstance(view, ObjectPath):
        directory = view.directory.rstrip("/")
        own = ("all", directory) if view.all else ("object", view.object_path)
        return [own, ("in", directory)]
    if isinstance(view, SqlBox):
        return [("sql", view.table)]
    return None


def probes(view: View) -> list[Hashable] | None:
    """The keys under which every held primitive that may meet ``view`` is found, none under
    two of them (None: look at every one).

    Topic filters by their literal levels before the first wildcard (a filter meets another
    only if either's literal prefix starts with the other's); object paths by directory (an
    object meets itself and its directory's ``.all``; a ``.all`` everything in its directory);
    SQL primitives by table.
    """
    if isinstance(view, TopicFilter):
        prefix = _literal_prefix(view)
        shorter = [("exact", prefix[:end]) for end in range(len(prefix))]
        return [*shorter, ("within", prefix)]
    if isinstance(view, ObjectPath):
        directory = view.directory.rstrip("/")
        if view.all:
            return [("in", directory)]
        return [("object", view.object_path), ("all", directory)]
    if isinstance(view, SqlBox):
        return [("sql", view.table)]
    return None


def _literal_prefix(view: TopicFilter) -> tuple[str, ...]:
    levels = view.levels
    for at, level in enumerate(levels):
        if level in ("+", "#"):
            return levels[:at]
    return levels


class _Index(Generic[T]):
    """Items found by their views' ``registered`` keys."""

    def __init__(self, items: Sequence[T], view_of: Callable[[T], View]) -> None:
        self.items = items
        self.view_of = view_of
        self.found: dict[Hashable, list[T]] = {}
        self.wide: list[T] = []  # found under no key: they may meet anything
        for item in items:
            keys = registered(view_of(item))
            if keys is None:
                self.wide.append(item)
                continue
            for key in keys:
                self.found.setdefault(key, []).append(item)
        self._hulls: dict[str, _Hulls[T]] = {}

    def meeting(self, view: View) -> list[T]:
        """The items whose views meet ``view``."""
        probe = probes(view)
        found: Iterable[T]
        if probe is None:
            return [item for item in self.items if meets(self.view_of(item), view)]
        if isinstance(view, SqlBox):  # one key, the table's: narrowed by hulls
            found = self._sql(view.table).overlapping(view)
        else:  # no item is under two of one view's probes
            found = (item for key in probe for item in self.found.get(key, ()))
        return [
            item for item in itertools.chain(found, self.wide) if meets(self.view_of(item), view)
        ]

    def _sql(self, table: str) -> _Hulls[T]:
        hulls = self._hulls.get(table)
        if hulls is None:
            items = self.found.get(("sql", table), [])
            hulls = self._hulls[table] = _Hulls(items, [self.view_of(i) for i in items])
        return hulls


class _Hulls(Generic[T]):
    """SQL primitives of one table with their hulls on one column (the one their boxes
    constrain most often), so that those whose hull overlaps a view's are found at once: two
    primitives whose hulls on a column are apart share no row."""

    def __init__(self, items: Sequence[T], views: Sequence[View]) -> None:
        self.items = items
        boxes = [view for view in views if isinstance(view, SqlBox)]
        counts = Counter(
            column
            for view in boxes
            for box in view.boxes
            for column, values in box.ranges
            if values.domain == "num" and not values.null
        )
        self.column = counts.most_common(1)[0][0] if counts else None
        hulls = [_hull(view, self.column) for view in views]
        self.low = np.array([low for low, _ in hulls], dtype=np.float64)
        self.high = np.array([high for _, high in hulls], dtype=np.float64)

    def overlapping(self, view: SqlBox) -> list[T]:
        low, high = _hull(view, self.column)
        close = (self.low <= high) & (self.high >= low)
        return [self.items[at] for at in np.flatnonzero(close).tolist()]


def _hull(view: View, column: str | None) -> tuple[float, float]:
    """The closed range of ``column`` that ``view``'s rows may take (unbounded where a box does
    not constrain it, lets NULL in, or is not numeric; empty for no boxes)."""
    unbounded = (-math.inf, math.inf)
    if column is None or not isinstance(view, SqlBox):
        return unbounded
    low, high = math.inf, -math.inf
    for box in view.boxes:
        values = dict(box.ranges).get(column)
        if values is None or values.null or values.domain != "num":
            return unbounded
        for interval in values.intervals:  # a float rounds monotonically: never apart wrongly
            low = min(low, -math.inf if interval.low is None else float(interval.low))
            high = max(high, math.inf if interval.high is None else float(interval.high))
    return low, high


def near(views: Sequence[View], others: Sequence[View]) -> list[View]:
    """The ``views`` that may share a topic, object or row with one of ``others``."""
    index = _Index(others, lambda view: view)
    return [view for view in views if index.meeting(view)]


class _Meeting:
    """The ready primitives meeting each need, and the needs each primitive meets."""

    def __init__(self, ready: list[Primitive], needs: Sequence[View]) -> None:
        self.needs = needs
        self.held = {p.prim for p in ready}
        index = _Index(ready, lambda prim: prim.view)
        self.users = [index.meeting(need) for need in needs]
        self.met: dict[int, list[int]] = {}
        for at, users in enumerate(self.users):
            for prim in users:
                self.met.setdefault(prim.prim, []).append(at)

    def covered(self, at: int, without: int | None = None) -> bool:
        """Whether need ``at`` is covered by the held primitives meeting it (but ``without``)."""
        rest = [p.view for p in self.users[at] if p.prim in self.held and p.prim != without]
        return covers(rest, self.needs[at])

    def met_by(self, prim: int) -> list[int]:
        """The needs primitive ``prim`` meets (none if it is not ready)."""
        return self.met.get(prim, [])

    def others(self, prim: int) -> bool:
        """Whether a ready primitive other than ``prim`` is held."""
        return len(self.held) > (prim in self.held)

    def drop(self, prim: int) -> None:
        """``prim`` is released."""
        self.held.discard(prim)
