"""The publisher's datasets as the control plane sees them: one pipeline each.

The control plane never touches Spark itself; it asks this service to check a view against a
dataset's index (a relay's ``Acquire``) and to read the authoritative state (``ReadState``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fanout.errors import InvalidView
from fanout.metrics import Sample
from fanout.publisher.pipeline import Pipeline
from fanout.publisher.replay import LoggedStream
from fanout.publisher.sources.refusals import refusals
from fanout.views import View
from fanout.wire.messages import Batch, DatasetInfo, Knowledge

#: How long a read-state request may wait for the state to reach the tick asked for.
READ_TIMEOUT = 30.0


class DatasetService:
    """Pipelines by dataset name."""

    def __init__(self, pipelines: dict[str, Pipeline]) -> None:
        self.pipelines = pipelines

    def infos(self) -> list[DatasetInfo]:
        """What relays receive in the ``Catalog``."""
        return [pipeline.dataset.info() for pipeline in self.pipelines.values()]

    def pipeline(self, name: str) -> Pipeline:
        """The pipeline of dataset ``name``.

        Raises:
            InvalidView: no such dataset.
        """
        pipeline = self.pipelines.get(name)
        if pipeline is None:
            serving = ", ".join(self.pipelines) or "none"
            raise InvalidView(f"unknown dataset {name!r} (serving: {serving})")
        return pipeline

    def samples(self) -> list[Sample]:
        """Each dataset's figures for ``GET /metrics`` (``fanout.metrics``)."""
        out = []
        for name, pipeline in self.pipelines.items():
            labels = {"dataset": name}
            seq = pipeline.history[-1][1] if pipeline.history else -1
            refused = refusals(pipeline.spark).counts.get(name, 0)
            out += [
                Sample(
                    "publisher_rows_refused",
                    "counter",
                    "Source rows refused (malformed, or a value that does not fit its column).",
                    refused,
                    labels,
                ),
                Sample(
                    "publisher_micro_batches",
                    "counter",
                    "Micro-batches delivered since the process started.",
                    pipeline.micro_batches,
                    labels,
                ),
                Sample(
                    "publisher_rows_changed",
                    "counter",
                    "Changed rows those micro-batches carried.",
                    pipeline.rows_changed,
                    labels,
                ),
                Sample(
                    "publisher_query_restarts",
                    "counter",
                    "Times the dataset's streaming query was started again after it failed.",
                    pipeline.restarts.total,
                    labels,
                ),
                Sample(
                    "publisher_query_running",
                    "gauge",
                    "1 while the dataset's streaming query runs; 0 while it waits to restart.",
                    int(pipeline.query is not None and pipeline.query.isActive),
                    labels,
                ),
                Sample("publisher_seq", "gauge", "Seq of the last micro-batch.", seq, labels),
                Sample(
                    "publisher_tick",
                    "gauge",
                    "Tick of the last micro-batch.",
                    pipeline.tick,
                    labels,
                ),
            ]
            out.append(
                Sample(
                    "publisher_mirror_rows",
                    "gauge",
                    "Live rows in the driver's snapshot mirror (0: not loaded).",
                    pipeline.mirror.rows,
                    labels,
                )
            )
            out += [
                Sample(
                    "publisher_stage_ms",
                    "gauge",
                    "Milliseconds each stage of the last micro-batch took.",
                    ms,
                    {"dataset": name, "stage": stage},
                )
                for stage, ms in pipeline.last_stages.items()
            ]
            out += [
                Sample(
                    "publisher_stage_seconds",
                    "counter",
                    "Seconds each stage of the pipeline took, summed over its micro-batches.",
                    seconds,
                    {"dataset": name, "stage": stage},
                )
                for stage, seconds in list(pipeline.stage_seconds.items())
            ]
            fastest = pipeline.progress.fastest_ms if pipeline.progress else None
            if fastest is not None:
                out.append(
                    Sample(
                        "publisher_micro_batch_fastest_seconds",
                        "gauge",
                        "The shortest micro-batch with rows after the first (Spark's"
                        " triggerExecution): the pipeline's own floor under a tick's latency.",
                        fastest / 1e3,
                        labels,
                    )
                )
            phases = pipeline.progress.phase_seconds if pipeline.progress else {}
            out += [
                Sample(
                    "publisher_spark_phase_seconds",
                    "counter",
                    "Seconds each of Spark's phases of a micro-batch took (its durationMs;"
                    " state: the state operators' update and commit time), summed.",
                    seconds,
                    {"dataset": name, "phase": phase},
                )
                for phase, seconds in list(phases.items())
            ]
        return out + self._bus_samples()

    def _bus_samples(self) -> list[Sample]:
        """The bus connector's counts (``publisher.busconnector``), if there is one."""
        bus = next((p.bus for p in self.pipelines.values() if p.bus is not None), None)
        if bus is None:
            return []
        counts = bus.counters
        described = {
            "published": "Messages published on the subject bus.",
            "loads": "LOAD requests answered.",
            "queries": "QUERY requests answered.",
            "malformed": "Malformed bus requests dropped.",
            "unknown_type": "Bus requests for a type not served, dropped.",
            "not_ready": "Bus requests dropped before the type's stream caught up.",
            "late": "Micro-batches whose messages did not reach the bus in time.",
        }
        return [
            Sample(f"publisher_bus_{name}", "counter", text, getattr(counts, name), {})
            for name, text in described.items()
        ]

    def check(self, name: str, view: View) -> View:
        """The primitive a relay may hold for ``view`` of dataset ``name``.

        Raises:
            InvalidView: unknown dataset, or a view that does not fit its index.
        """
        return self.pipeline(name).matcher.check(view)

    def replay(self, name: str, epoch: int, after: int) -> list[Batch]:
        """The logged batches of ``name`` after seq ``after``, as batches for a resuming relay.

        Raises:
            InvalidView: unknown dataset.
            LogGap: another epoch, or seqs no longer (or never) in the log.
        """
        return self._logged(name).replay(epoch, after)

    def knowledge(self, name: str, epoch: int, req: int, first: int, last: int) -> list[Knowledge]:
        """Logged micro-batches ``first..last`` of ``name``, for a curious relay.

        Raises:
            InvalidView: unknown dataset; BadRequest/LogGap: see ``replay.knowledge``.
        """
        return self._logged(name).knowledge(req, epoch, first, last)

    def _logged(self, name: str) -> LoggedStream:
        pipeline = self.pipeline(name)
        return LoggedStream(pipeline.log, pipeline.dataset, pipeline.stream.epoch)

    def publish(
        self, name: str, upserts: dict[str, np.ndarray], deletes: np.ndarray
    ) -> tuple[int, int]:
        """Append a producer's events durably to ingest dataset ``name`` (blocking).

        Raises:
            InvalidView: unknown dataset. BadRequest: not an ingest dataset, or bad events.
        """
        return self.pipeline(name).publish(upserts, deletes)

    def read(self, name: str, view: View, tick: int) -> tuple[int, pa.Table]:
        """The authoritative rows of ``name`` inside ``view`` as of ``tick`` (blocking).

        Raises:
            InvalidView, BadRequest, TimeoutError: see ``Pipeline.read``.
        """
        return self.pipeline(name).read(view, tick, READ_TIMEOUT)
