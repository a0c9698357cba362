"""Matching rows against MQTT topic-filter primitives (MQTT 3.1.1 / 5.0 section 4.7).

Filters are bucketed by their first level: a filter whose first level is a name only meets topics
with that first level, found by a broadcast equi-join; filters starting with a wildcard (few, by
nature) are matched by a broadcast nested-loop join. The exact refine is a regular expression per
filter: ``+`` is one level (possibly empty), a trailing ``#`` is any number of levels including
the parent's, and topics starting with ``$`` are not matched by filters starting with a wildcard.
Rows whose topic is no topic name are matched by no filter.
Shared subscriptions (``$share/group/filter``) are matched by their filter: which member of a group
gets a message is decided downstream.
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
from fanout.views.topic import TopicFilter
from fanout.views.topic.syntax import MAX_TOPIC_BYTES, NOT_IN_NAMES

_SPECIAL = set("\\^$.|?*+()[]{}")


def filter_regex(topic_filter: str) -> str:
    """A Java regular expression matching exactly the topics ``topic_filter`` matches."""
    levels = topic_filter.split("/")
    guard = r"(?!\$)" if levels[0] in ("+", "#") else ""
    if levels[-1] == "#":
        head = levels[:-1]
        if not head:
            return f"^{guard}.*$"
        return f"^{guard}{_levels(head)}(/.*)?$"
    return f"^{guard}{_levels(levels)}$"


def _levels(levels: list[str]) -> str:
    return "/".join("[^/]*" if level == "+" else _quote(level) for level in levels)


def _quote(level: str) -> str:
    return "".join("\\" + c if c in _SPECIAL else c for c in level)


@dataclass(frozen=True)
class TopicTables:
    """Broadcast tables of filters: by literal first level, and wildcard-first ones."""

    bucketed: DataFrame
    wide: DataFrame
    has_wide: bool

    def unpersist(self) -> None:
        """Release the cached tables."""
        self.bucketed.unpersist()
        self.wide.unpersist()


@dataclass(frozen=True)
class TopicMatcher:
    """The matcher of ``topic`` datasets, keyed by topic name in ``column``."""

    column: str

    def check(self, view: View) -> View:
        """Accept topic filters.

        Raises:
            InvalidView: not a topic filter.
        """
        if not isinstance(view, TopicFilter):
            raise InvalidView(f"this dataset takes MQTT topic filters, not {type(view).__name__}")
        return view

    def tables(self, spark: SparkSession, prims: Iterable[Prim]) -> TopicTables | None:
        """Split filters into first-level buckets and wildcard-first ones."""
        bucketed: dict[str, list[object]] = {"_relay": [], "_prim": [], "_first": [], "_regex": []}
        wide: dict[str, list[object]] = {"_relay": [], "_prim": [], "_regex": []}
        for relay, prim, view in prims:
            assert isinstance(view, TopicFilter)
            text = view.topic_filter
            first = text.split("/", 1)[0]
            table = wide if first in ("+", "#") else bucketed
            table["_relay"].append(relay)
            table["_prim"].append(prim)
            table["_regex"].append(filter_regex(text))
            if table is bucketed:
                table["_first"].append(first)
        if not bucketed["_relay"] and not wide["_relay"]:
            return None
        return TopicTables(
            bucketed=spark.createDataFrame(pa.table(bucketed, schema=_schema(True))).cache(),
            wide=spark.createDataFrame(pa.table(wide, schema=_schema(False))).cache(),
            has_wide=bool(wide["_relay"]),
        )

    def change_tables(self, spark: SparkSession, prims: Iterable[Prim]) -> TopicTables | None:
        """As ``tables``: changed rows are matched in Spark too."""
        return self.tables(spark, prims)

    def match(
        self, rows: DataFrame, tables: TopicTables, keep_unmatched: bool = False
    ) -> DataFrame:
        """Pair rows with the filters matching their topic."""
        topic = sf.col(f"row.`{self.column}`")
        first = sf.substring_index(topic, "/", 1)
        joined = rows.alias("row").join(
            sf.broadcast(tables.bucketed).alias("shape"),
            on=(first == sf.col("shape._first")) & _rlike(topic) & _named(topic),
            how="left" if keep_unmatched else "inner",
        )
        result = joined.select("_relay", "_prim", *(f"row.`{c}`" for c in rows.columns))
        if not tables.has_wide:
            return result
        wide = (
            rows.alias("row")
            .crossJoin(sf.broadcast(tables.wide))
            .where(_rlike(topic) & _named(topic))
            .select("_relay", "_prim", *(f"row.`{c}`" for c in rows.columns))
        )
        return result.unionByName(wide)


def _rlike(topic: Column) -> Column:
    # The pattern is a column (one per filter); Spark caches the last compiled pattern.
    return sf.regexp_like(topic, sf.col("_regex"))


def _named(topic: Column) -> Column:
    """Whether ``topic`` is a topic name (``views.topic.syntax.topic_levels``): other rows (an
    empty topic, a wildcard in it...) are matched by no filter, as at a relay and in the mirror
    (``#`` and ``+`` would otherwise match ``""``)."""
    size = sf.octet_length(topic)
    return (size > 0) & (size <= MAX_TOPIC_BYTES) & ~sf.regexp_like(topic, sf.lit(NOT_IN_NAMES))


def _schema(bucketed: bool) -> pa.Schema:
    fields = [("_relay", pa.int32()), ("_prim", pa.int64())]
    if bucketed:
        fields.append(("_first", pa.string()))
    return pa.schema([*fields, ("_regex", pa.string())])


def topic_matcher(dataset: Dataset) -> TopicMatcher:
    """The matcher of a ``topic`` dataset, by its topic column."""
    return TopicMatcher(dataset.index_columns[0])


SIDE = PublisherSide(topic_matcher)
"""Index ``topic`` at the publisher."""
