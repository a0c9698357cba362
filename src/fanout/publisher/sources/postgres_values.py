"""The values of a captured PostgreSQL table as the ``postgres`` source's Arrow batches take
them, whichever way the change was captured (``sources.postgres``). Rules:

1. **Declared types only.** A column reads as its declared type if its PostgreSQL type is one
   of ``READS_AS``'s; ``check_columns`` refuses a table that lacks one or has another.
2. **One meaning, two spellings.** A trigger's change and a snapshot's row come as ``to_jsonb``
   spells them (numbers exact, timestamps, dates and bytes as text); a logical decoding change
   as values psycopg loaded from the text the server sent. Both end in the same value.
3. **Values that do not fit are refused, not fatal** (``sources.fitting``): the change keeps
   only its key and carries its problem; a delete is never refused (a value that does not fit
   is NULL in it).
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import abc
from psycopg.pq import Format

from fanout.publisher.datasets import DELETED, VERSION, ColumnType, decimal_of
from fanout.publisher.sources import pgoutput
from fanout.publisher.sources.fitting import Unfit, stored, unfit

#: The reader's column naming why a change is refused (rule 3; null: it is not).
PROBLEM = "_problem"

#: fanout column type -> the PostgreSQL types (``information_schema`` spelling) that read as it.
READS_AS: dict[str, frozenset[str]] = {
    "long": frozenset({"bigint", "integer", "smallint"}),
    "int": frozenset({"integer", "smallint"}),
    "double": frozenset({"double precision", "real", "numeric", "bigint", "integer", "smallint"}),
    "float": frozenset({"real", "double precision", "numeric", "bigint", "integer", "smallint"}),
    "string": frozenset({"text", "character varying", "character"}),
    "boolean": frozenset({"boolean"}),
    "timestamp": frozenset({"timestamp with time zone"}),
    "date": frozenset({"date"}),
    "bytes": frozenset({"bytea"}),
}

#: One change: its ``_version``, whether it is a delete, and its values by column name.
Row = tuple[int, bool, Mapping[str, Any]]


class Unreadable:
    """A value the server sent that psycopg cannot load as a Python value (``infinity``, a
    year past 9999, ...): it does not fit any column (rule 3)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return repr(self.text)


def reads_as(kind: str) -> frozenset[str]:
    """The PostgreSQL types that read as the column type ``kind`` (``decimal(p,s)``: numeric,
    whose values must fit it)."""
    return frozenset({"numeric"}) if decimal_of(kind) else READS_AS[kind]


def check_columns(db: psycopg.Connection[Any], table: str, columns: Mapping[str, str]) -> None:
    """Check that ``table`` has the dataset's columns, of types that read as the declared ones.

    Raises:
        ValueError: it has no such table, lacks a column or has one of another type (the
            message says which).
    """
    found: dict[str, str] = dict(
        db.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s",
            (table,),
        ).fetchall()
    )
    if not found:
        raise ValueError(f"postgres source: the database has no table {table!r}")
    for column, kind in columns.items():
        if column not in found:
            raise ValueError(
                f"postgres source: table {table!r} has no column {column!r}"
                f" (it has {sorted(found)})"
            )
        if found[column] not in reads_as(kind):
            raise ValueError(
                f"postgres source: column {column!r} of table {table!r} is"
                f" {found[column]}, which does not read as the dataset's {kind}"
                f" (it takes {', '.join(sorted(reads_as(kind)))})"
            )


def exact_json(text: str | bytes) -> Any:
    """JSON with its numbers as ``Decimal``: a numeric column's value stays exact."""
    return json.loads(text, parse_float=decimal.Decimal)


def to_batches(
    rows: list[Row], schema: pa.Schema, table: str, key: str | None
) -> Iterator[pa.RecordBatch]:
    """Changes as Arrow batches of ``schema`` (the declared columns, ``_version``, ``_deleted``
    and ``_problem``); ``key`` names a refused change's key in its problem (rule 3)."""
    # A list iterator, not a generator: Spark's prefetch cache copies the iterator.
    if not rows:
        return iter([])
    declared = [
        (f.name, column_kind(f.type), f.type)
        for f in schema
        if f.name not in (VERSION, DELETED, PROBLEM)
    ]
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    for row in rows:
        version, deleted, _ = row
        values, problem = fitted(row, declared, table, key)
        for name, value in values.items():
            columns[name].append(value)
        columns[VERSION].append(version)
        columns[DELETED].append(deleted)
        columns[PROBLEM].append(problem)
    arrays = {f.name: pa.array(columns[f.name], type=f.type) for f in schema}
    return iter(pa.table(arrays, schema=schema).to_batches())


def fitted(
    row: Row,
    declared: list[tuple[str, ColumnType, pa.DataType]],
    table: str,
    key: str | None,
) -> tuple[dict[str, Any], str | None]:
    """One change's values as Arrow takes them, and its problem if it is refused (rule 3).

    A delete is never refused: only its key matters, so a value that does not fit is
    NULL in it. A refused upsert keeps only its key (the row is dropped before the state).
    """
    version, deleted, data = row
    values: dict[str, Any] = {}
    for name, column, arrow in declared:
        try:
            values[name] = value_of(name, data.get(name), column, arrow)
        except Unfit as exc:
            if deleted:
                values[name] = None
                continue
            where = f"table {table!r}"
            if key is not None:
                where += f", key {data.get(key)!r}"
            problem = f"{where}, change {version}: {exc}"
            kept = {name: data.get(name) if name == key else None for name, _, _ in declared}
            return kept, problem
    return values, None


