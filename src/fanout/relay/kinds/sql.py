"""SQL datasets (index ``sql``): rows of a table, views that are SELECT queries.

A view is a query over the relay's tables, run by the query engine the shell passed in
(``relay.data.engine``; DuckDB in ``relay.data.tables``), once per state of the tables it reads
whoever subscribed to it. A join reads several datasets, so its needs are one primitive per table:
the boxes its WHERE clause bounds each table's rows to (``views.sql.Sql.primitives``), acquired with
every column (the publisher sends whole rows anyway). Its push is a delta of the query's result
against what the subscriber holds (``relay.data.rows``: keys and row digests). Its query time counts
against its connection's SQL share (``metered``). A query judged row by row is shown writes at
once (``kinds.sqllens``); any other takes the confirmed path alone.
"""

from __future__ import annotations

import decimal
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fanout.errors import InvalidView, ProtocolError
from fanout.relay.core.changesets import ChangeSet, Step, Steps, rows_step
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.transforms import InvalidTransform, Shape
from fanout.relay.data.buffers import Array, Keys, Table
from fanout.relay.data.engine import Query, QueryEngine, Result
from fanout.relay.data.keyedstate import KeyedState
from fanout.relay.data.nulls import is_companion
from fanout.relay.data.pushes import Body
from fanout.relay.data.rows import HeldRows, cut_rows
from fanout.relay.kinds.base import Accepted, Cut, Parts, RelaySide
from fanout.relay.kinds.keyed import KeyedKind
from fanout.relay.kinds.lens import RowLens
from fanout.relay.kinds.selected import Views
from fanout.relay.kinds.sqllens import Shown, SqlLens, judged_row_by_row
from fanout.views import View
from fanout.views.sql import Sql, SqlBox
from fanout.wire.columns import BYTES, STRING, decimal_type
from fanout.wire.messages import DatasetInfo, Subscribe

#: The views of a SQL dataset.
SQL_VIEWS = Views(Sql, "SQL queries (SELECT ...)")
#: Seconds one evaluation of a query reading the clock is shared by its subscribers: its rows
#: are at most this late with the clock.
CLOCK_STEP = 0.1


def serve_sql(info: DatasetInfo, parts: Parts) -> KeyedKind:
    """A ``sql`` dataset at the relay, its table defined in the engine, empty.

    Raises:
        ProtocolError: the relay has no query engine, or cannot hold the dataset.
    """
    if parts.engine is None:
        raise ProtocolError(
            f"catalog: dataset {info.name!r} is a SQL dataset and this relay has no query engine"
        )
    state = KeyedState.of(info)
    parts.engine.define(info)
    queries = Queries(parts.engine, parts)
    return KeyedKind(state, parts, SqlLanguage(state, queries), QueryRows(state, parts, queries))


class Queries:
    """SQL views prepared in the engine against the relay's tables, for both parts."""

    def __init__(self, engine: QueryEngine, parts: Parts) -> None:
        self.engine = engine
        self._parts = parts

    def prepare(self, view: View) -> Query:
        """The view, bound to the relay's tables."""
        assert isinstance(view, Sql)
        infos = {name: state.info for name, state in self._parts.datasets.items()}
        return self.engine.prepare(view, infos)

    def needs(self, dataset: str, view: View) -> list[tuple[str, View]]:
        """One primitive per table the query reads (a primitive held for a relay below: its
        own)."""
        if isinstance(view, SqlBox):
            return [(dataset, view)]
        assert isinstance(view, Sql)
        engine = self.engine
        return [(engine.dataset(prim.table) or prim.table, prim) for prim in view.primitives()]


