"""The publisher's Spark Structured Streaming pipeline (DESIGN.md section 4).

source -> latest state per key (Spark state store) -> per micro-batch: match changed rows against
every relay's primitives, snapshot fresh primitives, build one batch per relay -> the control plane
sends them. Per-subscriber work never happens here; it scales with relays, not subscribers.

The pipeline owns a *state directory*: Spark's checkpoint plus ``stream.json``, which fixes the
stream's epoch and the simulation's clock origin so a restart from the checkpoint continues the
same stream (same epoch, seq = Spark's batch id continues, simulation time continues).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from fanout.errors import BadRequest
from fanout.publisher import streams
from fanout.publisher.datasets import DELETED, VERSION, Dataset, IngestSource
from fanout.publisher.delivery import (
    BatchSink,
    Checkouts,
    Stamp,
    build_batches,
    rows_by_relay,
    to_columns,
)
from fanout.publisher.log import BatchLog, LogEntry, Retention
from fanout.publisher.matching import MatchTables, matcher_for
from fanout.publisher.mirror import MAX_ROWS, Mirror
from fanout.publisher.registry import Plan, Registry
from fanout.publisher.sources.ingestlog import IngestEvent, IngestLog
from fanout.publisher.sources.simulation import SimulationDataSource
from fanout.publisher.state import current_state, latest_per_key, live_rows, read_state
from fanout.views import View
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Batch

log = logging.getLogger(__name__)

#: Recent micro-batches whose state can be read back (below Spark's minBatchesToRetain, 100).
HISTORY = 90
#: Retention is applied to the log every this many micro-batches.
RETENTION_EVERY = 50


#: Spark settings of a publisher on a cluster (spark-submit may add its own).
CLUSTER = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}
#: Spark settings of an embedded publisher (``local[N]``), measured by ``bench/pipeline.py`` with a
#: million keys: Spark's default 1 GiB heap cannot hold the HDFS-backed state store's copies of
#: its map (about 0.3 GB per version, two versions kept), and garbage collection showed in every
#: task (50-160 ms); with 4 GiB and one state partition per core, 10,000-row micro-batches took
#: 1.7 s instead of 2.4 s. RocksDB (with changelog checkpointing, a 256 MiB block cache) did small
#: micro-batches faster (1.0 s) but cost about 7 us per changed row against 3 us, so at 100,000
#: updates/s it fell behind where the HDFS-backed store kept up.
EMBEDDED = CLUSTER | {"spark.driver.memory": "4g"}


def local_cores(master: str) -> int | None:
    """The task slots of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master URL.

    Returns:
        The number of cores a local master runs tasks on, or None for any other master.
    """
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master)
    if found is None:
        return None
    return (os.cpu_count() or 1) if found[1] == "*" else max(1, int(found[1]))


def spark_session(master: str | None = None, app_name: str = "fanout-publisher") -> SparkSession:
    """Create (or get) the Spark session the publisher runs on.

    ``master`` is only set when given: on a cluster, spark-submit's ``--master`` must win
    (SPARK-NOTES.md). Python workers run this interpreter, or Python data sources cannot start.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and "SPARK_HOME" not in os.environ and not os.environ.get("MASTER"):
        master = "local[*]"
    if master:
        builder = builder.master(master)
    cores = local_cores(master) if master else None
    settings = EMBEDDED if cores else CLUSTER
    # A checkpoint keeps the state store provider and the number of state partitions it was
    # created with (Spark restores them from its offset log), so these only shape new streams.
    partitions = str(cores) if cores else settings["spark.sql.shuffle.partitions"]
    for key, value in (settings | {"spark.sql.shuffle.partitions": partitions}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SimulationDataSource)
    return spark


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
        #: Serialises micro-batch delivery and idle snapshots (two threads, one set of checkouts).
        self._lock = threading.Lock()
        self._last_batch_at = time.monotonic()
        self.retention_seconds = retention_seconds
        self.tick = 0
        self.tick_time = 0.0
        self.matcher = matcher_for(dataset)
        #: Live rows in the driver, for snapshots (``publisher.mirror``).
        self.mirror = Mirror(dataset.key, dataset.index_columns, mirror_rows)
        self._tables: tuple[int, MatchTables | None] = (-1, None)
        self.query: StreamingQuery | None = None
        self.stream = StreamInfo(epoch=0, start_time=0.0)
        #: (tick, batch id) of recent micro-batches handed to the sink, oldest first; kept
        #: shorter than Spark's retained state versions so each can still be read back.
        self.history: deque[tuple[int, int]] = deque(maxlen=HISTORY)
        #: milliseconds per stage of the last micro-batch (see ``StageClock``).
        self.last_stages: dict[str, float] = {}
        #: micro-batches delivered, and the changed rows they carried, since the process started.
        self.micro_batches = 0
        self.rows_changed = 0

    def start(self, trigger_seconds: float = 0.0) -> StreamingQuery:
        """Start the streaming query (returns at once; Spark runs it in the background).

        A new stream's clock starts now, once Spark is up, not when the process started.
        """
        self.stream = StreamInfo.load_or_create(self.state_dir)
        self.tick_time = self.stream.start_time
        if isinstance(self.dataset.source, IngestSource):
            self._ingest = IngestLog(streams.ingest_log_path(self.state_dir), [self.dataset])
        rows = streams.stream(self.spark, self.dataset, self.stream.start_time, self.state_dir)
        name = f"fanout-{self.dataset.name}"
        self.spark.streams.addListener(ProgressLog(self.dataset.name, name))
        writer = (
            latest_per_key(rows, self.dataset)
            .writeStream.outputMode("update")
            .option("checkpointLocation", self.checkpoint)
            .queryName(name)
            .foreachBatch(self.on_micro_batch)
        )
        if trigger_seconds > 0:
            writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
        self.query = writer.start()
        return self.query

    def on_micro_batch(self, changes: DataFrame, batch_id: int) -> None:
        """Deliver one micro-batch: one stamped batch per relay (see ``publisher.delivery``)."""
        with self._lock:
            self._deliver_micro_batch(changes, batch_id)
            self._last_batch_at = time.monotonic()

    def _deliver_micro_batch(self, changes: DataFrame, batch_id: int) -> None:
        clock = StageClock()
        plan = self.registry.plan(self.dataset.name)
        # Snapshots read the changes a second time; without them, caching would only cost.
        reread = any(plan.fresh.values()) and not self._mirrored(batch_id)
        if reread:
            changes = changes.persist()
        try:
            rows, matched = self._match_changes(changes, self._tables_for(plan))
            changed = rows.column(self.dataset.key).to_numpy(zero_copy_only=False)
            clock.lap("state+match")
            stamp = Stamp(self.dataset.name, self.stream.epoch, batch_id, self.tick, self.tick_time)
            self._log_batch(stamp, rows)
            clock.lap("log")
            self.mirror.apply(rows, batch_id)
            snapshots = self._snapshots(plan, changes, batch_id)
            clock.lap("snapshot")
            batches = build_batches(
                stamp=stamp,
                key=self.dataset.key,
                columns=list(self.dataset.columns),
                relays=plan.relays,
                changed=changed,
                matched=matched,
                snapshots=snapshots,
                fresh=plan.fresh,
                checkouts=self.checkouts,
            )
            clock.lap("build")
            self.sink(batches)
            clock.lap("send")
            self.registry.delivered(plan)
            self.history.append((self.tick, batch_id))
        finally:
            if reread:
                changes.unpersist()
        self.last_stages = clock.stages
        self.micro_batches += 1
        self.rows_changed += len(changed)
        log.info(
            "%s batch %d tick %d: %d changed, %d relays; %s",
            self.dataset.name,
            batch_id,
            self.tick,
            len(changed),
            len(batches),
            clock,
        )

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
            snapshots = self._committed_snapshots(plan, seq) if seq >= 0 else {}
            stamp = Stamp(self.dataset.name, self.stream.epoch, seq, tick, self.tick_time)
            batches = build_batches(
                stamp=stamp,
                key=self.dataset.key,
                columns=list(self.dataset.columns),
                relays=frozenset(fresh),
                changed=np.empty(0, dtype=np.int64),
                matched={},
                snapshots=snapshots,
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

    def _committed_snapshots(self, plan: Plan, batch_id: int) -> dict[int, pa.Table]:
        fresh = [(r, p, plan.prims[r][p]) for r, prims in plan.fresh.items() for p in prims]
        if self.mirror.holds(batch_id):
            return self.mirror.snapshots(fresh)
        tables = self.matcher.tables(self.spark, fresh)
        try:
            deadline = time.monotonic() + 30.0
            return rows_by_relay(self._read_committed(batch_id, tables, deadline, all_columns=True))
        finally:
            tables.unpersist()

    def _match_changes(
        self, changes: DataFrame, tables: MatchTables | None
    ) -> tuple[pa.Table, dict[int, pa.Table]]:
        """One Spark job: every changed row, paired with the relays holding it where any do.

        Returns:
            (the changed rows, one per key, sorted by key, with ``_version`` and ``_deleted``;
            relay -> its matched live rows). Advances ``tick``.
        """
        if tables is None:
            table = changes.toArrow()
        else:
            table = self.matcher.match(changes, tables, keep_unmatched=True).toArrow()
        if table.num_rows:
            self.tick = max(self.tick, int(pc.max(table.column(VERSION)).as_py()))
            time_column = self.dataset.time_column
            latest = pc.max(table.column(time_column)).as_py() if time_column else time.time()
            self.tick_time = max(self.tick_time, float(latest))
        _, first = np.unique(
            table.column(self.dataset.key).to_numpy(zero_copy_only=False), return_index=True
        )
        internal = [
            c for c in table.column_names if c.startswith("_") and c not in (VERSION, DELETED)
        ]
        rows = table.take(pa.array(first)).drop_columns(internal)
        if tables is None:
            return rows, {}
        live = pc.and_(pc.is_valid(table.column("_relay")), pc.invert(table.column(DELETED)))
        return rows, rows_by_relay(table.filter(live))

    def _log_batch(self, stamp: Stamp, rows: pa.Table) -> None:
        # Durable before any relay sees the batch: the log is the only durable copy of the
        # stream (seed 004). If this raises, the micro-batch fails and Spark re-runs it.
        entry = LogEntry(stamp.dataset, stamp.epoch, stamp.seq, stamp.tick, stamp.tick_time, rows)
        self.log.append(entry)
        if stamp.seq % RETENTION_EVERY == 0:
            # Entries a connected relay still needs stay, however old (seed 004: the log is
            # trimmed only once its holders released them).
            floor = self.registry.floor()
            policy = Retention(max_age_seconds=self.retention_seconds, floor=floor)
            self.log.apply_retention(policy, now=time.time())

    def _tables_for(self, plan: Plan) -> MatchTables | None:
        version, cached = self._tables
        if version == plan.version:
            return cached
        if cached is not None:
            cached.unpersist()
        prims = [(r, p, view) for r, held in plan.prims.items() for p, view in held.items()]
        tables: MatchTables | None = self.matcher.tables(self.spark, prims)
        self._tables = (plan.version, tables)
        return tables

    def _mirrored(self, batch_id: int) -> bool:
        """Whether micro-batch ``batch_id``'s snapshots will come from the mirror (not reading
        ``changes`` again)."""
        mirror = self.mirror
        if mirror.too_big:
            return False
        return batch_id == 0 or mirror.holds(batch_id - 1) or mirror.holds(batch_id)

    def _snapshots(self, plan: Plan, changes: DataFrame, batch_id: int) -> dict[int, pa.Table]:
        fresh = [(r, p, plan.prims[r][p]) for r, prims in plan.fresh.items() for p in prims]
        if not fresh:
            return {}
        mirror = self.mirror
        if not mirror.too_big and not mirror.holds(batch_id):
            # After a restart: the state is read into the driver once, then kept up to date.
            state = current_state(self.spark, self.checkpoint, self.dataset, changes, batch_id)
            mirror.load(state.limit(mirror.max_rows + 1).toArrow(), batch_id)
        if mirror.holds(batch_id):
            return mirror.snapshots(fresh)
        tables = self.matcher.tables(self.spark, fresh)
        if tables is None:
            return {}
        try:
            state = current_state(self.spark, self.checkpoint, self.dataset, changes, batch_id)
            return rows_by_relay(self.matcher.match(state, tables).toArrow())
        finally:
            tables.unpersist()

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
        key = self.dataset.key
        events = [IngestEvent(row[key], row) for row in _rows(upserts)]
        events += [IngestEvent(value, None) for value in deletes.tolist()]
        if not events:
            raise BadRequest("publish: no upserts and no deletes")
        offsets = self._ingest.append(self.dataset.name, events)
        return offsets[0], offsets[-1]

    def replay(self, epoch: int, after: int) -> list[Batch]:
        """Batches for a relay resuming after seq ``after``: every logged micro-batch since.

        A replayed batch carries the micro-batch's whole change (not only what the relay's
        primitives hold): the relay keeps what falls inside its coverage and prunes the rest,
        so its state after the replay is what it would have been had it never left.

        Raises:
            BadRequest: ``epoch`` is not this stream's (``LogGap``: the seqs are no longer in
                the log).
        """
        name = self.dataset.name
        if epoch != self.stream.epoch:
            raise BadRequest(
                f"{name}: epoch {epoch} is over (the stream is at epoch {self.stream.epoch})"
            )
        bounds = self.log.bounds(name, epoch)
        if bounds is None or bounds[1] <= after:
            return []
        return [self._replayed(entry) for entry in self.log.read(name, epoch, after + 1, bounds[1])]

    def _replayed(self, entry: LogEntry) -> Batch:
        deleted = entry.rows.column(DELETED).to_numpy(zero_copy_only=False)
        key = self.dataset.key
        live = entry.rows.filter(pa.array(~deleted))
        gone = entry.rows.column(key).to_numpy(zero_copy_only=False)[deleted]
        return Batch(
            dataset=entry.dataset,
            epoch=entry.epoch,
            seq=entry.seq,
            tick=entry.tick,
            tick_time=entry.tick_time,
            upserts=to_columns(live if live.num_rows else None, list(self.dataset.columns)),
            deletes=encode_columns({key: gone}),
        )

    def read(self, view: View, tick: int, timeout: float) -> tuple[int, pa.Table]:
        """The authoritative rows inside ``view`` as of ``tick`` (-1: the latest tick).

        Reads the state store at the micro-batch that ended at ``tick`` (waiting for Spark to
        commit it), so the rows returned are exactly the state at that tick.

        Returns:
            (the tick, rows with the dataset's columns, one per key).

        Raises:
            TimeoutError: ``tick`` was not reached within ``timeout`` seconds.
            InvalidView: ``tick`` is too old to read back, or no micro-batch ended at it.
        """
        view = self.matcher.check(view)
        deadline = time.monotonic() + timeout
        while not self.history or self.history[-1][0] < tick:
            if time.monotonic() > deadline:
                at = f"tick {self.history[-1][0]}" if self.history else "no batch yet"
                raise TimeoutError(f"state is at {at}, not yet at tick {tick}")
            time.sleep(0.05)
        tick, batch_id = self._batch_at(tick)
        tables = self.matcher.tables(self.spark, [(0, 0, view)])
        try:
            table = self._read_committed(batch_id, tables, deadline)
        finally:
            tables.unpersist()
        keys = table.column(self.dataset.key).to_numpy(zero_copy_only=False)
        _, first = np.unique(keys, return_index=True)
        return tick, table.take(pa.array(np.sort(first)))

    def _batch_at(self, tick: int) -> tuple[int, int]:
        history = list(self.history)
        if tick < 0:
            return history[-1]
        matches = [entry for entry in history if entry[0] == tick]
        if matches:
            return matches[-1]
        oldest = history[0][0]
        reason = (
            "is older than the state kept" if tick < oldest else "is not where a micro-batch ended"
        )
        raise BadRequest(f"tick {tick} {reason} (readable: {oldest}..{history[-1][0]})")

    def _read_committed(
        self, batch_id: int, tables: MatchTables, deadline: float, all_columns: bool = False
    ) -> pa.Table:
        # Spark commits a micro-batch just after its foreachBatch returns; until then the state
        # store refuses to read it, so wait for the commit rather than read an older version.
        while True:
            try:
                state = live_rows(read_state(self.spark, self.checkpoint, self.dataset, batch_id))
                rows = self.matcher.match(state, tables)
                return (rows if all_columns else rows.select(*self.dataset.columns)).toArrow()
            except PySparkException as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"batch {batch_id} was not committed in time: {exc}"
                    ) from exc
                time.sleep(0.05)


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


def _rows(columns: dict[str, np.ndarray]) -> list[dict[str, object]]:
    names = list(columns)
    if not names:
        return []
    return [
        dict(zip(names, values, strict=True))
        for values in zip(*(columns[n].tolist() for n in names), strict=True)
    ]
