"""What a micro-batch took: Spark's own account of it (``ProgressLog``) and the wall-clock time
of each of the pipeline's stages (``StageClock``), both logged at INFO level."""

from __future__ import annotations

import json
import logging
import time

from pyspark.sql.streaming.listener import StreamingQueryProgress

log = logging.getLogger(__name__)


class ProgressLog:
    """Logs Spark's own account of each micro-batch of one query (INFO), beside the stages: a
    handler of the session's one listener (``publisher.listener``) for that query's events.

    One line per micro-batch: ``<dataset> progress batch N: {"durationMs": {...}, ...}``, where
    ``durationMs`` splits the micro-batch into Spark's phases (``triggerExecution`` is all of it;
    ``addBatch`` is the part in ``foreachBatch``, whose stages the pipeline logs itself).
    """

    def __init__(self, dataset: str, query_name: str) -> None:
        self.dataset = dataset
        self.query_name = query_name
        #: Seconds of each of Spark's phases (``durationMs``' names) summed over every
        #: micro-batch reported, with ``state`` the state operators' update and commit time
        #: (summed over their tasks), for ``GET /metrics``.
        self.phase_seconds: dict[str, float] = {}
        #: The shortest micro-batch with rows after the first (Spark's ``triggerExecution``,
        #: ms; None before one): the pipeline's own floor, which the demo prints lag beside.
        self.fastest_ms: float | None = None

    def heard(self, progress: StreamingQueryProgress) -> None:
        """Log the micro-batch's durations, rows and state store figures."""
        totals = self.phase_seconds
        for phase, ms in progress.durationMs.items():
            totals[phase] = totals.get(phase, 0.0) + ms / 1e3
        state_ms = sum(op.allUpdatesTimeMs + op.commitTimeMs for op in progress.stateOperators)
        totals["state"] = totals.get("state", 0.0) + state_ms / 1e3
        whole = progress.durationMs.get("triggerExecution")
        if progress.batchId > 0 and progress.numInputRows > 0 and whole is not None:
            self.fastest_ms = whole if self.fastest_ms is None else min(self.fastest_ms, whole)
        if not log.isEnabledFor(logging.INFO):
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


def add_stages(totals: dict[str, float], stages: dict[str, float]) -> None:
    """Add one micro-batch's stage milliseconds to running totals in seconds."""
    for stage, ms in stages.items():
        totals[stage] = totals.get(stage, 0.0) + ms / 1e3
