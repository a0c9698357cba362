"""Rows a source refuses: dropped from the stream, counted per dataset and logged, never fatal.

A source marks each row it refuses with a problem (a text naming where the row came from and
why: ``file:line: reason: text``, ``table 't', key 7: column 'c' is ...``) and
:func:`drop_refused` drops those rows after counting them in an observed metric of the
micro-batch. :class:`Refusals`, a handler of the session's listener (``publisher.listener``),
adds each micro-batch's counts up per dataset (the publisher's ``/metrics`` shows them) and logs
the first few problems once, when the micro-batch is done.
"""

from __future__ import annotations

import logging
import threading
import weakref

import pyspark.sql.functions as sf
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress

from fanout.publisher.listener import SessionProgress, listener

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


class Refusals:
    """Counts and logs the rows sources refused, from each micro-batch's observed metrics (of
    every query of the session).

    Attributes:
        counts: dataset -> rows refused since this listener was registered.
        samples: dataset -> the last micro-batch's first refused row, as the source spelled it.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.samples: dict[str, str] = {}
        self._lock = threading.Lock()

    def heard(self, progress: StreamingQueryProgress) -> None:
        """Add this micro-batch's refusals and log them."""
        for name, row in progress.observedMetrics.items():
            prefix = next((p for p in PREFIXES if name.startswith(p)), None)
            if prefix is not None and row["rejected"]:
                samples = row.asDict().get("samples")
                dataset = name.removeprefix(prefix)
                self.add(dataset, progress.batchId, row["rejected"], row["sample"], samples)

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


#: Each session listener's refusals: a listener stopped and made anew counts anew.
_REFUSALS: weakref.WeakKeyDictionary[SessionProgress, Refusals] = weakref.WeakKeyDictionary()
_REFUSALS_LOCK = threading.Lock()


def refusals(spark: SparkSession) -> Refusals:
    """The session's :class:`Refusals`, hearing every query's progress from first use until
    the session's listener is stopped (``listener.stop_listening``, a publisher's stop)."""
    session = listener(spark)
    with _REFUSALS_LOCK:
        found = _REFUSALS.get(session)
        if found is None:
            found = _REFUSALS[session] = Refusals()
            session.add(None, "refusals", found.heard)
        return found
