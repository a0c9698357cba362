"""Datasets the publisher serves: named, keyed tables with a schema, an index and a source.

Every dataset is declared in ``fanout.toml`` (see ``publisher.config``) or built in (``agents``,
the demo's simulation). Whatever its source, its stream reaches the pipeline as the declared
columns plus two internal ones:

* ``_version`` (long): the larger value is the newer version of a key's row (the simulation's
  tick, the ingest log's offset, a declared order column, ...);
* ``_deleted`` (boolean): the row is a tombstone — the key was deleted at that version.

Column names starting with ``_`` are reserved for these and for matching.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from fanout.publisher.sources.simulation import AXES, SimulationParams
from fanout.wire.columns import BYTES, DATE, MAX_PRECISION, TIMESTAMP
from fanout.wire.messages import DatasetInfo, IndexKind

#: Spark state store providers a dataset's state may live in (``publisher.state``).
StateStoreKind = Literal["hdfs", "rocksdb"]

ColumnType = str
"""A declared column type: one of ``TYPES``, or ``decimal(p,s)`` (``column_type`` checks)."""

#: The column types without parameters (``decimal(p,s)`` besides them).
TYPES = ("long", "int", "double", "float", "string", "boolean", "timestamp", "date", "bytes")
#: Declared column type -> the dtype its values travel as (see ``wire.columns``).
WIRE_DTYPES: dict[str, str] = {
    "long": "<i8",
    "int": "<i4",
    "double": "<f8",
    "float": "<f4",
    "string": "str",
    "boolean": "|b1",
    "timestamp": TIMESTAMP,
    "date": DATE,
    "bytes": BYTES,
}
#: Declared column type -> Spark SQL type name.
SPARK_TYPES: dict[str, str] = {
    "long": "bigint",
    "int": "int",
    "double": "double",
    "float": "float",
    "string": "string",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
    "bytes": "binary",
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def decimal_of(kind: ColumnType) -> tuple[int, int] | None:
    """(precision, scale) of a ``decimal(p,s)`` type, None for any other type."""
    found = _DECIMAL.fullmatch(kind)
    return (int(found[1]), int(found[2])) if found else None


def column_type(kind: str) -> ColumnType:
    """``kind`` checked to be a column type, in its canonical spelling (``decimal(12,2)``).

    Raises:
        ValueError: it is not one, or a decimal's precision is not 1-38 or its scale not
            0-precision.
    """
    if kind in TYPES:
        return kind
    decimal = decimal_of(kind.strip().lower())
    if decimal is None:
        raise ValueError(f"{kind!r} is not a column type ({', '.join(TYPES)}, decimal(p,s))")
    precision, scale = decimal
    if not 1 <= precision <= MAX_PRECISION or not 0 <= scale <= precision:
        raise ValueError(
            f"{kind!r}: a decimal's precision is 1 to {MAX_PRECISION} and its scale 0 to the"
            " precision"
        )
    return f"decimal({precision},{scale})"


def wire_dtype(kind: ColumnType) -> str:
    """The wire dtype of a column type (``decimal(p,s)`` travels as itself)."""
    return kind if decimal_of(kind) else WIRE_DTYPES[kind]


def spark_type(kind: ColumnType) -> str:
    """The Spark SQL type of a column type."""
    return kind if decimal_of(kind) else SPARK_TYPES[kind]


VERSION = "_version"
DELETED = "_deleted"


@dataclass(frozen=True)
class SimulationSource:
    """Agents moving in a 2-D or 3-D world (``sources.simulation``)."""

    params: SimulationParams = field(default_factory=SimulationParams)


@dataclass(frozen=True)
class FilesSource:
    """Files dropped into a folder, read by Spark's file source.

    Attributes:
        path: the folder watched.
        format: ``json`` (one object per line), ``csv`` (with a header) or ``parquet``.
        options: extra Spark reader options.
        max_files_per_trigger: admission control: files per micro-batch at most.
        deleted: a boolean column that marks a row as a delete of its key (None: no deletes).
    """

    path: str
    format: Literal["json", "csv", "parquet"] = "json"
    options: dict[str, str] = field(default_factory=dict)
    max_files_per_trigger: int = 100
    deleted: str | None = None


@dataclass(frozen=True)
class IngestSource:
    """Producers ``publish()`` upserts and deletes through the control plane; every event is
    appended durably to the ingest log before it is acknowledged (``sources.producers``)."""


@dataclass(frozen=True)
class PostgresSource:
    """A PostgreSQL table: its rows, then every change to them, captured by logical decoding
    or a trigger (``sources.postgres``; 003's DB connector).

    Attributes:
        url: the database, ``postgresql://user@host:port/db``.
        table: the table (None: the dataset's name).
        capture: ``"logical"``, ``"trigger"``, or ``"auto"``: logical where the server allows.
    """

    url: str
    table: str | None = None
    capture: Literal["auto", "logical", "trigger"] = "auto"


Source = SimulationSource | FilesSource | IngestSource | PostgresSource


@dataclass(frozen=True)
class BusOptions:
    """A dataset's objects published on the subject bus (``publisher.bustable``).

    Attributes:
        label: a string column whose value is each object's label (dot-separated segments,
            e.g. ``computer.hardware.misc``); None: objects have no label.
    """

    label: str | None = None


@dataclass(frozen=True)
class Dataset:
    """One dataset of the publisher.

    Attributes:
        name: what subscribers call it.
        key: the key column.
        schema: column -> declared type, key included, in order.
        index: the view language rows are selected with.
        index_columns: the columns that language reads: ``x, y[, z]`` for ``space``, the topic
            column for ``topic``, the path column for ``path``, every column for ``sql``.
        source: where rows come from.
        order: a column whose larger value is the newer row (None: the source's own order).
        time_column: a column holding each row's event time in epoch seconds (None: none).
        cell_size: grid cell side for region matching (see ``publisher.matching``).
        bus: published on the subject bus as a type of objects (None: not).
        state_store: where Spark keeps its latest state per key: ``hdfs`` (Spark's default,
            in-memory maps checkpointed to files) or ``rocksdb`` (``publisher.state``).
    """

    name: str
    key: str
    schema: dict[str, ColumnType]
    index: IndexKind
    index_columns: tuple[str, ...]
    source: Source
    order: str | None = None
    time_column: str | None = None
    cell_size: float = 50.0
    bus: BusOptions | None = None
    state_store: StateStoreKind = "hdfs"

    @property
    def columns(self) -> dict[str, str]:
        """Column -> wire dtype, in schema order."""
        return {name: wire_dtype(kind) for name, kind in self.schema.items()}

    @property
    def value_columns(self) -> list[str]:
        """Every column but the key, in schema order."""
        return [name for name in self.schema if name != self.key]

    def spark_schema(self) -> str:
        """The declared columns as a Spark DDL schema string."""
        return ", ".join(f"`{name}` {spark_type(kind)}" for name, kind in self.schema.items())

    def info(self) -> DatasetInfo:
        """The descriptor relays receive in the ``Catalog``."""
        return DatasetInfo(
            name=self.name,
            key=self.key,
            columns=self.columns,
            index=self.index,
            index_columns=list(self.index_columns),
            nullable=self.nullable,
        )

    @property
    def nullable(self) -> list[str]:
        """The columns that may hold NULL: every one but the key, except the simulation's
        (it never makes a NULL, and its relays then carry no validity at all)."""
        if isinstance(self.source, SimulationSource):
            return []
        return self.value_columns


def agents(params: SimulationParams, cell_size: float | None = None) -> Dataset:
    """The built-in ``agents`` dataset: simulated agents moving in 2-D or 3-D."""
    axes = AXES[: params.dims]
    schema: dict[str, ColumnType] = {"id": "long", **dict.fromkeys(axes, "double")}
    schema |= {"kind": "int", "tick": "long", "ts": "double"}
    return Dataset(
        name="agents",
        key="id",
        schema=schema,
        index="space",
        index_columns=axes,
        source=SimulationSource(params),
        order="tick",
        time_column="ts",
        cell_size=cell_size if cell_size is not None else params.world / 20.0,
    )
