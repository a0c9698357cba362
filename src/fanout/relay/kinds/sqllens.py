"""A SQL view's lens for the live path (``relay.kinds.lens``): a query the relay can judge row
by row is run by the relay's own engine on the written rows alone, as mode ``every`` runs it on
a micro-batch's changed rows (``QueryEngine.evaluate_rows``).

Row by row means: one table, no DISTINCT, LIMIT or OFFSET (``QueryEngine.row_by_row``; views
never aggregate, group, window or nest), and no clock (a row's answer would change with time
alone). Such a query's result row of a key depends on that key's row only, and is keyed by it.
Any other SQL view has no lens: its subscriptions take the confirmed path alone (docs/sql.md).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

from fanout.errors import InvalidView
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.provisional import Row
from fanout.relay.core.transforms import Shape, apply
from fanout.relay.data.buffers import DoubleBuffer, Positions, Table
from fanout.relay.data.engine import Query, QueryEngine
from fanout.relay.data.nulls import is_companion, valid_of
from fanout.relay.kinds.lens import RowLens
from fanout.views.members import members
from fanout.views.sql import Sql


def judged_row_by_row(engine: QueryEngine, query: Query) -> bool:
    """Whether each of the query's result rows is decided by the one row of its key."""
    if query.view.reads_clock or len(query.datasets) != 1:
        return False
    try:
        engine.row_by_row(query)
    except InvalidView:
        return False
    return True


@dataclass
class Shown:
    """What one write's rows are in each (view, shape) watching them: one query run per view
    and shape, whoever watches it (the core shows a write to every watcher with one mapping)."""

    rows: Mapping[Hashable, Row] | None = None
    views: dict[tuple[Sql, Shape], dict[Hashable, Row]] = field(default_factory=dict)


class SqlLens(RowLens):
    """A row-by-row query's view of rows (``provisional.Lens``): the query run on them alone.

    Its rows have every result column and, for each that may hold NULL (any but the key and
    object columns), its companion: a push leaves a companion out when nothing is NULL, and the
    live path fills it in (``livepath``), so both sides compare alike.
    """

    def __init__(
        self,
        subscription: Subscription,
        buffer: DoubleBuffer,
        engine: QueryEngine,
        query: Query,
        shown: Shown,
    ) -> None:
        super().__init__(subscription, buffer, (), members)  # selects unused: ``_shown`` runs
        self.engine = engine
        self.query = query
        self._last = shown  # shared by the dataset's SQL lenses
        self._dtypes: dict[str, np.dtype[np.generic]] | None = None

    def show(self, rows: Mapping[Hashable, Row]) -> dict[Hashable, Row]:
        """As ``RowLens.show``, run once per write for the watchers of one view and shape."""
        last = self._last
        if last.rows is not rows:  # held, so no other mapping can have its identity
            last.rows, last.views = rows, {}
        at = (self.query.view, self.subscription.shape)
        found = last.views.get(at)
        if found is None:
            found = last.views[at] = super().show(rows)
        return dict(found)

    def dtypes(self) -> dict[str, np.dtype[np.generic]]:
        """The result's columns as sent (the query over no rows), each nullable one's
        companion after it."""
        if self._dtypes is None:
            table = self.buffer.active
            empty = self.engine.evaluate_rows(self.query, table.take(np.arange(0)))
            shown = apply(empty.rows, self.subscription.shape, None)
            out: dict[str, np.dtype[np.generic]] = {}
            for name, values in shown.items():
                if is_companion(name):
                    continue
                out[name] = values.dtype
                if name != self.query.key and values.dtype.kind != "O":
                    out[valid_of(name)] = np.dtype(bool)
            self._dtypes = out
        return self._dtypes

    def _shown(self, table: Table, positions: Positions) -> dict[Hashable, Row]:
        """The query's rows over the rows at ``positions`` alone, by key; none if it fails on
        them (a bad cast, say): the push of the state holding them ends the subscription with
        the error, as without the live path."""
        if not len(positions):
            return {}
        try:
            result = self.engine.evaluate_rows(self.query, table.take(positions))
        except InvalidView:  # told by the confirmed path: its push fails alike, with the error
            return {}
        if not len(result.keys):
            return {}
        shown = apply(result.rows, self.subscription.shape, None)
        length = len(result.keys)
        values = {
            name: (
                shown[name].tolist()
                if name in shown
                else [True] * length  # a companion the result left out: nothing is NULL
            )
            for name in self.dtypes()
        }
        names = list(values)
        rows = zip(*(values[name] for name in names), strict=True)
        return {
            key: dict(zip(names, row, strict=True))
            for key, row in zip(result.keys.tolist(), rows, strict=True)
        }
