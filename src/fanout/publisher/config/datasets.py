"""``[datasets.NAME]`` tables of ``fanout.toml``: each declares one dataset of the publisher.

A dataset (``publisher.datasets.Dataset``) is a named, keyed table: ``key``, ``schema`` (column =
type, in order), ``index`` (the view language: ``space`` over x, y[, z], ``sql`` over predicate
columns, ``topic`` or ``path`` over one string column), optional ``order``, ``time`` and
``cell_size``, and a ``source`` (``simulation``, ``files``, ``ingest`` or ``postgres``). A
simulation produces fixed columns, so its ``schema``, ``key`` and ``index`` may be left out: they
default to the built-in ``agents`` layout. The reference is ``docs/configuration.md``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, cast, get_args

from fanout.errors import ConfigError, InvalidView
from fanout.publisher.config.values import (
    Table,
    alternatives,
    as_choice,
    as_integer,
    as_kind_table,
    as_number,
    as_string,
    as_table,
    check_keys,
    child,
    described,
    fail,
    required,
    suggestion,
)
from fanout.publisher.datasets import (
    TYPES,
    BusOptions,
    ColumnType,
    Dataset,
    FilesSource,
    IngestSource,
    PostgresSource,
    SimulationSource,
    Source,
    StateStoreKind,
    agents,
    column_type,
)
from fanout.publisher.sources.simulation import SimulationParams
from fanout.views import registry
from fanout.views.objects.store import KEY as OBJECTS_KEY
from fanout.views.objects.store import SCHEMA as OBJECTS_SCHEMA
from fanout.views.sql import parse as parse_sql
from fanout.wire.messages import IndexKind

FileFormat = Literal["json", "csv", "parquet"]

_DATASET_KEYS = (
    "key",
    "schema",
    "index",
    "order",
    "time",
    "cell_size",
    "source",
    "bus",
    "state_store",
)
_STATE_STORES: dict[str, StateStoreKind] = {"hdfs": "hdfs", "rocksdb": "rocksdb"}
# Lower case only: SQL views fold table names to lower case, so 'Orders' could not be named.
_DATASET_NAME = re.compile(r"[a-z][a-z0-9_]*")
_COLUMN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: The column types by name; ``decimal(p,s)`` is listed for the message, and parsed apart.
_COLUMN_TYPES: dict[str, ColumnType] = {name: name for name in (*TYPES, "decimal(p,s)")}
_NUMERIC = ("long", "int", "double", "float")
# Keys are compared and hashed: floats make unreliable keys and booleans allow only two rows.
_KEY_TYPES = ("long", "int", "string")
# The order column becomes the row's version, a long: only integers convert without loss.
_ORDER_TYPES = ("long", "int")


def read_datasets(value: object) -> dict[str, Dataset]:
    """Return the datasets the ``[datasets]`` table declares, in declaration order.

    Args:
        value: the ``datasets`` value of the parsed TOML document.

    Raises:
        ConfigError: ``PATH: PROBLEM``, where ``PATH`` starts with ``datasets.``.
    """
    table = as_table(value, "datasets")
    return {name: _dataset(name, spec, child("datasets", name)) for name, spec in table.items()}


def _dataset(name: str, value: object, path: str) -> Dataset:
    """Return the dataset one ``[datasets.NAME]`` table declares."""
    _check_dataset_name(name, path)
    table = as_table(value, path)
    check_keys(table, _DATASET_KEYS, path)
    what = 'the source, e.g. { kind = "ingest" }'
    source = _source(required(table, "source", path, what), f"{path}.source")
    if isinstance(source, SimulationSource):
        dataset = _simulation_dataset(name, table, source, path)
    elif _fixed(table.get("index")) is not None:
        dataset = _objects_dataset(name, table, source, path)
    else:
        dataset = _declared_dataset(name, table, source, path)
    if "bus" in table:
        dataset = replace(dataset, bus=_bus(table["bus"], dataset.schema, f"{path}.bus"))
    if "state_store" in table:
        store = as_choice(table["state_store"], _STATE_STORES, f"{path}.state_store", "store")
        dataset = replace(dataset, state_store=store)
    if "cell_size" not in table:
        return dataset
    if registry.kinds()[dataset.index].columns != "coordinates":
        fail(f"{path}.cell_size", "only a space index has a cell size")
    return replace(dataset, cell_size=as_number(table["cell_size"], f"{path}.cell_size", "> 0"))


def _bus(value: object, schema: Mapping[str, ColumnType], path: str) -> BusOptions | None:
    """Return a dataset's ``bus`` opt-in: ``true``, ``false`` or ``{ label = "column" }``."""
    if isinstance(value, bool):
        return BusOptions() if value else None
    if not isinstance(value, dict):
        fail(
            path,
            'expected true, false or a table such as { label = "category" }, not'
            f" {described(value)}",
        )
    check_keys(value, ("label",), path)
    if "label" not in value:
        return BusOptions()
    label = _column(value["label"], schema, f"{path}.label", ("string",), "a label column")
    return BusOptions(label=label)


