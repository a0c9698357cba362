"""Serving SQL, topic and object-path views: checking, coverage, upstream and pushes.

The relay core (``relay.core``) serves region views itself and hands views of the other three
index kinds to :class:`TableViews`, which answers the same questions in their languages:

* **check** (000: [0161], step 818): the view is of the dataset's language, its SQL binds to the
  relay's tables, its transform fits (SQL rows are projected in the SELECT list and carry no
  coordinates, so only a precision applies); what the subscriber will receive: key and columns;
* **acquire** (steps 830-840): for each dataset the view reads (several for a SQL join), the
  residual of what the relay holds there (``fanout.views.residual``), widened so that it serves
  other views too: a SQL primitive with every column (the publisher sends whole rows anyway), a
  topic filter without its ``$share/group/`` (the relay keeps every retained message), an object
  path without options (the publisher holds whole objects upstream);
* **covered**: ready primitives cover every part of the view (``fanout.views.covers``);
* **cut** (steps 890-894): the push, a delta against what the subscriber holds — from the
  active buffer for topics and paths (``relay.keyed``), from the query's result in DuckDB for SQL
  (``relay.tables``, ``relay.rows``), bodies shared by every subscription with the same view,
  transform and held state (``relay.pushes.Encodings``);
* **unneeded**: primitives whose every need stays covered by the other ready ones.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from fanout.errors import InvalidView
from fanout.relay import release
from fanout.relay.downstream import Subscription
from fanout.relay.ingest import DatasetState
from fanout.relay.keyed import TopicMatches, path_columns, path_positions
from fanout.relay.pushes import Body, Encodings, Held, cut_positions
from fanout.relay.rows import HeldRows, cut_rows
from fanout.relay.state import Positions, Stamp
from fanout.relay.tables import QUERY_TIMEOUT, TableStore
from fanout.relay.transforms import InvalidTransform, Shape, resolve
from fanout.relay.upstream import Primitive, Upstream
from fanout.views import View, covers, residual
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql, SqlBox
from fanout.views.topic import TopicFilter
from fanout.wire.messages import DatasetInfo, Transform

LANGUAGES: dict[str, tuple[type, str]] = {
    "sql": (Sql, "SQL queries (SELECT ...)"),
    "topic": (TopicFilter, "MQTT topic filters"),
    "path": (ObjectPath, "object paths"),
}
"""Index kind -> the view class it takes and how to name it in errors."""


@dataclass(frozen=True)
class Accepted:
    """A subscription accepted: the shape of its rows, their key and columns (``Subscribed``)."""

    shape: Shape
    key: str
    columns: list[str]


class TableViews:
    """The relay's serving of SQL, topic and object-path views (module docstring)."""

    def __init__(self, query_timeout: float = QUERY_TIMEOUT) -> None:
        self.store = TableStore(query_timeout)
        self._topics: dict[str, TopicMatches] = {}
        #: dataset -> (what ``unneeded`` was last asked, its answer's primitive ids)
        self._unneeded: dict[str, tuple[Hashable, frozenset[int]]] = {}

    def define(self, info: DatasetInfo) -> None:
        """Learn a catalog entry (a SQL dataset gets its DuckDB table, emptied)."""
        self._topics.pop(info.name, None)
        if info.index == "sql":
            self.store.define(info)

    # -- subscribing --------------------------------------------------------------------

    def check(
        self,
        view: View,
        transform: Transform | None,
        state: DatasetState,
        datasets: Mapping[str, DatasetState],
        capabilities: Sequence[str],
    ) -> Accepted:
        """Check a view of ``state``'s dataset and resolve its transform.

        Raises:
            InvalidView: the view is of another language, or its SQL does not fit the tables.
            InvalidTransform: the transform asks for coordinates, or for a projection of SQL.
        """
        info = state.info
        wanted, language = LANGUAGES[info.index]
        if not isinstance(view, wanted):
            raise InvalidView(f"dataset {info.name!r} takes {language}, not {type(view).__name__}")
        effective = (transform or Transform()).negotiate(capabilities)
        if effective.relative_to is not None:
            raise InvalidTransform(f"dataset {info.name!r} has no coordinates to make relative")
        if isinstance(view, Sql):
            return self._check_sql(view, effective, info, datasets)
        shape = resolve(transform, info, capabilities)
        if isinstance(view, ObjectPath) and view.attributes is not None:
            columns = path_columns(view, shape.columns, info.key)
            shape = msgspec.structs.replace(shape, columns=columns, identity=False)
        return Accepted(shape, info.key, list(shape.columns))

    def _check_sql(
        self,
        view: Sql,
        transform: Transform,
        info: DatasetInfo,
        datasets: Mapping[str, DatasetState],
    ) -> Accepted:
        if transform.columns is not None:
            raise InvalidTransform("a SQL view is projected by its SELECT list, not a transform")
        infos = {name: state.info for name, state in datasets.items()}
        query = self.store.prepare(view, infos)
        if info.name not in query.datasets:
            raise InvalidView(f"the query does not read dataset {info.name!r}: {view.text}")
        identity = transform.precision == "float64" and transform.quantum == 0.0
        shape = Shape(query.columns, transform.precision, transform.quantum, identity=identity)
        return Accepted(shape, query.key, list(query.columns))

    def check_every(self, view: Sql, datasets: Mapping[str, DatasetState]) -> None:
        """Check that a SQL view can be served in mode ``every`` (``TableStore.row_by_row``).

        Raises:
            InvalidView: its query does not decide each row on its own.
        """
        infos = {name: state.info for name, state in datasets.items()}
        self.store.row_by_row(self.store.prepare(view, infos))

    def reads(self, dataset: str, view: View) -> tuple[str, ...]:
        """The datasets a view of ``dataset`` reads (a SQL join reads several)."""
        return tuple(sorted({name for name, _ in self._needs(dataset, view)}))

    def _needs(self, dataset: str, view: View) -> list[tuple[str, View]]:
        """(dataset, primitive) pairs the view needs held: a SQL view's, one per table."""
        if not isinstance(view, Sql):
            return [(dataset, view)]
        return [(self.store.dataset(prim.table) or prim.table, prim) for prim in view.primitives()]

    def to_acquire(self, upstream: Upstream, dataset: str, view: View) -> list[tuple[str, View]]:
        """(dataset, primitive) pairs to acquire so that held primitives cover ``view``."""
        acquire: list[tuple[str, View]] = []
        for name, need in self._needs(dataset, view):
            held = [*upstream.views(name), *(v for n, v in acquire if n == name)]
            for piece in residual(held, need):
                widened = _widened(piece)
                if widened not in held:
                    acquire.append((name, widened))
                    held.append(widened)
        return acquire

    def covered(
        self, upstream: Upstream, dataset: str, view: View, ready_only: bool = True
    ) -> bool:
        """Whether primitives held (ready ones only, unless asked) cover every part of ``view``."""
        for name, need in self._needs(dataset, view):
            held = upstream.views(name, ready_only=ready_only)
            if not held or not covers(held, need):
                return False
        return True

    # -- pushing ------------------------------------------------------------------------

    def current(self, subscription: Subscription, datasets: Mapping[str, DatasetState]) -> bool:
        """Whether what the subscriber holds was cut from the state now active (nothing new)."""
        held, dataset, view = subscription.held, subscription.dataset, subscription.view
        if held is None or held.view != view:
            return False
        if isinstance(held, HeldRows):
            return held.generations == self._generations(dataset, view, datasets)
        return held.generation == datasets[dataset].buffer.generation

    def _generations(
        self, dataset: str, view: View, datasets: Mapping[str, DatasetState]
    ) -> tuple[int, ...]:
        return tuple(datasets[name].buffer.generation for name in self.reads(dataset, view))

    def cut(
        self,
        subscription: Subscription,
        datasets: Mapping[str, DatasetState],
        encodings: Encodings,
        wanted: Callable[[], Iterable[View]] = tuple,
    ) -> tuple[Body, Held]:
        """The subscription's push from the active state, and what its subscriber holds after.

        ``wanted`` lists the dataset's subscribed views, asked for only when topic filters are
        matched anew (all of them in one pass).

        Raises:
            InvalidView: a SQL view failed to run on the relay's current rows.
        """
        state = datasets[subscription.dataset]
        buffer, view, held = state.buffer, subscription.view, subscription.held
        stamp = buffer.stamp
        assert stamp is not None
        if isinstance(view, Sql):
            return self._cut_sql(subscription, view, datasets, encodings, stamp)
        key = (view, subscription.shape, None if held is None else held.signature())
        body = encodings.get(subscription.dataset, buffer.generation, key)
        if body is None:
            positions = self.positions(view, state, wanted)
            body = cut_positions(positions, subscription.shape, held, buffer)
            encodings.put(subscription.dataset, key, body)
        return body, Held(view, buffer.generation, stamp.epoch, stamp.seq, body.keys)

    def positions(
        self, view: View, state: DatasetState, wanted: Callable[[], Iterable[View]] = tuple
    ) -> Positions:
        """Sorted positions of the active rows a topic or path ``view`` selects (``wanted``:
        the dataset's subscribed views, matched in the same pass as a topic filter)."""
        table, info = state.buffer.active, state.info
        if isinstance(view, TopicFilter):
            matches = self._topics.setdefault(info.name, TopicMatches())
            return matches.positions(view, table, info, state.buffer.generation, wanted)
        assert isinstance(view, ObjectPath)
        return path_positions(view, table, info)

    def _cut_sql(
        self,
        subscription: Subscription,
        view: Sql,
        datasets: Mapping[str, DatasetState],
        encodings: Encodings,
        stamp: Stamp,
    ) -> tuple[Body, Held]:
        query = self.store.prepare(view, {name: s.info for name, s in datasets.items()})
        for name in query.datasets:
            self.store.sync(name, datasets[name].buffer)
        generations = tuple(datasets[name].buffer.generation for name in query.datasets)
        result = self.store.evaluate(query, generations)
        held = subscription.held if isinstance(subscription.held, HeldRows) else None
        generation = datasets[subscription.dataset].buffer.generation
        key = (view, subscription.shape, generations, None if held is None else held.signature())
        body = encodings.get(subscription.dataset, generation, key)
        if body is None:
            body = cut_rows(result, query.key, subscription.shape, held)
            encodings.put(subscription.dataset, key, body)
        after = HeldRows(
            view,
            generation,
            stamp.epoch,
            stamp.seq,
            result.keys,
            digests=result.digests,
            generations=generations,
        )
        return body, after

    # -- housekeeping -------------------------------------------------------------------

    def needs(self, dataset: str, subscriptions: Iterable[tuple[str, View]]) -> list[View]:
        """The primitives of ``dataset`` the (dataset, view) of every subscription needs held."""
        return [
            need
            for name, view in subscriptions
            for held_in, need in self._needs(name, view)
            if held_in == dataset
        ]

    def unneeded(
        self, dataset: str, prims: Sequence[Primitive], needs: Sequence[View]
    ) -> list[Primitive]:
        """Primitives of ``dataset`` that can go, oldest first: every need stays covered by the
        other ready ones (``relay.release``). Asked at every housekeeping; answered anew only
        when the primitives, their readiness or the needs have changed since."""
        asked = (tuple(sorted((p.prim, p.ready) for p in prims)), tuple(needs))
        known = self._unneeded.get(dataset)
        if known is None or known[0] != asked:
            known = (asked, frozenset(p.prim for p in release.unneeded(prims, needs)))
            self._unneeded[dataset] = known
        return [p for p in sorted(prims, key=lambda p: p.prim) if p.prim in known[1]]

    def keep(self, views: Iterable[View]) -> None:
        """Forget the cached results of SQL views no longer subscribed (``views`` are)."""
        self.store.forget([view for view in views if isinstance(view, Sql)])

    def stats(self) -> dict[str, float]:
        """Counters of the SQL store and topic matching."""
        counters = self.store.counters
        return {
            "sql_syncs": counters.syncs,
            "sql_evaluations": counters.evaluations,
            "sql_results_shared": counters.shared,
            "sql_query_seconds": round(counters.seconds, 6),
            "topic_passes": sum(t.passes for t in self._topics.values()),
            "topic_rows_not_topics": sum(t.not_topics for t in self._topics.values()),
        }


def _widened(piece: View) -> View:
    """A residual piece as acquired upstream (see the module docstring)."""
    if isinstance(piece, SqlBox):
        return SqlBox(piece.table, None, piece.boxes)
    if isinstance(piece, TopicFilter):
        return TopicFilter(piece.topic_filter)
    if isinstance(piece, ObjectPath):
        return ObjectPath(piece.object_path)
    return piece
