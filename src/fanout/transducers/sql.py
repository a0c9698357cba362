"""The built-in ``window`` transducer: a SQL query over a view's last ticks, run in DuckDB at the
relay (docs/transducers.md). Rules:

1. Its parameters: ``query``, one DuckDB ``SELECT`` (CTEs, subqueries, GROUP BY, window
   functions allowed) reading only the table ``history``: the view's columns at each of its
   last ``ticks`` ticks (default 1) with ``_seq``, ``_tick`` and ``_age`` (0: newest); ``key``,
   the output column keying its rows (default: its first column).
2. The query is checked when subscribing: it parses, reads no table but ``history`` (and its own
   CTEs), and binds against the view's columns; anything else is ``invalid_transducer``.
3. It runs on a DuckDB connection of its own without file or network access (configuration
   locked), under the relay's statement watchdog and a memory limit (``transducers.budget``):
   past them it is stopped.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow as pa
import sqlglot
import sqlglot.errors
from sqlglot import exp

from fanout.relay.data.watchdog import Watchdog
from fanout.transducers.budget import (
    MEMORY,
    SECONDS,
    Budget,
    InvalidTransducer,
    OverBudget,
    TransducerStopped,
)
from fanout.transducers.window import AGE, SEQ, TICK

#: The table a ``window`` query reads.
HISTORY = "history"


class WindowEngine:
    """The DuckDB connection ``window`` transducers run on, opened on first use, and the
    watchdog interrupting a statement past ``seconds``."""

    def __init__(self, seconds: float = SECONDS, memory: str = MEMORY) -> None:
        self.watchdog = Watchdog(seconds)
        self._memory = memory

    @functools.cached_property
    def _db(self) -> duckdb.DuckDBPyConnection:
        db = duckdb.connect(":memory:")
        db.execute("SET TimeZone = 'UTC'")
        db.execute("SET threads = 1")
        db.execute(f"SET memory_limit = '{self._memory}'")
        db.execute("SET enable_external_access = false")
        db.execute("SET lock_configuration = true")
        return db

    def columns(self, query: str, history: pa.Table) -> list[str]:
        """The result columns of ``query`` over ``history`` (bound, not run).

        Raises:
            InvalidTransducer: it does not bind.
        """
        self._db.register(HISTORY, history)
        try:
            return list(self._db.sql(query).columns)
        except duckdb.Error as exc:
            raise InvalidTransducer(f"the window query does not bind: {_first_line(exc)}") from exc
        finally:
            self._db.unregister(HISTORY)

    def run(self, query: str, history: pa.Table) -> pa.Table:
        """Run ``query`` over ``history`` under the time and memory limits.

        Raises:
            OverBudget: it ran past the time limit or out of memory.
            TransducerStopped: it failed on these rows.
        """
        self._db.register(HISTORY, history)
        interrupted = self.watchdog.interrupted
        try:
            with self.watchdog.watching(self._db):
                return self._db.sql(query).to_arrow_table()
        except (duckdb.Error, RuntimeError) as exc:
            # Interrupted while binding, DuckDB raises a RuntimeError: the watchdog's count
            # tells an interrupt from a failure whatever the exception.
            if self.watchdog.interrupted != interrupted:
                raise OverBudget(
                    f"its query ran longer than {self.watchdog.limit:g} s and was stopped"
                ) from exc
            if isinstance(exc, duckdb.OutOfMemoryException):
                raise OverBudget(f"its query ran out of memory ({self._memory})") from exc
            raise TransducerStopped(f"its query failed: {_first_line(exc)}") from exc
        finally:
            self._db.unregister(HISTORY)


class WindowSql:
    """A ``window`` transducer: its query, window length and output key (see the module)."""

    def __init__(self, params: Mapping[str, Any], engine: WindowEngine, budget: Budget) -> None:
        unknown = set(params) - {"query", "ticks", "key"}
        if unknown:
            raise InvalidTransducer(
                f"the window transducer takes query, ticks and key, not {sorted(unknown)}"
            )
        query, ticks, key = params.get("query"), params.get("ticks", 1), params.get("key")
        if not isinstance(query, str):
            raise InvalidTransducer("the window transducer needs a query (a SELECT over history)")
        if (
            isinstance(ticks, bool)
            or not isinstance(ticks, int)
            or not 1 <= ticks <= budget.max_ticks
        ):
            raise InvalidTransducer(
                f"ticks must be an integer in [1, {budget.max_ticks}], not {ticks!r}"
            )
        if key is not None and not isinstance(key, str):
            raise InvalidTransducer(f"key must name an output column, not {key!r}")
        self.query = checked(query)
        self.ticks = ticks
        self._key = key
        self._engine = engine

    def output(self, schema: pa.Schema) -> tuple[str, list[str]]:
        empty = schema.empty_table()
        for name, type_ in ((SEQ, pa.int64()), (TICK, pa.int64()), (AGE, pa.int32())):
            empty = empty.append_column(name, pa.array([], type_))
        names = self._engine.columns(self.query, empty)
        for name in names:
            if names.count(name) > 1:
                raise InvalidTransducer(f"two output columns are named {name!r}; rename one")
        key = self._key if self._key is not None else names[0]
        if key not in names:
            raise InvalidTransducer(f"key {key!r} is not an output column (they are {names})")
        return key, [key, *(name for name in names if name != key)]

    def evaluate(self, history: pa.Table) -> pa.Table:
        result = self._engine.run(self.query, history)
        if self._key is not None and result.column_names[0] != self._key:
            order = [self._key, *(n for n in result.column_names if n != self._key)]
            result = result.select(order)
        return result


def checked(query: str) -> str:
    """``query`` if it is one SELECT reading only ``history`` and its own CTEs (rule 2).

    Raises:
        InvalidTransducer: it is not.
    """
    try:
        statements = sqlglot.parse(query, read="duckdb")
    except sqlglot.errors.SqlglotError as exc:
        raise InvalidTransducer(f"the window query does not parse: {_first_line(exc)}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise InvalidTransducer("the window query must be one SELECT")
    tree = statements[0]
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        plain = isinstance(table.this, exp.Identifier) and not (table.db or table.catalog)
        name = table.name.lower()
        if not plain or (name != HISTORY and name not in ctes):
            raise InvalidTransducer(
                f"the window query reads {table.sql(dialect='duckdb')!r}; it may read only"
                f" {HISTORY!r} (the view's last ticks) and its own CTEs"
            )
    return query


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