def _check_dataset_name(name: str, path: str) -> None:
    if not _DATASET_NAME.fullmatch(name):
        fail(
            path,
            f"{name!r} is not a dataset name: use lower-case letters, digits and '_', starting"
            " with a letter (SQL views name a dataset as a table)",
        )
    # Ask the SQL view parser itself: it is the judge of what a view can name as a table.
    try:
        usable = parse_sql(f"SELECT * FROM {name}").tables == (name,)
    except InvalidView:
        usable = False
    if not usable:
        fail(path, f"{name!r} is an SQL keyword: SQL views could not name it as a table")


def _declared_dataset(name: str, table: Table, source: Source, path: str) -> Dataset:
    """Return a dataset whose schema, key and index the file declares (files, ingest, postgres)."""
    schema = _schema(required(table, "schema", path, "a table of column = type"), f"{path}.schema")
    key_value = required(table, "key", path, "the name of the key column")
    key = _column(key_value, schema, f"{path}.key", _KEY_TYPES, "the key")
    index, index_columns = _index(table.get("index", "sql"), schema, key, f"{path}.index")
    if isinstance(source, FilesSource) and source.deleted is not None:
        _check_delete_marker(source.deleted, schema, f"{path}.source.deleted")
    return Dataset(
        name=name,
        key=key,
        schema=schema,
        index=index,
        index_columns=index_columns,
        source=source,
        order=_optional_column(table, "order", schema, path, _ORDER_TYPES),
        time_column=_optional_column(table, "time", schema, path, _NUMERIC),
    )


def _fixed(value: object) -> str | None:
    """The kind an ``index`` value names (a name, or a table's ``kind``) if its schema is fixed
    (``objects``), else None."""
    kind = value.get("kind") if isinstance(value, dict) else value
    if not isinstance(kind, str):
        return None
    found = registry.kinds().get(kind)
    return kind if found is not None and found.columns == "fixed" else None


def _objects_dataset(name: str, table: Table, source: Source, path: str) -> Dataset:
    """Return an ``objects`` dataset: cells of PPS objects (``views.objects.store``), fed by
    producers. Its schema and key are fixed; the file may repeat them."""
    if not isinstance(source, IngestSource):
        fail(f"{path}.source", "an objects dataset is written by producers: its source is ingest")
    schema = dict(OBJECTS_SCHEMA)
    if "schema" in table and _schema(table["schema"], f"{path}.schema") != schema:
        fail(f"{path}.schema", f"an objects dataset's schema is fixed: {schema}; leave it out")
    if table.get("key", OBJECTS_KEY) != OBJECTS_KEY:
        fail(f"{path}.key", f"an objects dataset's key is {OBJECTS_KEY!r}; leave it out")
    for key in ("order", "time"):
        if key in table:
            fail(f"{path}.{key}", "an objects dataset orders its cells by the ingest log")
    index = table["index"]
    if isinstance(index, dict):
        check_keys(index, ("kind",), f"{path}.index")
    kind = _fixed(index)
    assert kind is not None  # as the caller found
    return Dataset(
        name=name,
        key=OBJECTS_KEY,
        schema=schema,
        index=kind,
        index_columns=("object",),
        source=source,
    )


