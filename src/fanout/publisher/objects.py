"""Admitting producers' writes to an ``objects`` dataset (US 9,026,567, QNX PPS; the rules are
``views.objects.store``'s; docs/objects.md, "How objects are kept").

Quality, merging one write's attributes into what others wrote, deletions and ``[n]`` are
decided here, before a request reaches the log: every request goes through one
:class:`~fanout.views.objects.store.ObjectStore`, under a lock, and only the cells it changed
are appended, so the log and Spark's state hold admitted cells only. After a restart the store
is read back from the committed state plus the log's untrimmed events, and its non-persistent
cells are deleted through the log.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from pyspark.sql import SparkSession

from fanout.publisher.datasets import DELETED, Dataset
from fanout.publisher.sources.producerlog import IngestEvent, IngestLog
from fanout.publisher.state import live_rows, read_state
from fanout.views.objects.store import KEY, Effects, ObjectStore, Row

log = logging.getLogger(__name__)


class Admission:
    """One objects dataset's admission: its store and the log it appends admitted cells to."""

    def __init__(self, dataset: Dataset, ingest: IngestLog) -> None:
        self.dataset = dataset
        self.ingest = ingest
        self.store = ObjectStore()
        self._lock = threading.Lock()

    def recover(self, spark: SparkSession, checkpoint: str) -> int:
        """Read the store back after a (re)start and delete the non-persistent cells.

        Returns:
            How many cells were deleted as non-persistent.
        """
        with self._lock:
            if any((Path(checkpoint) / "commits").glob("[0-9]*")):
                state = live_rows(read_state(spark, checkpoint, self.dataset))
                self.store.apply((row.asDict() for row in state.collect()), ())
            name = self.dataset.name
            floor, head = self.ingest.trimmed(name), self.ingest.latest(name)
            if head > floor:
                for row in self.ingest.read(name, floor, head).to_pylist():
                    if row[DELETED]:
                        self.store.apply((), [row[KEY]])
                    else:
                        self.store.apply([row], ())
            gone = self.store.restart(then=self._append)
        log.info(
            "objects %s: %d cells back, %d non-persistent deleted",
            name,
            len(self.store.cells),
            len(gone.deletes),
        )
        return len(gone.deletes)

    def publish(self, upserts: list[Row], deletes: list[str]) -> tuple[int, int]:
        """Admit one producer request (``ObjectStore.admit``) and append what it changed.

        Returns:
            The ingest-log offsets (first, last) of the appended cells; (last, last) of the log
            when the request changed nothing (say, every write was of lower quality).

        Raises:
            InvalidWrite: the request is bad; nothing of it was applied.
            BadRequest, IngestBacklog: the log refused the cells; the store is left as before.
        """
        offsets: list[int] = []

        def append(effects: Effects) -> None:  # a failed append undoes the request
            offsets.extend(self._append(effects))

        with self._lock:
            self.store.admit(upserts, deletes, then=append)
        if not offsets:
            last = self.ingest.latest(self.dataset.name)
            return last, last
        return offsets[0], offsets[-1]

    def _append(self, effects: Effects) -> list[int]:
        events = [IngestEvent(row[KEY], row) for row in effects.upserts]
        events += [IngestEvent(key, None) for key in effects.deletes]
        return self.ingest.append(self.dataset.name, events) if events else []
