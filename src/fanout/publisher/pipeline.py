"""The publisher's Spark Structured Streaming pipeline, one per dataset.

source -> latest state per key (Spark state store) -> per micro-batch: match changed rows against
every relay's primitives, log them, snapshot fresh primitives, build one batch per relay -> the
control plane sends them (the steps: ``publisher.microbatch``). Per-subscriber work never happens
here; it scales with relays, not subscribers. Reads of the state at a tick:
``publisher.reads``; the Spark session: ``publisher.spark``; what each micro-batch took:
``publisher.progress``.

The pipeline owns a *state directory*: Spark's checkpoint plus ``stream.json``, which fixes the
stream's epoch and the simulation's clock origin so a restart from the checkpoint continues the
same stream (same epoch, seq = Spark's batch id continues, simulation time continues).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from fanout.errors import BadRequest
from fanout.publisher import streams
from fanout.publisher.busconnector import BusConnector
from fanout.publisher.datasets import Dataset, IngestSource
from fanout.publisher.delivery import BatchSink, Checkouts, Stamp, build_batches
from fanout.publisher.listener import listener
from fanout.publisher.log import BatchLog
from fanout.publisher.matching import matcher_for, side_of
from fanout.publisher.microbatch import (
    MatchTableCache,
    advance,
    committed_snapshots,
    log_changes,
    match_changes,
    mirrored,
    snapshots,
)
from fanout.publisher.mirror import MAX_ROWS, Mirror
from fanout.publisher.objects import Admission
from fanout.publisher.progress import ProgressLog, StageClock, add_stages
from fanout.publisher.reads import StateStore, read_view
from fanout.publisher.relaytable import Registry
from fanout.publisher.sources.producerlog import IngestEvent, IngestLog
from fanout.publisher.state import latest_per_key, live_rows, read_state, use_state_store
from fanout.publisher.supervisor import Backoff, Restarts
from fanout.views import View
from fanout.wire.columns import to_python

log = logging.getLogger(__name__)

#: Recent micro-batches whose state can be read back (below Spark's minBatchesToRetain, 100).
HISTORY = 90


@dataclass(frozen=True)
class StreamInfo:
    """What fixes a stream's identity across restarts (``stream.json`` in the state directory)."""

    epoch: int
    start_time: float

    @classmethod
    def load_or_create(cls, state_dir: Path) -> StreamInfo:
        """Read the stream's identity, or start a new stream (new epoch, clock origin now)."""
        path = state_dir / "stream.json"
        if path.exists():
            data = json.loads(path.read_text())
            return cls(epoch=int(data["epoch"]), start_time=float(data["start_time"]))
        state_dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        info = cls(epoch=int(now * 1000), start_time=now)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"epoch": info.epoch, "start_time": info.start_time}))
        tmp.replace(path)
        return info