def _simulation_dataset(name: str, table: Table, source: SimulationSource, path: str) -> Dataset:
    """Return a simulated dataset: the simulation fixes its columns; the file may repeat them."""
    builtin = agents(source.params)
    if "schema" in table:
        schema = _schema(table["schema"], f"{path}.schema")
        if list(schema.items()) != list(builtin.schema.items()):
            produced = ", ".join(f"{column} {kind}" for column, kind in builtin.schema.items())
            fail(
                f"{path}.schema",
                f"a simulation with dims = {source.params.dims} produces {produced}:"
                " leave schema out or declare exactly these",
            )
    fixed = {"key": builtin.key, "order": builtin.order, "time": builtin.time_column}
    for key, expected in fixed.items():
        if key in table and as_string(table[key], f"{path}.{key}") != expected:
            fail(f"{path}.{key}", f"a simulation's {key} column is {expected!r}")
    if "index" not in table:
        return replace(builtin, name=name)
    index, columns = _index(table["index"], builtin.schema, builtin.key, f"{path}.index")
    return replace(builtin, name=name, index=index, index_columns=columns)


def _schema(value: object, path: str) -> dict[str, ColumnType]:
    """Return column -> type, in the file's order, each name usable in Spark and SQL views."""
    table = as_table(value, path)
    if not table:
        fail(path, "no columns: declare at least the key column")
    schema: dict[str, ColumnType] = {}
    folded: dict[str, str] = {}
    for column, kind in table.items():
        column_path = child(path, column)
        _check_column_name(column, column_path)
        if column.lower() in folded:
            fail(
                column_path,
                f"{column!r} and {folded[column.lower()]!r} differ only in case:"
                " SQL views could not tell them apart",
            )
        folded[column.lower()] = column
        name = as_string(kind, column_path)
        if name.lower().startswith("decimal("):
            try:
                schema[column] = column_type(name)
            except ValueError as exc:
                fail(column_path, str(exc))
        else:
            schema[column] = as_choice(name, _COLUMN_TYPES, column_path, "type")
    return schema


def _check_column_name(column: str, path: str) -> None:
    if column.startswith("_"):
        fail(path, "column names starting with '_' are reserved for fanout's own columns")
    if not _COLUMN_NAME.fullmatch(column):
        fail(path, f"{column!r} is not a column name: use letters, digits and '_'")


def _check_delete_marker(column: str, schema: Mapping[str, ColumnType], path: str) -> None:
    """Check a files source's ``deleted`` column: a boolean column of the schema, or a column of
    the files only (read as boolean, never served: ``sources.files`` rule 1)."""
    if column in schema:
        if schema[column] != "boolean":
            fail(path, f"{column!r} is a {schema[column]} column; a delete marker must be boolean")
        return
    _check_column_name(column, path)
    twin = next((name for name in schema if name.lower() == column.lower()), None)
    if twin is not None:
        fail(path, f"{column!r} and the column {twin!r} differ only in case")


def _column(
    value: object, schema: Mapping[str, ColumnType], path: str, types: Sequence[str], role: str
) -> str:
    """Return the column ``value`` names, checked to be in ``schema`` with one of ``types``."""
    column = as_string(value, path)
    if column not in schema:
        fail(path, f"{column!r} is not a column of the schema{suggestion(column, list(schema))}")
    if schema[column] not in types:
        fail(path, f"{column!r} is a {schema[column]} column; {role} must be {alternatives(types)}")
    return column


