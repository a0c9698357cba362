"""The relay's SQL tables in DuckDB, and its subscribers' queries run there (CA 3197003 [0094],
[0163], Fig. 8c, step 890). Rules:

1. One in-process DuckDB connection per relay, one table per ``sql`` dataset, named and typed as
   the dataset.
2. A table **mirrors the active buffer** of its dataset: before a query reads a table whose
   buffer generation moved on, it is brought to that generation in **one transaction**. Queries
   run on the event loop between pushes, so each table is at one publisher tick.
3. A query runs as written (``views.sql.to_duckdb``), wrapped to return each row's **key** (the
   dataset's key over one table; ``_key``, JSON of the joined keys or of a DISTINCT row,
   otherwise) and **digest** (DuckDB's ``hash`` of the row: updated or unchanged).
4. A query is **evaluated once per state** of its tables, whoever subscribed: results are cached
   by (view, generations of its tables).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from fanout.errors import InvalidView
from fanout.relay.data.buffers import Array, DoubleBuffer, Keys, Positions, Table
from fanout.relay.data.engine import Query, Result
from fanout.relay.data.nulls import is_companion, split, valid_of, with_companions
from fanout.relay.data.pushes import members
from fanout.relay.data.watchdog import Watchdog
from fanout.views.sql import Sql, to_duckdb
from fanout.wire.arrow import to_arrow, to_numpy
from fanout.wire.columns import BYTES, DATE, TIMESTAMP, decimal_type
from fanout.wire.messages import DatasetInfo

#: Seconds a subscriber's query may run on the relay's event loop before it is stopped.
QUERY_TIMEOUT = 0.5
#: Names the relay adds to a query's result; views may not use them.
RESERVED = "__fanout_"
#: The key column of results that are not keyed by one dataset's key (joins, DISTINCT).
JOIN_KEY = "_key"
#: Column wire dtype -> DuckDB type.
DUCKDB_TYPES = {
    "<i8": "BIGINT",
    "<i4": "INTEGER",
    "<i2": "SMALLINT",
    "|i1": "TINYINT",
    "<u8": "UBIGINT",
    "<u4": "UINTEGER",
    "<u2": "USMALLINT",
    "|u1": "UTINYINT",
    "<f8": "DOUBLE",
    "<f4": "FLOAT",
    "|b1": "BOOLEAN",
    "str": "VARCHAR",
    BYTES: "BLOB",
    TIMESTAMP: "TIMESTAMPTZ",
    DATE: "DATE",
}


def duckdb_type(wire: str) -> str:
    """The DuckDB type of a column of wire dtype ``wire`` (``decimal(p,s)``: DECIMAL(p,s))."""
    decimal = decimal_type(wire)
    if decimal is not None:
        return f"DECIMAL({decimal[0]},{decimal[1]})"
    return DUCKDB_TYPES.get(wire, "VARCHAR")


#: Prepared queries kept at most (one per distinct view subscribed; past it, all are dropped).
MAX_QUERIES = 4096


@dataclass
class _Mirror:
    """What one DuckDB table holds: the buffer generation, stream position and keys."""

    info: DatasetInfo
    generation: int = -1
    epoch: int = -1
    seq: int = -1
    keys: Keys = field(default_factory=lambda: np.empty(0, dtype=np.int64))


@dataclass
class StoreCounters:
    """What the store has done (visible in the relay's stats).

    Attributes:
        syncs: tables brought to a new generation (one transaction each).
        reloads: of which reloaded whole (first time, or a new epoch).
        evaluations: queries run.
        shared: query results reused by another subscription (or another push).
        seconds: time spent running subscribers' queries (not syncing tables), failed ones
            included: what a connection's SQL time budget counts (``relay.core.throttle.Budgets``).
    """

    syncs: int = 0
    reloads: int = 0
    evaluations: int = 0
    shared: int = 0
    seconds: float = 0.0


class TableStore:
    """The relay's DuckDB database: a table per SQL dataset, mirrored from the active buffers.

    A query still running after ``query_timeout`` seconds is interrupted (``relay.data.watchdog``)
    and fails like any other query that fails on the current rows.
    """

    def __init__(self, query_timeout: float = QUERY_TIMEOUT) -> None:
        self._mirrors: dict[str, _Mirror] = {}
        self._names: dict[str, str] = {}  # table name as views spell it -> dataset
        self._queries: dict[Sql, Query] = {}
        # view -> (generations, its result, or why it failed on the tables at them)
        self._results: dict[Sql, tuple[tuple[int, ...], Result | str]] = {}
        self.watchdog = Watchdog(query_timeout)
        self.counters = StoreCounters()

    @functools.cached_property
    def _db(self) -> duckdb.DuckDBPyConnection:
        """The mirrored tables. Opened on first use: each DuckDB database costs about 5 MB and
        a pool of threads, which a relay without SQL datasets does not need."""
        return _connect()

    @functools.cached_property
    def _changes(self) -> duckdb.DuckDBPyConnection:
        """The same tables, empty: a query runs here on one micro-batch's changed rows only
        (``evaluate_rows``, for ``every`` subscriptions). Opened on first use."""
        return _connect()

    def define(self, info: DatasetInfo) -> None:
        """Create (or re-create, empty) the table of a SQL dataset (a catalog entry)."""
        columns = ", ".join(
            f"{_quote(name)} {duckdb_type(wire)}" for name, wire in info.columns.items()
        )
        self._db.execute(f"CREATE OR REPLACE TABLE {_quote(info.name)} ({columns})")
        self._changes.execute(f"CREATE OR REPLACE TABLE {_quote(info.name)} ({columns})")
        self._mirrors[info.name] = _Mirror(info)
        self._names[info.name.lower()] = info.name
        self._queries.clear()
        self._results.clear()

    def dataset(self, table: str) -> str | None:
        """The dataset a view's table name stands for, if the relay has such a SQL dataset."""
        return self._names.get(table.lower())

    # -- mirroring ----------------------------------------------------------------------

    def sync(self, name: str, buffer: DoubleBuffer) -> None:
        """Bring dataset ``name``'s table to ``buffer``'s active state, in one transaction."""
        mirror = self._mirrors[name]
        if mirror.generation == buffer.generation:
            return
        table, stamp = buffer.active, buffer.stamp
        whole = stamp is None or mirror.seq < 0 or stamp.epoch != mirror.epoch
        self._db.execute("BEGIN TRANSACTION")
        try:
            if whole:
                self._db.execute(f"DELETE FROM {_quote(name)}")
                self._insert(name, table, None)
            else:
                self._update(mirror, table)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self.counters.syncs += 1
        self.counters.reloads += whole
        mirror.generation = buffer.generation
        mirror.epoch, mirror.seq = (stamp.epoch, stamp.seq) if stamp else (-1, -1)
        mirror.keys = table.keys.copy()

    def _update(self, mirror: _Mirror, table: Table) -> None:
        # Rows of the mirrored seq itself are written again: the publisher re-stamps a quiet
        # dataset's snapshots with its last seq.
        changed = np.flatnonzero(table.changed >= mirror.seq)
        gone = mirror.keys[~members(mirror.keys, table.keys)]
        stale = np.concatenate([gone, table.keys[changed]])
        name, key = mirror.info.name, mirror.info.key
        if len(stale):
            self._db.register("__fanout_keys", pa.table({"k": pa.array(stale)}))
            try:
                self._db.execute(
                    f"DELETE FROM {_quote(name)} WHERE {_quote(key)} IN"
                    " (SELECT k FROM __fanout_keys)"
                )
            finally:
                self._db.unregister("__fanout_keys")
        self._insert(name, table, changed)

    def _insert(self, name: str, table: Table, rows: Positions | None) -> None:
        if rows is not None and not len(rows):
            return
        columns = table.columns if rows is None else table.take(rows)
        self._db.register("__fanout_rows", arrow_rows(columns))
        try:
            self._db.execute(f"INSERT INTO {_quote(name)} BY NAME SELECT * FROM __fanout_rows")
        finally:
            self._db.unregister("__fanout_rows")

    # -- queries ------------------------------------------------------------------------

    def prepare(self, view: Sql, infos: Mapping[str, DatasetInfo]) -> Query:
        """Check ``view`` against the relay's tables and prepare the query that runs it.

        Args:
            view: the subscriber's SQL view.
            infos: the catalog, by dataset name.

        Raises:
            InvalidView: it reads a table the relay does not have, a column a table lacks,
                names two result columns alike, or otherwise fails to bind in DuckDB.
        """
        query = self._queries.get(view)
        if query is None:
            if len(self._queries) >= MAX_QUERIES:
                self._queries.clear()
            query = self._queries[view] = self._prepare(view, infos)
        return query

    def _prepare(self, view: Sql, infos: Mapping[str, DatasetInfo]) -> Query:
        select = sqlglot.parse_one(to_duckdb(view), read="duckdb")
        assert isinstance(select, exp.Select)  # views are one SELECT (views.sql.query)
        sources = [(alias, self._source(table)) for alias, table in _sources(select)]
        select = _byte_lengths(select, {alias: infos[dataset] for alias, dataset in sources})
        names = self._bind(select.sql(dialect="duckdb"))
        distinct = select.args.get("distinct")
        if len(sources) == 1 and not (distinct and not distinct.args.get("on")):
            alias, dataset = sources[0]
            key = infos[dataset].key
            _check_key_column(select, key)
            hidden: str | None = f"{_quote(alias)}.{_quote(key)}"
            columns = names if key in names else [key, *names]
        else:
            key = JOIN_KEY
            if key in names:
                raise InvalidView(f"a result column is named {key!r}, the key of joined rows")
            pairs = [f"{_quote(a)} := {_quote(a)}.{_quote(infos[d].key)}" for a, d in sources]
            hidden = None if distinct else f"to_json(struct_pack({', '.join(pairs)}))"
            columns = [key, *names]
        inner = select.copy()
        if hidden is not None:
            inner = inner.select(f"{hidden} AS {RESERVED}key", dialect="duckdb", copy=False)
        keyed = f"{RESERVED}key" if hidden is not None else f"to_json({RESERVED}q)"
        listed = ", ".join(_quote(name) for name in names)
        text = (
            f"SELECT {keyed} AS {RESERVED}key, hash({listed}) AS {RESERVED}digest, {listed}"
            f" FROM ({inner.sql(dialect='duckdb')}) AS {RESERVED}q"
        )
        datasets = tuple(sorted({dataset for _, dataset in sources}))
        return Query(view, datasets, key, tuple(columns), text)

    def _source(self, table: str) -> str:
        dataset = self.dataset(table)
        if dataset is None:
            known = ", ".join(sorted(self._mirrors)) or "none"
            raise InvalidView(f"unknown table {table!r} (the relay's SQL datasets: {known})")
        return dataset

    def _bind(self, text: str) -> list[str]:
        """The result columns of ``text``, checked by DuckDB's binder (nothing runs)."""
        try:
            names = list(self._db.sql(text).columns)
        except duckdb.Error as exc:
            message = f"the query does not fit the relay's tables: {_first_line(exc)}"
            raise InvalidView(message) from exc
        for name in names:
            if names.count(name) > 1:
                raise InvalidView(f"two result columns are named {name!r}; rename one (AS ...)")
            if name.startswith(RESERVED):
                raise InvalidView(f"result column names may not start with {RESERVED!r}")
            if "\x00" in name:
                raise InvalidView(f"result column {name!r} has a NUL character in its name")
        return names

    def evaluate(self, query: Query, generations: tuple[int, ...]) -> Result:
        """The query's rows with its tables at ``generations`` (synced by the caller).

        Raises:
            InvalidView: DuckDB failed to run it on the current rows (a cast of a bad value,
                say), or it ran past ``query_timeout``.
        """
        cached = self._results.get(query.view)
        if cached is not None and cached[0] == generations:
            if isinstance(cached[1], str):
                raise InvalidView(cached[1])  # it failed on these very rows: not run again
            self.counters.shared += 1
            return cached[1]
        try:
            table = self._run(self._db, query.text)
        except InvalidView as failure:
            self._results[query.view] = (generations, str(failure))
            raise
        self.counters.evaluations += 1
        result = _result(table, query)
        self._results[query.view] = (generations, result)
        return result

    def _run(self, db: duckdb.DuckDBPyConnection, text: str) -> pa.Table:
        """Run a subscriber's query under the time limit.

        Raises:
            InvalidView: DuckDB failed to run it, or it ran past the limit.
        """
        started = time.perf_counter()
        try:
            with self.watchdog.watching(db):
                return db.sql(text).to_arrow_table()
        except duckdb.InterruptException as exc:
            raise InvalidView(
                f"the query ran longer than {self.watchdog.limit:g} s on the relay and was"
                " stopped; narrow it (fewer rows, joins on keys)"
            ) from exc
        except duckdb.Error as exc:
            raise InvalidView(f"the query failed on the relay: {_first_line(exc)}") from exc
        finally:
            self.counters.seconds += time.perf_counter() - started

    def row_by_row(self, query: Query) -> None:
        """Check that the query decides each row on its own: a selection (and projection) of
        one table, so that it can run on a micro-batch's changed rows (mode ``every``).

        Raises:
            InvalidView: it joins, is DISTINCT or limits rows. (SQL views never aggregate,
                group, window or nest a query: ``views.sql.query`` refuses those.)
        """
        select = sqlglot.parse_one(to_duckdb(query.view), read="duckdb")
        found = [
            what
            for what, present in (
                ("reads several tables", len(query.datasets) > 1 or select.find(exp.Join)),
                ("is DISTINCT", select.args.get("distinct")),
                ("limits rows", select.args.get("limit") or select.args.get("offset")),
            )
            if present
        ]
        if found:
            raise InvalidView(
                f"mode 'every' takes SQL views that select rows of one table one by one; this"
                f" one {' and '.join(found)}: subscribe to it with mode 'latest'"
            )

    def evaluate_rows(self, query: Query, rows: Mapping[str, Array]) -> Result:
        """The query's rows over ``rows`` alone, as its one table's content (``row_by_row``).

        Raises:
            InvalidView: DuckDB failed to run it on these rows.
        """
        (name,) = query.datasets
        self._changes.execute("BEGIN TRANSACTION")
        try:
            self._changes.register("__fanout_rows", arrow_rows(rows))
            try:
                self._changes.execute(
                    f"INSERT INTO {_quote(name)} BY NAME SELECT * FROM __fanout_rows"
                )
            finally:
                self._changes.unregister("__fanout_rows")
            table = self._run(self._changes, query.text)
        except duckdb.Error as exc:
            raise InvalidView(f"the query failed on the relay: {_first_line(exc)}") from exc
        finally:
            self._changes.execute("ROLLBACK")
        self.counters.evaluations += 1
        return _result(table, query)

    def forget(self, views: Sequence[Sql]) -> None:
        """Drop cached results except those of ``views`` (the views still subscribed)."""
        keep = set(views)
        self._results = {v: r for v, r in self._results.items() if v in keep}


def _result(table: pa.Table, query: Query) -> Result:
    keys = _numpy(table.column(0))
    if keys.dtype.kind in "iu":
        keys = keys.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    digests = np.asarray(table.column(1).to_numpy(), dtype=np.uint64)[order]
    rows = split({name: _numpy(table.column(name)) for name in table.column_names[2:]})
    rows = {name: values[order] for name, values in rows.items()}
    rows[query.key] = keys
    return Result(
        keys, digests, {name: rows[name] for name in with_companions(query.columns, rows)}
    )


_AS_IS = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_timestamp,
    pa.types.is_date,
    pa.types.is_decimal,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


def _connect() -> duckdb.DuckDBPyConnection:
    """An in-memory database whose session time zone is UTC: timestamps are instants, and
    ``now()``, casts of text and dates read the same on every relay wherever it runs."""
    db = duckdb.connect(":memory:")
    db.execute("SET TimeZone = 'UTC'")
    return db


def _numpy(column: pa.ChunkedArray) -> Array:
    """A result column as numpy: numbers, timestamps and dates as such, decimals as ``Decimal``
    (exact), BLOBs as ``bytes``, the rest as str; NULL masked (``None`` in a string, decimal or
    bytes column)."""
    kind = column.type
    if not any(test(kind) for test in _AS_IS):
        column = column.cast(pa.string())
    values = to_numpy(column)
    if values.dtype.kind in "OUS" and not isinstance(values, np.ma.MaskedArray):
        return np.asarray(values, dtype=object)
    return values


def arrow_rows(rows: Mapping[str, Array]) -> pa.Table:
    """The relay's rows (``relay.data.buffers``) as an Arrow table, NULL where a companion says
    so."""
    return pa.table(
        {
            name: to_arrow(values, rows.get(valid_of(name)))
            for name, values in rows.items()
            if not is_companion(name)
        }
    )


def _byte_lengths(select: exp.Select, sources: Mapping[str, DatasetInfo]) -> exp.Select:
    """``select`` with ``length(b)`` of a bytes column ``b`` as ``octet_length(b)``: its number of
    bytes, as PostgreSQL's ``length(bytea)`` (DuckDB's ``length`` takes no BLOB)."""

    def blob(column: exp.Column) -> bool:
        infos = [sources[column.table]] if column.table in sources else sources.values()
        return any(info.columns.get(column.name) == BYTES for info in infos)

    def rewrite(node: exp.Expr) -> exp.Expr:
        inner = node.this if isinstance(node, exp.Length) else None
        if isinstance(inner, exp.Column) and blob(inner):
            return exp.Anonymous(this="octet_length", expressions=[inner.copy()])
        return node

    rewritten = select.transform(rewrite)
    assert isinstance(rewritten, exp.Select)
    return rewritten


def _sources(select: exp.Select) -> list[tuple[str, str]]:
    """(alias, table) of the FROM table and every joined one."""
    nodes = [select.args["from_"].this, *(join.this for join in select.args.get("joins") or [])]
    return [(node.alias_or_name.lower(), node.name.lower()) for node in nodes]


def _check_key_column(select: exp.Select, key: str) -> None:
    """A result column named as the dataset's key must be the key (rows are keyed by it)."""
    for item in select.expressions:
        if item.alias_or_name != key or isinstance(item, exp.Star):
            continue
        inner = item.unalias()
        if not (isinstance(inner, exp.Column) and inner.name == key):
            raise InvalidView(
                f"result column {key!r} must be the dataset's key column {key!r}, which keys"
                " the rows sent; name the expression otherwise"
            )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
