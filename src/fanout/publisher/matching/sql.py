"""Matching rows against SQL primitives: column boxes over one table (``views.sql.SqlBox``).

Each primitive compiles to a Spark predicate (``views.sql.to_spark``); a row is paired with every
primitive whose predicate holds, in one pass: an array of ``when(predicate, (relay, prim))``,
nulls filtered out, exploded. The cost grows with rows x primitives, which suits the tens to
hundreds of SQL primitives relays hold; predicates over ranges of one column would be the place
to add bucketing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyspark.sql.functions as sf
from pyspark.sql import DataFrame, SparkSession

from fanout.errors import InvalidView
from fanout.publisher.datasets import Dataset
from fanout.publisher.matching.base import Prim, PublisherSide
from fanout.views import View
from fanout.views.sql import Sql, SqlBox, to_spark


@dataclass(frozen=True)
class SqlTables:
    """The primitives to match (compiled into the query itself, no broadcast table needed)."""

    prims: tuple[tuple[int, int, SqlBox], ...]

    def unpersist(self) -> None:
        """Nothing is cached."""


@dataclass(frozen=True)
class SqlMatcher:
    """The matcher of ``sql`` datasets: the dataset is the table ``table``."""

    table: str
    columns: frozenset[str]
    #: Bytes columns: matched by NULL or not only (``views.sql.match``, rule 5), lower case.
    unbounded: frozenset[str] = frozenset()

    def check(self, view: View) -> View:
        """Accept a primitive of this table, or a query reading it (its primitive for this table).

        Raises:
            InvalidView: another language, another table, or a column the table lacks.
        """
        if isinstance(view, Sql):
            mine = [prim for prim in view.primitives() if prim.table == self.table]
            if not mine:
                raise InvalidView(f"the query does not read table {self.table!r}: {view.text}")
            view = mine[0]
        if not isinstance(view, SqlBox):
            raise InvalidView(f"this dataset takes SQL views, not {type(view).__name__}")
        if view.table != self.table:
            raise InvalidView(f"the primitive is of table {view.table!r}, not {self.table!r}")
        used = set(view.columns or ()) | {column for box in view.boxes for column, _ in box.ranges}
        unknown = sorted(used - self.columns)
        if unknown:
            raise InvalidView(f"table {self.table!r} has no column(s) {', '.join(unknown)}")
        return view

    def tables(self, spark: SparkSession, prims: Iterable[Prim]) -> SqlTables | None:
        """Collect the primitives (validated at acquire time)."""
        boxes = tuple(
            (relay, prim, view) for relay, prim, view in prims if isinstance(view, SqlBox)
        )
        return SqlTables(boxes) if boxes else None

    def change_tables(self, spark: SparkSession, prims: Iterable[Prim]) -> SqlTables | None:
        """As ``tables``: changed rows are matched in Spark too."""
        return self.tables(spark, prims)

    def match(self, rows: DataFrame, tables: SqlTables, keep_unmatched: bool = False) -> DataFrame:
        """Pair rows with the primitives whose predicates hold."""
        pairs = sf.array(
            *(
                sf.when(
                    to_spark(box, self.unbounded),
                    sf.struct(
                        sf.lit(relay).cast("int").alias("_relay"),
                        sf.lit(prim).cast("long").alias("_prim"),
                    ),
                )
                for relay, prim, box in tables.prims
            )
        )
        explode = sf.explode_outer if keep_unmatched else sf.explode
        hits = sf.filter(pairs, lambda pair: pair.isNotNull())
        return rows.withColumn("_pair", explode(hits)).select(
            sf.col("_pair._relay").alias("_relay"),
            sf.col("_pair._prim").alias("_prim"),
            *rows.columns,
        )


def sql_matcher(dataset: Dataset) -> SqlMatcher:
    """The matcher of an ``sql`` dataset: its table, columns and bytes columns."""
    blobs = frozenset(c.lower() for c, kind in dataset.schema.items() if kind == "bytes")
    return SqlMatcher(dataset.name, frozenset(dataset.schema), blobs)


SIDE = PublisherSide(sql_matcher)
"""Index ``sql`` at the publisher."""