def _optional_column(
    table: Table, key: str, schema: Mapping[str, ColumnType], path: str, types: Sequence[str]
) -> str | None:
    if key not in table:
        return None
    return _column(table[key], schema, f"{path}.{key}", types, f"the {key} column")


# -- index ---------------------------------------------------------------------------------------


def _index(
    value: object, schema: Mapping[str, ColumnType], key: str, path: str
) -> tuple[IndexKind, tuple[str, ...]]:
    """Return the index's kind and the columns its views read.

    Args:
        value: the ``index`` value: a table ``{ kind, columns }`` or a kind name.
        schema: the dataset's columns.
        key: the key column (a topic or path index reads it unless told otherwise).
        path: the key path of ``value``.

    Returns:
        (kind, columns): columns default to every column (sql) or the key (topic, path).

    Raises:
        ConfigError: unknown kind or keys, or columns that do not fit the kind.
    """
    table, kind_path = as_kind_table(value, path)
    check_keys(table, ("kind", "columns"), path)
    kind = as_choice(table["kind"], {name: name for name in registry.kinds()}, kind_path)
    columns_path = f"{path}.columns"
    named = _column_list(table["columns"], schema, columns_path) if "columns" in table else None
    match registry.kinds()[kind].columns:
        case "coordinates":
            return kind, _space_columns(kind, named, schema, columns_path)
        case "any":
            return kind, tuple(schema) if named is None else _sql_columns(kind, named, columns_path)
        case "fixed":
            fail(
                kind_path,
                f"an {kind} index takes the fixed {kind} schema: leave schema and key out",
            )
    return kind, _name_column(kind, named, schema, key, columns_path)


def _column_list(value: object, schema: Mapping[str, ColumnType], path: str) -> tuple[str, ...]:
    """Return distinct columns of ``schema``, in the order given."""
    if not isinstance(value, list):
        fail(path, f"expected an array of column names, not {described(value)}")
    columns: list[str] = []
    for position, item in enumerate(value):
        item_path = f"{path}[{position}]"
        column = as_string(item, item_path)
        if column not in schema:
            hint = suggestion(column, list(schema))
            fail(item_path, f"{column!r} is not a column of the schema{hint}")
        if column in columns:
            fail(item_path, f"{column!r} is listed twice")
        columns.append(column)
    return tuple(columns)


def _space_columns(
    kind: str, named: tuple[str, ...] | None, schema: Mapping[str, ColumnType], path: str
) -> tuple[str, ...]:
    if named is None:
        fail(path, f'missing: a {kind} index names its 2 or 3 coordinate columns, e.g. ["x", "y"]')
    if len(named) not in (2, 3):
        fail(path, f"a {kind} index needs 2 or 3 numeric columns (x, y[, z]), not {len(named)}")
    for position, column in enumerate(named):
        if schema[column] not in _NUMERIC:
            fail(
                f"{path}[{position}]",
                f"{column!r} is a {schema[column]} column; a {kind} index needs numeric columns",
            )
    return named


def _sql_columns(kind: str, named: tuple[str, ...], path: str) -> tuple[str, ...]:
    if not named:
        fail(path, f"an {kind} index needs at least one column (leave columns out for all of them)")
    return named


def _name_column(
    kind: str,
    named: tuple[str, ...] | None,
    schema: Mapping[str, ColumnType],
    key: str,
    path: str,
) -> tuple[str, ...]:
    """Return the one string column a topic or path index reads (the key by default)."""
    if named is None:
        if schema[key] != "string":
            fail(
                path,
                f"missing: a {kind} index reads one string column, and the key {key!r} is a"
                f" {schema[key]} column",
            )
        return (key,)
    if len(named) != 1:
        fail(path, f"a {kind} index reads exactly one string column, not {len(named)}")
    if schema[named[0]] != "string":
        fail(
            f"{path}[0]",
            f"{named[0]!r} is a {schema[named[0]]} column; a {kind} index needs a string column",
        )
    return named


# -- source --------------------------------------------------------------------------------------