class SqlLanguage:
    """SELECT queries, whose needs are their primitives per table (``keyed.Language``)."""

    def __init__(self, state: KeyedState, queries: Queries) -> None:
        self.state = state
        self.name = state.info.name
        self.queries = queries

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """A query that binds to the relay's tables and reads this dataset; it is projected by
        its SELECT list, so only a precision applies to its rows.

        Raises:
            InvalidView: it is not a query, does not bind, or does not read this dataset.
            InvalidTransform: the transform projects columns or moves coordinates.
        """
        transform = SQL_VIEWS.check(self.name, request.view, request.transform, capabilities)
        if transform.columns is not None:
            raise InvalidTransform("a SQL view is projected by its SELECT list, not a transform")
        view = request.view
        assert isinstance(view, Sql)
        query = self.queries.prepare(view)
        if self.name not in query.datasets:
            raise InvalidView(f"the query does not read dataset {self.name!r}: {view.text}")
        identity = transform.precision == "float64" and transform.quantum == 0.0
        shape = Shape(query.columns, transform.precision, transform.quantum, identity=identity)
        return Accepted(shape, query.key, list(query.columns))

    def check_every(self, view: View, shape: Shape) -> None:
        """Mode ``every`` needs a query that decides each row on its own, and by its rows
        alone.

        Raises:
            InvalidView: it does not (``TableStore.row_by_row``), or it reads the clock (its
                rows would change between seqs, where mode ``every`` has nothing to send).
        """
        assert isinstance(view, Sql)
        if view.reads_clock:
            raise InvalidView(
                "mode 'every' sends each seq's changes, and this query's rows also change as"
                " time passes (it reads the clock): use mode 'latest'"
            )
        self.queries.engine.row_by_row(self.queries.prepare(view))

    def needs(self, view: View) -> list[tuple[str, View]]:
        """One primitive per table the query reads."""
        return self.queries.needs(self.name, view)

    def widened(self, piece: View) -> View:
        """The piece with every column."""
        assert isinstance(piece, SqlBox)
        return SqlBox(piece.table, None, piece.boxes)

    def primitive(self, view: View) -> View:
        """A primitive of this dataset's table (of a query: its primitive for this table, as
        the publisher reads one), with every column.

        Raises:
            InvalidView: not a SQL view, of another table, or naming a column the table lacks.
        """
        table = self.name.lower()
        if isinstance(view, Sql):
            mine = [prim for prim in view.primitives() if prim.table == table]
            if not mine:
                raise InvalidView(f"the query does not read dataset {self.name!r}: {view.text}")
            view = mine[0]
        if not isinstance(view, SqlBox):
            raise InvalidView(f"dataset {self.name!r} takes SQL views, not {type(view).__name__}")
        if view.table != table:
            raise InvalidView(f"the primitive is of table {view.table!r}, not {table!r}")
        used = set(view.columns or ()) | {column for box in view.boxes for column, _ in box.ranges}
        unknown = sorted(used - {name.lower() for name in self.state.info.columns})
        if unknown:
            raise InvalidView(f"dataset {self.name!r} has no column(s) {', '.join(unknown)}")
        try:  # bounds of another type than their column's: refused now, not at every batch
            view.match(_probe(self.state.table, self.state.info.columns))
        except (TypeError, ValueError) as exc:
            raise InvalidView(f"the primitive does not fit table {table!r}: {exc}") from exc
        return self.widened(view)


