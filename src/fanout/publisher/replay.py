"""Serving the log back: replays for resuming relays, knowledge for curious ones (US 7,487,246).

Both send a logged micro-batch's *whole* change — every changed row and every deleted key, not
only what one relay's primitives hold. A relay keeps what falls inside its coverage (and its
``every``-mode subscriptions pick their view's part), so nothing depends on which primitives the
relay held when the micro-batch first ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from fanout.errors import BadRequest
from fanout.publisher.datasets import DELETED, Dataset
from fanout.publisher.delivery import to_columns
from fanout.publisher.log import BatchLog, LogEntry
from fanout.wire.columns import Columns, encode_columns
from fanout.wire.messages import Batch, Knowledge

#: Seqs one curiosity request may ask for at most.
MAX_CURIOSITY = 10_000


def change_columns(entry: LogEntry, dataset: Dataset) -> tuple[Columns, Columns]:
    """A logged micro-batch as (upserted rows, deleted keys) for the wire."""
    deleted = entry.rows.column(DELETED).to_numpy(zero_copy_only=False).astype(bool)
    live = entry.rows.filter(pa.array(~deleted))
    gone = entry.rows.column(dataset.key).to_numpy(zero_copy_only=False)[deleted]
    upserts = to_columns(live if live.num_rows else None, list(dataset.columns))
    return upserts, encode_columns({dataset.key: np.asarray(gone)})


@dataclass(frozen=True)
class LoggedStream:
    """One dataset's stream as its log holds it.

    Attributes:
        log: the publisher's log.
        dataset: the dataset.
        epoch: the stream's current epoch.
    """

    log: BatchLog
    dataset: Dataset
    epoch: int

    def _entries(self, epoch: int, first: int, last: int) -> Iterator[LogEntry]:
        if epoch != self.epoch:
            name = self.dataset.name
            raise BadRequest(f"{name}: epoch {epoch} is over (the stream is at epoch {self.epoch})")
        return self.log.read(self.dataset.name, epoch, first, last)

    def replay(self, epoch: int, after: int) -> list[Batch]:
        """Batches for a relay resuming after seq ``after``: every logged micro-batch since.

        Raises:
            BadRequest: ``epoch`` is not the stream's; ``LogGap`` (a BadRequest): seqs no longer
                logged.
        """
        bounds = self.log.bounds(self.dataset.name, epoch) if epoch == self.epoch else None
        if epoch == self.epoch and (bounds is None or bounds[1] <= after):
            return []
        batches = []
        for entry in self._entries(epoch, after + 1, bounds[1] if bounds else after):
            upserts, deletes = change_columns(entry, self.dataset)
            batches.append(
                Batch(
                    entry.dataset,
                    entry.epoch,
                    entry.seq,
                    entry.tick,
                    entry.tick_time,
                    upserts,
                    deletes,
                )
            )
        return batches

    def knowledge(self, req: int, epoch: int, first: int, last: int) -> list[Knowledge]:
        """The answer to a relay's curiosity about seqs ``first..last``.

        Raises:
            BadRequest: another epoch, a reversed or too long range; ``LogGap``: seqs not logged.
        """
        if last < first or last - first >= MAX_CURIOSITY:
            raise BadRequest(
                f"curiosity about seqs {first}..{last}: ask for 1 to {MAX_CURIOSITY} seqs"
            )
        answers = []
        for entry in self._entries(epoch, first, last):
            upserts, deletes = change_columns(entry, self.dataset)
            answers.append(
                Knowledge(
                    req,
                    entry.dataset,
                    entry.epoch,
                    entry.seq,
                    entry.tick,
                    entry.tick_time,
                    upserts,
                    deletes,
                )
            )
        return answers
