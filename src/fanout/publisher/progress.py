"""What a micro-batch took: Spark's own account of it (``ProgressLog``) and the wall-clock time
of each of the pipeline's stages (``StageClock``), both logged at INFO level."""

from __future__ import annotations

import json
import logging
import time

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

log = logging.getLogger(__name__)


class ProgressLog(StreamingQueryListener):
    """Logs Spark's own account of each micro-batch of one query (INFO), beside the stages.

    One line per micro-batch: ``<dataset> progress batch N: {"durationMs": {...}, ...}``, where
    ``durationMs`` splits the micro-batch into Spark's phases (``triggerExecution`` is all of it;
    ``addBatch`` is the part in ``foreachBatch``, whose stages the pipeline logs itself).
    """

    def __init__(self, dataset: str, query_name: str) -> None:
        self.dataset = dataset
        self.query_name = query_name

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 (Spark's name)
        """Nothing to log."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        """Log the micro-batch's durations, rows and state store figures."""
        progress = event.progress
        if progress.name != self.query_name or not log.isEnabledFor(logging.INFO):
            return
        state = [
            {
                "rows": op.numRowsTotal,
                "commitMs": op.commitTimeMs,
                "memoryBytes": op.memoryUsedBytes,
            }
            for op in progress.stateOperators
        ]
        summary = {
            "durationMs": progress.durationMs,
            "numInputRows": progress.numInputRows,
            "state": state,
        }
        log.info("%s progress batch %d: %s", self.dataset, progress.batchId, json.dumps(summary))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        """Nothing to log."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        """Nothing to log."""


class StageClock:
    """Wall-clock milliseconds spent in each named stage of a micro-batch."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        """Close ``stage`` at now."""
        now = time.perf_counter()
        self.stages[stage] = (now - self._last) * 1e3
        self._last = now

    def __str__(self) -> str:
        return " ".join(f"{name} {ms:.0f} ms" for name, ms in self.stages.items())
