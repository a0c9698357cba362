"""Matching rows against object-path primitives (QNX PPS style, US 9,026,567).

An object path primitive selects one object (``/dir/obj``) or every object of a directory
(``/dir/.all``); rows are bucketed by their object's directory and joined on it. Attribute
filters (``?f=...``) and delivery options are applied downstream by the relay, so upstream a
primitive holds whole objects (an over-approximation, never an under-approximation).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyspark.sql.functions as sf
from pyspark.sql import Column, DataFrame, SparkSession

from fanout.errors import InvalidView
from fanout.publisher.datasets import Dataset
from fanout.publisher.matching.base import Prim, PublisherSide
from fanout.views import View
from fanout.views.objects import ObjectPath


def directory_of(path: Column) -> Column:
    """The directory part of an object path (``/`` for objects at the root)."""
    parent = sf.regexp_extract(path, r"^(.*)/[^/]*$", 1)
    return sf.when(parent == "", sf.lit("/")).otherwise(parent)


def name_of(path: Column) -> Column:
    """The object-name part of an object path."""
    return sf.regexp_extract(path, r"/([^/]*)$", 1)


@dataclass(frozen=True)
class PathTables:
    """Broadcast table of path primitives: directory and object (null for ``.all``)."""

    prims: DataFrame

    def unpersist(self) -> None:
        """Release the cached table."""
        self.prims.unpersist()


@dataclass(frozen=True)
class PathMatcher:
    """The matcher of ``path`` datasets, keyed by object path in ``column``."""

    column: str

    def check(self, view: View) -> View:
        """Accept object paths.

        Raises:
            InvalidView: not an object path.
        """
        if not isinstance(view, ObjectPath):
            raise InvalidView(f"this dataset takes object paths, not {type(view).__name__}")
        return view

    def tables(self, spark: SparkSession, prims: Iterable[Prim]) -> PathTables | None:
        """One row per primitive: relay, primitive, directory, object name."""
        table: dict[str, list[object]] = {"_relay": [], "_prim": [], "_dir": [], "_object": []}
        for relay, prim, view in prims:
            assert isinstance(view, ObjectPath)
            table["_relay"].append(relay)
            table["_prim"].append(prim)
            table["_dir"].append(view.directory)
            table["_object"].append(view.object)
        if not table["_relay"]:
            return None
        schema = pa.schema(
            [
                ("_relay", pa.int32()),
                ("_prim", pa.int64()),
                ("_dir", pa.string()),
                ("_object", pa.string()),
            ]
        )
        return PathTables(spark.createDataFrame(pa.table(table, schema=schema)).cache())

    def change_tables(self, spark: SparkSession, prims: Iterable[Prim]) -> PathTables | None:
        """As ``tables``: changed rows are matched in Spark too."""
        return self.tables(spark, prims)

    def match(self, rows: DataFrame, tables: PathTables, keep_unmatched: bool = False) -> DataFrame:
        """Pair rows with the primitives naming their object or its directory."""
        path = sf.col(f"row.`{self.column}`")
        name = name_of(path)
        selects = sf.col("shape._object").isNull() & (name != "") | (
            name == sf.col("shape._object")
        )
        joined = rows.alias("row").join(
            sf.broadcast(tables.prims).alias("shape"),
            on=(directory_of(path) == sf.col("shape._dir")) & selects,
            how="left" if keep_unmatched else "inner",
        )
        return joined.select("_relay", "_prim", *(f"row.`{c}`" for c in rows.columns))


def path_matcher(dataset: Dataset) -> PathMatcher:
    """The matcher of a ``path`` or ``objects`` dataset, by its path column."""
    return PathMatcher(dataset.index_columns[0])


SIDE = PublisherSide(path_matcher)
"""Index ``path`` at the publisher."""

OBJECTS = PublisherSide(path_matcher, admitted=True)
"""Index ``objects`` at the publisher: PPS cells matched by their object's path."""
