"""The ``exact`` kind at the publisher: rows paired with the primitives naming their topic, by an
equi-join with a broadcast table of the names."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyspark.sql.functions as sf
from pyspark.sql import DataFrame, SparkSession

from fanout.errors import InvalidView
from fanout.publisher.datasets import Dataset
from fanout.publisher.matching.base import Prim, PublisherSide
from fanout.views import View
from fanout.views.topic import TopicFilter

_SCHEMA = pa.schema([("_relay", pa.int32()), ("_prim", pa.int64()), ("_name", pa.string())])


@dataclass(frozen=True)
class NameTables:
    """The primitives' names, broadcast."""

    names: DataFrame

    def unpersist(self) -> None:
        """Release the cached table."""
        self.names.unpersist()


@dataclass(frozen=True)
class ExactMatcher:
    """The matcher of ``exact`` datasets, keyed by topic name in ``column``."""

    column: str

    def check(self, view: View) -> View:
        """Accept topic names: filters without wildcards or ``$share``.

        Raises:
            InvalidView: anything else.
        """
        if not isinstance(view, TopicFilter) or view.filter != view.topic_filter:
            raise InvalidView(f"this dataset takes topic names, not {view}")
        if any(level in ("+", "#") for level in view.levels):
            raise InvalidView(f"this dataset takes topic names, not filters: {view}")
        return view

    def tables(self, spark: SparkSession, prims: Iterable[Prim]) -> NameTables | None:
        """One row per primitive: relay, primitive, name."""
        rows = [(relay, prim, view) for relay, prim, view in prims]
        if not rows:
            return None
        table = {
            "_relay": [relay for relay, _, _ in rows],
            "_prim": [prim for _, prim, _ in rows],
            "_name": [view.topic_filter for _, _, view in rows if isinstance(view, TopicFilter)],
        }
        return NameTables(spark.createDataFrame(pa.table(table, schema=_SCHEMA)).cache())

    def change_tables(self, spark: SparkSession, prims: Iterable[Prim]) -> NameTables | None:
        """As ``tables``."""
        return self.tables(spark, prims)

    def match(self, rows: DataFrame, tables: NameTables, keep_unmatched: bool = False) -> DataFrame:
        """Pair rows with the primitives naming their topic."""
        joined = rows.alias("row").join(
            sf.broadcast(tables.names).alias("name"),
            on=sf.col(f"row.`{self.column}`") == sf.col("name._name"),
            how="left" if keep_unmatched else "inner",
        )
        return joined.select("_relay", "_prim", *(f"row.`{c}`" for c in rows.columns))


def exact_matcher(dataset: Dataset) -> ExactMatcher:
    """The matcher of an ``exact`` dataset, by its topic column."""
    return ExactMatcher(dataset.index_columns[0])


SIDE = PublisherSide(exact_matcher, mirrored=False)
"""Index ``exact`` at the publisher."""