def value_of(name: str, value: Any, column: ColumnType, kind: pa.DataType) -> Any:
    """A value of column ``name`` (of column type ``column``) as a Python value of its Arrow
    type ``kind``: spelled by ``to_jsonb`` or loaded by psycopg (rule 2).

    Raises:
        Unfit: it does not fit the column's type (``sources.fitting``).
    """
    if value is None:
        return None
    if isinstance(value, Unreadable):
        raise unfit(name, column, value.text)
    if pa.types.is_floating(kind):  # numbers come as Decimal; NaN and infinities as text
        number = float(value)
        if isinstance(value, decimal.Decimal) and value.is_finite() and not math.isfinite(number):
            raise unfit(name, column, value)  # beyond the range of a double
        value = number
    elif column in _TEXT and isinstance(value, str):  # to_jsonb spells these as text
        value = _parsed(name, column, value, _TEXT[column])
    kept = stored(name, column, value)
    return decimal.Decimal(kept) if pa.types.is_decimal(kind) else kept  # exact text


def _parsed(name: str, column: str, value: Any, parse: Callable[[str], Any]) -> Any:
    """``parse(value)``; text PostgreSQL holds but Python cannot (``infinity``, a year past
    9999 or before 1, ...) does not fit."""
    try:
        return parse(value)
    except (TypeError, ValueError):
        raise unfit(name, column, value) from None


def bytea(text: str) -> bytes:
    """A ``bytea`` value as PostgreSQL spells it in text (and ``to_jsonb``): hex (``\\x0a1b``),
    or the escape format (``bytea_output = escape``: ``\\ooo`` octal, ``\\\\``, the rest as is).

    Raises:
        ValueError: it is neither.
    """
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    out = bytearray()
    at = 0
    while at < len(text):
        if text[at] != "\\":
            out += text[at].encode("latin-1")
            at += 1
        elif text[at + 1 : at + 2] == "\\":
            out.append(0x5C)
            at += 2
        else:
            out.append(int(text[at + 1 : at + 4], 8))
            at += 4
    return bytes(out)


_TEXT: dict[ColumnType, Callable[[str], Any]] = {
    # ISO 8601 with the session's offset: an instant
    "timestamp": datetime.datetime.fromisoformat,
    "date": datetime.date.fromisoformat,
    "bytes": bytea,
}


def column_kind(kind: pa.DataType) -> ColumnType:
    """The fanout column type of a column read as Arrow type ``kind``."""
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_timestamp(kind):
        return "timestamp"
    for name, arrow in _KINDS.items():
        if kind == arrow:
            return name
    if pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_large_binary(kind):
        return "bytes"
    raise ValueError(f"no column type reads as {kind}")


_KINDS: dict[ColumnType, pa.DataType] = {
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "float": pa.float32(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "bytes": pa.binary(),
}


#: The slot's text spelling of a TOASTed value an update left unchanged (not sent).
UNCHANGED_TEXT = "a TOASTed value the update left unchanged (REPLICA IDENTITY FULL sends it)"


class LoadedValues:
    """The text values the slot sent, loaded as psycopg loads a query's (rule 2 of
    ``sources.postgres_values``)."""

    def __init__(self, transformer: abc.Transformer) -> None:
        self.transformer = transformer
        self.loaders: dict[int, abc.Loader] = {}

    def changes(
        self,
        relation: pgoutput.Relation,
        change: pgoutput.Insert | pgoutput.Update | pgoutput.Delete,
        key: str | None,
    ) -> list[tuple[bool, dict[str, Any]]]:
        """``(deleted, values)`` of one change: an update of the key is a delete and an upsert."""
        match change:
            case pgoutput.Insert():
                return [(False, self.row(relation, change.new))]
            case pgoutput.Delete():
                return [(True, self.row(relation, change.old))]
            case pgoutput.Update():
                new = self.row(relation, change.new, change.old)
                if change.old is None:
                    return [(False, new)]
                old = self.row(relation, change.old)
                keys = [key] if key else [c.name for c in relation.columns if c.key]
                moved = any(old.get(name) != new.get(name) for name in keys)
                return [(True, old), (False, new)] if moved else [(False, new)]

    def row(
        self,
        relation: pgoutput.Relation,
        values: tuple[pgoutput.Value, ...],
        old: tuple[pgoutput.Value, ...] | None = None,
    ) -> dict[str, Any]:
        """A row's values by column name; an unchanged TOASTed value is the old row's, if sent."""
        row: dict[str, Any] = {}
        for at, (column, value) in enumerate(zip(relation.columns, values, strict=True)):
            sent = old[at] if value is pgoutput.UNCHANGED and old is not None else value
            row[column.name] = self.load(column.type_oid, sent)
        return row

    def load(self, oid: int, value: pgoutput.Value) -> Any:
        if value is None:
            return None
        if not isinstance(value, bytes):
            return Unreadable(UNCHANGED_TEXT)
        loader = self.loaders.get(oid)
        if loader is None:
            loader = self.loaders[oid] = self.transformer.get_loader(oid, Format.TEXT)
        try:
            loaded = loader.load(value)
        except (psycopg.DataError, ValueError, OverflowError):
            return Unreadable(value.decode(errors="replace"))
        if isinstance(loaded, decimal.Decimal) and not loaded.is_finite():
            return value.decode()  # as to_jsonb spells it: a refusal says the same either way
        return loaded