# start_time is the stream's clock origin, fixed when its checkpoint is created: not a setting.
_SIMULATION_OPTIONS = {
    spec.name: str(spec.type)
    for spec in dataclasses.fields(SimulationParams)
    if spec.name != "start_time"
}
# Only types are checked here: SimulationParams checks each option's range itself.
_SIMULATION_READERS: dict[str, Callable[[object, str], Any]] = {
    "int": lambda value, path: as_integer(value, path, lowest=None),
    "float": lambda value, path: as_number(value, path, "any"),
    "str": as_string,
}
_FORMATS: dict[str, FileFormat] = {name: name for name in get_args(FileFormat)}
_FILES_KEYS = ("kind", "path", "format", "options", "max_files_per_trigger", "deleted")


def _source(value: object, path: str) -> Source:
    """Return the source a ``source`` table (or its kind alone: ``source = "ingest"``) declares."""
    table, kind_path = as_kind_table(value, path)
    read = as_choice(table["kind"], _SOURCE_READERS, kind_path)
    return read(table, path)


def _simulation_source(table: Table, path: str) -> SimulationSource:
    check_keys(table, ("kind", *_SIMULATION_OPTIONS), path)
    options: dict[str, Any] = {}
    for name, raw in table.items():
        if name == "kind":
            continue
        option_path = f"{path}.{name}"
        options[name] = _SIMULATION_READERS[_SIMULATION_OPTIONS[name]](raw, option_path)
        # SimulationParams checks each option on its own: one at a time finds the one at fault.
        try:
            replace(SimulationParams(), **{name: options[name]})
        except ConfigError as exc:
            fail(option_path, str(exc))
    return SimulationSource(replace(SimulationParams(), **options))


def _files_source(table: Table, path: str) -> FilesSource:
    check_keys(table, _FILES_KEYS, path)
    folder = required(table, "path", path, "the folder files are read from")
    batch = table.get("max_files_per_trigger", 100)
    return FilesSource(
        path=as_string(folder, f"{path}.path"),
        format=as_choice(table.get("format", "json"), _FORMATS, f"{path}.format"),
        options=_reader_options(table.get("options", {}), f"{path}.options"),
        max_files_per_trigger=as_integer(batch, f"{path}.max_files_per_trigger", 1),
        deleted=as_string(table["deleted"], f"{path}.deleted") if "deleted" in table else None,
    )


def _reader_options(value: object, path: str) -> dict[str, str]:
    """Return Spark reader options: strings, numbers or booleans, passed on as strings."""
    options: dict[str, str] = {}
    for name, raw in as_table(value, path).items():
        if not isinstance(raw, str | int | float):
            fail(child(path, name), f"expected a string, number or boolean, not {described(raw)}")
        # Spark spells booleans true/false
        options[name] = str(raw).lower() if isinstance(raw, bool) else str(raw)
    return options


def _ingest_source(table: Table, path: str) -> IngestSource:
    check_keys(table, ("kind",), path)
    return IngestSource()


def _postgres_source(table: Table, path: str) -> PostgresSource:
    check_keys(table, ("kind", "url", "table", "capture"), path)
    url = as_string(required(table, "url", path, "the database, postgresql://..."), f"{path}.url")
    if not url.startswith(("postgresql://", "postgres://")):
        fail(f"{path}.url", f"expected a postgresql:// URL, not {url!r}")
    name = as_string(table["table"], f"{path}.table") if "table" in table else None
    capture = as_string(table.get("capture", "auto"), f"{path}.capture")
    if capture not in ("auto", "logical", "trigger"):
        fail(f"{path}.capture", f"expected auto, logical or trigger, not {capture!r}")
    return PostgresSource(url, name, cast(Literal["auto", "logical", "trigger"], capture))


_SOURCE_READERS: dict[str, Callable[[Table, str], Source]] = {
    "simulation": _simulation_source,
    "files": _files_source,
    "ingest": _ingest_source,
    "postgres": _postgres_source,
}
