"""Where the relay evaluates SQL views: the interface its core and SQL kind use, and the two
values that cross it (a prepared query, a result).

The core holds no database: the relay's shell makes the engine (``relay.data.tables.TableStore``,
DuckDB in process with a watchdog thread that interrupts a query running too long) and passes
it in, so the core's logic runs in tests with or without one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from fanout.relay.data.buffers import Array, DoubleBuffer, Keys
from fanout.views.sql import Sql
from fanout.wire.messages import DatasetInfo


@dataclass(frozen=True)
class Query:
    """A SQL view prepared for the relay's DuckDB.

    Attributes:
        view: the view.
        datasets: the datasets it reads, sorted.
        key: the key column of its result rows.
        columns: the result's columns, key first.
        text: the SQL run: key, digest, then the view's own columns.
    """

    view: Sql
    datasets: tuple[str, ...]
    key: str
    columns: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Result:
    """A query's rows at one state of its tables, sorted by key.

    Attributes:
        keys: the sorted keys.
        digests: each row's hash, to tell updated rows.
        rows: column -> values aligned with ``keys`` (every column of the query, key included).
    """

    keys: Keys
    digests: npt.NDArray[np.uint64]
    rows: dict[str, Array]


class EngineCounters(Protocol):
    """What an engine has done (visible in the relay's stats)."""

    syncs: int
    evaluations: int
    shared: int
    seconds: float


class QueryEngine(Protocol):
    """Tables mirrored from the relay's active buffers, and subscribers' queries run on them.

    Attributes:
        counters: what it has done; ``seconds`` is the time subscribers' queries ran, what a
            connection's SQL time budget counts (``relay.core.throttle.Budgets``).
    """

    @property
    def counters(self) -> EngineCounters: ...

    def define(self, info: DatasetInfo) -> None:
        """Create (or re-create, empty) the table of a SQL dataset (a catalog entry)."""
        ...

    def dataset(self, table: str) -> str | None:
        """The dataset a view's table name stands for, if the relay has such a SQL dataset."""
        ...

    def sync(self, name: str, buffer: DoubleBuffer) -> None:
        """Bring dataset ``name``'s table to ``buffer``'s active state, in one transaction."""
        ...

    def prepare(self, view: Sql, infos: Mapping[str, DatasetInfo]) -> Query:
        """Check ``view`` against the tables and prepare the query that runs it.

        Raises:
            InvalidView: it does not bind to the tables, or its result has no usable key.
        """
        ...

    def evaluate(self, query: Query, generations: tuple[int, ...]) -> Result:
        """The query's result on the tables at these generations (cached per generations).

        Raises:
            InvalidView: it failed (or ran too long) on the current rows.
        """
        ...

    def row_by_row(self, query: Query) -> None:
        """Check that the query decides each row on its own (mode ``every``).

        Raises:
            InvalidView: it does not.
        """
        ...

    def evaluate_rows(self, query: Query, rows: Mapping[str, Array]) -> Result:
        """The query run on these rows alone (one micro-batch's change).

        Raises:
            InvalidView: it failed on them.
        """
        ...

    def forget(self, views: Sequence[Sql]) -> None:
        """Drop cached queries and results of views not in ``views`` (those still subscribed)."""
        ...


def engine_stats(engine: QueryEngine | None) -> dict[str, float]:
    """The engine's counters for the relay's stats (zero without an engine)."""
    if engine is None:
        return {
            "sql_syncs": 0,
            "sql_evaluations": 0,
            "sql_results_shared": 0,
            "sql_query_seconds": 0.0,
        }
    counters = engine.counters
    return {
        "sql_syncs": counters.syncs,
        "sql_evaluations": counters.evaluations,
        "sql_results_shared": counters.shared,
        "sql_query_seconds": round(counters.seconds, 6),
    }
