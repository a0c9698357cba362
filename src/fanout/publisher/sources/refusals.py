"""Rows a source refuses: dropped from the stream, counted per dataset and logged, never fatal.

A source marks each row it refuses with a problem (a text naming where the row came from and
why: ``file:line: reason: text``, ``table 't', key 7: column 'c' is ...``) and
:func:`drop_refused` drops those rows after counting them in an observed metric of the
micro-batch. :class:`Refusals`, a listener on the session, adds each micro-batch's counts up per
dataset (the publisher's ``/metrics`` shows them) and logs the first few problems once, when
the micro-batch is done.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import pyspark.sql.functions as sf
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger(__name__)

#: Observed-metric names of the files source start with this, then the dataset's name.
FILES_PREFIX = "fanout_files:"
#: ... and those of the postgres source with this.
POSTGRES_PREFIX = "fanout_postgres:"
PREFIXES = (FILES_PREFIX, POSTGRES_PREFIX)
#: Problems logged per micro-batch and dataset at most (the count says how many there were).
LOGGED = 10


def drop_refused(
    rows: DataFrame, metric: str, problem: Column, sample: Column, first: Column
) -> DataFrame:
    """Drop the rows with a problem, counting them in an observed metric named ``metric``.

    Args:
        rows: the stream.
        metric: one of ``PREFIXES`` followed by the dataset's name.
        problem: non-null on a refused row.
        sample: what the log says of a refused row.
        first: orders refused rows: the smallest's sample is the metric's ``sample``.
    """
    bad = problem.isNotNull()
    observed = rows.observe(
        metric,
        sf.count_if(bad).alias("rejected"),
        sf.min_by(sample, sf.when(bad, first)).alias("sample"),
        sf.slice(sf.collect_list(sf.when(bad, sample)), 1, LOGGED).alias("samples"),
    )
    return observed.where(~bad)


class Refusals(StreamingQueryListener):
    """Counts and logs the rows sources refused, from each micro-batch's observed metrics.

    Attributes:
        counts: dataset -> rows refused since this listener was registered.
        samples: dataset -> the last micro-batch's first refused row, as the source spelled it.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.samples: dict[str, str] = {}
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to count yet."""

    def onQueryProgress(self, event: Any) -> None:
        """Add this micro-batch's refusals and log them."""
        progress = event.progress
        for name, row in progress.observedMetrics.items():
            prefix = next((p for p in PREFIXES if name.startswith(p)), None)
            if prefix is not None and row["rejected"]:
                samples = row.asDict().get("samples")
                dataset = name.removeprefix(prefix)
                self.add(dataset, progress.batchId, row["rejected"], row["sample"], samples)

    def onQueryTerminated(self, event: Any) -> None:
        """Counts stay: they describe the data, not the query."""

    def add(
        self,
        dataset: str,
        batch_id: int,
        rejected: int,
        sample: str | None,
        samples: list[str] | None = None,
    ) -> None:
        """Record ``rejected`` rows of ``dataset`` in micro-batch ``batch_id``, and log them."""
        with self._lock:
            self.counts[dataset] = self.counts.get(dataset, 0) + rejected
            if sample is not None:
                self.samples[dataset] = sample
        shown = list(samples or ([] if sample is None else [sample]))
        more = f" (and {rejected - len(shown)} more)" if rejected > len(shown) else ""
        log.warning(
            "dataset %s, batch %d: refused %d row(s)%s: %s",
            dataset,
            batch_id,
            rejected,
            more,
            "; ".join(shown),
        )


_LISTENERS: weakref.WeakKeyDictionary[SparkSession, Refusals] = weakref.WeakKeyDictionary()
_LISTENERS_LOCK = threading.Lock()


def refusals(spark: SparkSession) -> Refusals:
    """The session's :class:`Refusals` listener, registered with it on first use."""
    with _LISTENERS_LOCK:
        listener = _LISTENERS.get(spark)
        if listener is None:
            listener = Refusals()
            spark.streams.addListener(listener)
            _LISTENERS[spark] = listener
        return listener


def stop_refusals(spark: SparkSession) -> None:
    """Unregister the session's :class:`Refusals` listener, if it has one (a publisher's stop).

    It hears every query's progress, each event a call into Python converted field by field;
    queued behind busy micro-batches, they held ``spark.stop()`` past 20 s (a publisher of five
    queries, ``tests/integration/test_tiers.py``), as the queries' own ``ProgressLog`` did.
    """
    with _LISTENERS_LOCK:
        listener = _LISTENERS.pop(spark, None)
    if listener is not None:
        spark.streams.removeListener(listener)