class QueryRows:
    """Pushes that are a query's result, as a delta (``keyed.Rows``)."""

    metered = True

    def __init__(self, state: KeyedState, parts: Parts, queries: Queries) -> None:
        self.state = state
        self.name = state.info.name
        self.queries = queries
        self.engine = queries.engine
        self._parts = parts
        self._row_by_row: dict[Sql, bool] = {}  # views subscribed: whether ``lens`` gives one
        self._shown = Shown()

    def cut(self, subscription: Subscription) -> Cut | None:
        """The query's result at the tables' current states, as a delta (None: none of its
        tables changed since the last push).

        Raises:
            InvalidView: the query failed on the relay's rows.
        """
        held, view = subscription.held, subscription.view
        rows_held = held if isinstance(held, HeldRows) else None
        ticking = self.ticking(view) is not None
        if (
            rows_held is not None
            and rows_held.view == view
            and not ticking
            and self._unchanged(rows_held)
        ):
            return None
        query = self.queries.prepare(view)
        datasets = self._parts.datasets
        for name in query.datasets:
            self.engine.sync(name, datasets[name].buffer)
        generations = tuple(datasets[name].buffer.generation for name in query.datasets)
        if ticking:  # its result is shared for a CLOCK_STEP, then evaluated again
            generations += (int(time.time() / CLOCK_STEP),)
        result = self.engine.evaluate(query, generations)
        buffer = self.state.buffer
        stamp = buffer.stamp
        assert stamp is not None
        signature = None if rows_held is None else rows_held.signature()
        key = (view, subscription.shape, generations, signature)
        encodings = self._parts.encodings
        body = encodings.get(self.name, buffer.generation, key)
        if body is None:
            body = cut_rows(result, query.key, subscription.shape, rows_held)
            encodings.put(self.name, key, body)
        after = HeldRows(
            view,
            buffer.generation,
            stamp.epoch,
            stamp.seq,
            result.keys,
            digests=result.digests,
            generations=generations,
        )
        return body, after

    def _unchanged(self, held: HeldRows) -> bool:
        """Whether none of the tables the held rows were read from has changed since."""
        datasets = self._parts.datasets
        reads = sorted({name for name, _ in self.queries.needs(self.name, held.view)})
        now = tuple(datasets[name].buffer.generation for name in reads)
        return held.generations == now

    def lens(self, subscription: Subscription) -> RowLens | None:
        """A query judged row by row runs on written rows alone (``kinds.sqllens``); any other
        takes the confirmed path alone (None)."""
        view = subscription.view
        if not isinstance(view, Sql):
            return None
        row_by_row = self._row_by_row.get(view)
        query = self.queries.prepare(view)
        if row_by_row is None:
            row_by_row = self._row_by_row[view] = judged_row_by_row(self.engine, query)
        if not row_by_row:
            return None
        return SqlLens(subscription, self.state.buffer, self.engine, query, self._shown)

    def query_seconds(self) -> float:
        """Seconds subscribers' queries have run in the engine."""
        return self.engine.counters.seconds

    def ticking(self, view: View) -> float | None:
        """A query reading the clock (``Sql.reads_clock``): ``CLOCK_STEP``."""
        return CLOCK_STEP if isinstance(view, Sql) and view.reads_clock else None

    def full_view(self, subscription: Subscription) -> Body:
        """The query's whole result on the current tables."""
        found = self.cut(subscription)
        assert found is not None  # an every subscription holds no rows of its own
        return found[0]

    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """The query run on the change's rows alone (``relay.core.changesets.rows_step``)."""
        view, shape = subscription.view, subscription.shape
        query = self.queries.prepare(view)

        def compute() -> Step:
            if not change.rows:
                return rows_step(change, _no_rows(query, held), shape, held, key=query.key)
            result = self.engine.evaluate_rows(query, change.rows)
            return rows_step(change, result, shape, held, key=query.key)

        return steps.get(change, view, shape, held, compute)

    def forget(self) -> None:
        """Forget the engine's results of views no longer subscribed."""
        views = [s.view for s in self._parts.downstream]
        self.engine.forget([view for view in views if isinstance(view, Sql)])
        kept = set(views)
        self._row_by_row = {v: judged for v, judged in self._row_by_row.items() if v in kept}

    def stats(self) -> dict[str, float]:
        """No counters of its own (the engine's are the relay's)."""
        return {}


def _probe(table: Table, types: Mapping[str, str]) -> dict[str, Array]:
    """One row of ``table``'s columns, each of its type as the catalog's ``types`` say (objects
    are strings, decimals or bytes): strings and bytes empty, other values zero."""
    return {
        name: _zero(dtype, types.get(name, STRING))
        for name, dtype in table.dtypes.items()
        if not is_companion(name)
    }


def _zero(dtype: np.dtype[Any], wire: str) -> Array:
    """A zero (empty) value of a column held as ``dtype``, of the catalog's type ``wire``."""
    if dtype.kind != "O":
        return np.zeros(1, dtype=dtype)
    value: object = ""
    if decimal_type(wire) is not None:
        value = decimal.Decimal(0)
    elif wire == BYTES:
        value = b""
    return np.array([value], dtype=object)


def _no_rows(query: Query, held: Keys) -> Result:
    """The result of a query over no rows."""
    empty: dict[str, Array] = {name: np.empty(0) for name in query.columns}
    return Result(held[:0], np.empty(0, dtype=np.uint64), empty)


SIDE = RelaySide(serve_sql)
"""Index ``sql`` at the relay."""
