"""What every matcher offers the pipeline, and a dataset kind's part at the publisher."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession

from fanout.publisher.datasets import Dataset
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

    def change_tables(self, spark: SparkSession, prims: Iterable[Prim]) -> Any:
        """Tables for a micro-batch's changed rows (``matching.local``'s to match them in the
        driver, else ``tables``)."""

    def match(self, rows: DataFrame, tables: Any, keep_unmatched: bool = False) -> DataFrame:
        """``_relay, _prim`` + the rows' columns, once per (row, primitive) pair."""


@dataclass(frozen=True)
class PublisherSide:
    """A dataset kind's part at the publisher (``views.registry.Kind.publisher`` names it).

    Attributes:
        matcher: the matcher of one dataset of the kind.
        admitted: producers' writes pass ``publisher.admission`` (objects' create and delete).
        mirrored: snapshots may be cut from the driver's copy of the rows, which picks them by
            the views' language (``publisher.mirror``); if not, the matcher reads them from the
            state store.
    """

    matcher: Callable[[Dataset], Matcher]
    admitted: bool = False
    mirrored: bool = True
