"""What every matcher offers the pipeline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession

from fanout.views import View

#: (relay, primitive id, view): one upstream primitive of one relay.
Prim = tuple[int, int, View]


class MatchTables(Protocol):
    """Broadcast tables built from primitives; cached by the pipeline until primitives change."""

    def unpersist(self) -> None:
        """Release cached tables."""


class Matcher(Protocol):
    """Pairs rows with the relays whose primitives hold them.

    ``tables`` builds the matcher's own kind of :class:`MatchTables`; ``match`` takes only what
    the same matcher built (typed ``Any`` here because each matcher has its own tables).
    """

    def check(self, view: View) -> View:
        """Validate a view for this index (a relay's ``Acquire``); returns the primitive to hold.

        Raises:
            InvalidView: the view is of another language, or does not fit the dataset.
        """

    def tables(self, spark: SparkSession, prims: Iterable[Prim]) -> Any:
        """Broadcast tables for ``prims`` (None when there are none)."""

    def match(self, rows: DataFrame, tables: Any, keep_unmatched: bool = False) -> DataFrame:
        """``_relay, _prim`` + the rows' columns, once per (row, primitive) pair."""