class Pipeline:
    """One dataset's streaming query and its per-micro-batch delivery."""

    def __init__(
        self,
        spark: SparkSession,
        dataset: Dataset,
        *,
        registry: Registry,
        sink: BatchSink,
        state_dir: Path,
        log: BatchLog,
        retention_seconds: float = 600.0,
        mirror_rows: int = MAX_ROWS,
        bus: BusConnector | None = None,
    ) -> None:
        self.spark = spark
        self.registry = registry
        self.sink = sink
        self.state_dir = state_dir
        self.checkpoint = str(state_dir / "checkpoint")
        self.dataset = dataset
        self.checkouts = Checkouts()
        self.log = log
        self._ingest: IngestLog | None = None
        #: An objects dataset's admission of producers' writes (``publisher.objects``).
        self.admission: Admission | None = None
        #: Serialises micro-batch delivery and idle snapshots (two threads, one set of checkouts).
        self._lock = threading.Lock()
        self._last_batch_at = time.monotonic()
        self.retention_seconds = retention_seconds
        self.tick = 0
        #: Micro-batches delivered since this process started (a stop waits for the next one).
        self.delivered = 0
        self.tick_time = 0.0
        self.matcher = matcher_for(dataset)
        self.store = StateStore(spark, dataset, self.matcher, self.checkpoint)
        #: Live rows in the driver, for snapshots (``publisher.mirror``): none for a kind whose
        #: rows are not those its views' language selects there (read by its matcher instead).
        rows = mirror_rows if side_of(dataset.index).mirrored else 0
        self.mirror = Mirror(dataset.key, dataset.index_columns, rows)
        self._tables = MatchTableCache(self.store)
        self.query: StreamingQuery | None = None
        self.stream = StreamInfo(epoch=0, start_time=0.0)
        #: (tick, batch id) of recent micro-batches handed to the sink, oldest first; kept
        #: shorter than Spark's retained state versions so each can still be read back.
        self.history: deque[tuple[int, int]] = deque(maxlen=HISTORY)
        #: milliseconds per stage of the last micro-batch (see ``StageClock``).
        self.last_stages: dict[str, float] = {}
        #: seconds per stage summed over every micro-batch delivered (``GET /metrics``).
        self.stage_seconds: dict[str, float] = {}
        #: Spark's own account of the micro-batches (None before ``start``).
        self.progress: ProgressLog | None = None
        #: micro-batches delivered, and the changed rows they carried, since the process started.
        self.micro_batches = 0
        self.rows_changed = 0
        #: When the query starts again after it failed (``publisher.supervisor``, ``app``).
        self.restarts = Restarts(Backoff())
        #: The subject bus this dataset's objects are published on (None: not published).
        self.bus = bus if dataset.bus is not None else None

    def start(self, trigger_seconds: float = 0.0) -> StreamingQuery:
        """Start the streaming query (returns at once; Spark runs it in the background).

        A new stream's clock starts now, once Spark is up, not when the process started.
        """
        self.stream = StreamInfo.load_or_create(self.state_dir)
        self.tick_time = self.stream.start_time
        return self._start_query(trigger_seconds)

    def restart(self, trigger_seconds: float = 0.0) -> StreamingQuery:
        """Start the query again from its checkpoint after it failed (``publisher.supervisor``).

        Spark re-runs the micro-batch the failure cut off (its offsets were not committed): the
        tick, the mirror, the log and the relays each take the re-run as the same micro-batch.
        The ingest log and the producers' admission stay as they are.
        """
        return self._start_query(trigger_seconds)

    def stop_listening(self) -> None:
        """Stop taking Spark's progress events for this query (``publisher.listener``)."""
        if self.progress is not None:
            listener(self.spark).discard(self.progress.query_name, "progress")

    def _start_query(self, trigger_seconds: float) -> StreamingQuery:
        if isinstance(self.dataset.source, IngestSource) and self._ingest is None:
            self._ingest = IngestLog(streams.ingest_log_path(self.state_dir), [self.dataset])
            if side_of(self.dataset.index).admitted:
                self.admission = Admission(self.dataset, self._ingest)
                self.admission.recover(self.spark, self.checkpoint)
        rows = streams.stream(self.spark, self.dataset, self.stream.start_time, self.state_dir)
        name = f"fanout-{self.dataset.name}"
        self.progress = ProgressLog(self.dataset.name, name)  # a restarted query's in its place
        listener(self.spark).add(name, "progress", self.progress.heard)
        writer = (
            latest_per_key(rows, self.dataset)
            .writeStream.outputMode("update")
            .option("checkpointLocation", self.checkpoint)
            .queryName(name)
            .foreachBatch(self.on_micro_batch)
        )
        if trigger_seconds > 0:
            writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
        use_state_store(self.spark, self.dataset.state_store)
        self.query = writer.start()
        return self.query

    def on_micro_batch(self, changes: DataFrame, batch_id: int) -> None:
        """Deliver one micro-batch: one stamped batch per relay (see ``publisher.microbatch``)."""
        with self._lock:
            self._deliver_micro_batch(changes, batch_id)
            self._last_batch_at = time.monotonic()
            self.delivered += 1

    def _deliver_micro_batch(self, changes: DataFrame, batch_id: int) -> None:
        clock = StageClock()
        plan = self.registry.plan(self.dataset.name)
        # Snapshots read the changes a second time; without them, caching would only cost.
        reread = any(plan.fresh.values()) and not mirrored(self.mirror, batch_id)
        if reread:
            changes = changes.persist()
        try:
            changed = match_changes(changes, self.dataset, self.matcher, self._tables.tables(plan))
            # The pipeline's tick moves only once the micro-batch is delivered: one that fails
            # is re-run from the tick before it (``restart``).
            tick, tick_time = advance(
                self.tick, self.tick_time, changed.rows, self.dataset.time_column
            )
            keys = changed.rows.column(self.dataset.key).to_numpy(zero_copy_only=False)
            clock.lap("state+match")
            stamp = Stamp(self.dataset.name, self.stream.epoch, batch_id, tick, tick_time)
            log_changes(self.log, stamp, changed.rows, self.registry.floor, self.retention_seconds)
            clock.lap("log")
            self.mirror.apply(changed.rows, batch_id)
            fresh = snapshots(self.store, self.mirror, plan, changes, batch_id)
            clock.lap("snapshot")
            batches = build_batches(
                stamp=stamp,
                key=self.dataset.key,
                columns=list(self.dataset.columns),
                relays=plan.relays,
                changed=keys,
                matched=changed.matched,
                snapshots=fresh,
                fresh=plan.fresh,
                checkouts=self.checkouts,
            )
            clock.lap("build")
            self.sink(batches)
            clock.lap("send")
            if self.bus is not None:
                self._publish_on_bus(changed.rows, batch_id)
                clock.lap("bus")
            self.registry.delivered(plan)
            self.tick, self.tick_time = tick, tick_time
            self.history.append((tick, batch_id))
        finally:
            if reread:
                changes.unpersist()
        self.last_stages = clock.stages
        add_stages(self.stage_seconds, clock.stages)
        self.micro_batches += 1
        self.rows_changed += len(keys)
        log.info(
            "%s batch %d tick %d: %d changed, %d relays; %s",
            self.dataset.name,
            batch_id,
            self.tick,
            len(keys),
            len(batches),
            clock,
        )

    def not_ready(self) -> str | None:
        """Why this dataset cannot be served yet, or None: its streaming query runs and has
        reported progress (a first micro-batch, or an idle trigger)."""
        query = self.query
        if query is None:
            return "the streaming query has not started"
        if not query.isActive:
            return "the streaming query stopped"
        if self.micro_batches == 0 and query.lastProgress is None:
            return "no micro-batch yet"
        return None

    def _publish_on_bus(self, rows: pa.Table, batch_id: int) -> None:
        """The micro-batch's changes as the database connector's messages (``docs/caches.md``);
        after a restart, the connector's table is loaded from the state before it once."""
        assert self.bus is not None

        def before() -> pa.Table:
            state = read_state(self.spark, self.checkpoint, self.dataset, batch_id - 1)
            return live_rows(state).toArrow()

        request = f"b{self.stream.epoch}.{batch_id}"
        self.bus.publish_changes(self.dataset.name, rows, request, before if batch_id else None)

    def bus_ready_if_idle(self) -> None:
        """Tell the bus connector this dataset's stream caught up, once it is idle after its
        first micro-batch (``ObjectTable.ready``)."""
        if self.bus is not None and self.micro_batches and not self._busy():
            self.bus.idle(self.dataset.name)

    def snapshot_if_idle(self, idle_for: float = 1.0) -> None:
        """Deliver fresh primitives' snapshots when no micro-batch is coming to carry them.

        A dataset whose source is quiet (an ingest dataset nobody publishes to, say) runs no
        micro-batches, so a relay acquiring a primitive would wait for its snapshot forever.
        After ``idle_for`` seconds without a micro-batch, the snapshots go out in a batch stamped
        with the last delivered seq (relays apply the snapshot part of such a batch).
        """
        if time.monotonic() - self._last_batch_at < idle_for or self._busy():
            return
        plan = self.registry.plan(self.dataset.name)
        fresh = {relay: prims for relay, prims in plan.fresh.items() if prims}
        if not fresh:
            return
        with self._lock:
            tick, seq = self.history[-1] if self.history else (self.tick, -1)
            cut = committed_snapshots(self.store, self.mirror, plan, seq) if seq >= 0 else {}
            stamp = Stamp(self.dataset.name, self.stream.epoch, seq, tick, self.tick_time)
            batches = build_batches(
                stamp=stamp,
                key=self.dataset.key,
                columns=list(self.dataset.columns),
                relays=frozenset(fresh),
                changed=np.empty(0, dtype=np.int64),
                matched={},
                snapshots=cut,
                fresh=fresh,
                checkouts=self.checkouts,
            )
            self.sink(batches)
            self.registry.delivered(plan)
        log.info("idle %s: snapshots for %d relays at seq %d", self.dataset.name, len(fresh), seq)

    def _busy(self) -> bool:
        # Data waiting or a trigger running: a micro-batch is coming and will carry snapshots.
        # So is one while the query is still starting ("Initializing sources"), when neither
        # flag is set yet; snapshotting then would send relays an empty snapshot at seq -1.
        if self.query is None:
            return True
        status = self.query.status
        starting = str(status["message"]).startswith("Initializing")
        return bool(starting or status["isDataAvailable"] or status["isTriggerActive"])

    def publish(self, upserts: dict[str, np.ndarray], deletes: np.ndarray) -> tuple[int, int]:
        """Append a producer's events to this ingest dataset's log (durable when it returns).

        Upserts are appended before deletes, in row order.

        Returns:
            The offsets (first, last) the events got.

        Raises:
            BadRequest: the dataset is not an ingest dataset, or an event does not fit its schema.
        """
        if not isinstance(self.dataset.source, IngestSource):
            raise BadRequest(
                f"dataset {self.dataset.name!r} is not fed by publish (its source is"
                f" {type(self.dataset.source).__name__})"
            )
        if self._ingest is None:
            raise BadRequest(f"dataset {self.dataset.name!r} is not started yet; retry")
        if self.admission is not None:
            return self.admission.publish(_rows(upserts), deletes.tolist())
        key = self.dataset.key
        events = [IngestEvent(row[key], row) for row in _rows(upserts)]
        events += [IngestEvent(value, None) for value in deletes.tolist()]
        if not events:
            raise BadRequest("publish: no upserts and no deletes")
        offsets = self._ingest.append(self.dataset.name, events)
        if self.bus is not None:  # the caches see it at once (``bustable`` rule 6)
            rows = [event.values or {key: event.key} for event in events]
            deleted = [event.values is None for event in events]
            self.bus.publish_written(self.dataset.name, rows, list(offsets), deleted)
        return offsets[0], offsets[-1]

    def read(self, view: View, tick: int, timeout: float) -> tuple[int, pa.Table]:
        """The authoritative rows inside ``view`` as of ``tick`` (-1: the latest tick); see
        ``reads.read_view``.

        Raises:
            TimeoutError, InvalidView, BadRequest: see ``reads.read_view``.
        """
        return read_view(self.store, self.history, view, tick, timeout)


def _rows(columns: dict[str, np.ndarray]) -> list[dict[str, object]]:
    names = list(columns)
    if not names:
        return []
    return [
        dict(zip(names, values, strict=True))
        for values in zip(*(to_python(columns[n]) for n in names), strict=True)
    ]
