"""The batch log's interface and what it holds; every backend keeps the rules below.

A :class:`BatchLog` keeps, per (dataset, epoch, seq), one micro-batch's changed rows
(:class:`LogEntry`): before per-relay matching, the declared columns plus ``_version`` and
``_deleted``, with its tick and tick time.

1. ``append`` is durable when it returns, and idempotent on (dataset, epoch, seq): Spark re-runs a
   micro-batch after a crash with the same seq, and the first write wins (replacing an entry
   could make a replay disagree with what relays already received).
2. The log only ever loses a *prefix* of a stream (``trim``, ``apply_retention``; a
   :class:`Retention`), and remembers how far it trimmed; an append below that point is a no-op
   too, so a stream never has a hole in front of its first entry.
3. ``read`` never hides a gap: a seq it cannot return raises :class:`LogGap`, naming each
   :class:`Gap` and why (trimmed, never logged, not logged yet).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

import pyarrow as pa

from fanout.errors import BadRequest, ConfigError

Stream = tuple[str, int]
"""(dataset, epoch): one sequence of seqs."""
GapReason = Literal["trimmed", "never logged", "not logged yet"]


@dataclass(frozen=True)
class LogEntry:
    """One micro-batch of one dataset, as logged.

    Attributes:
        dataset: the dataset's name.
        epoch: the stream's epoch (changes only with a fresh publisher state directory).
        seq: Spark's micro-batch id.
        tick: the publisher tick the micro-batch ended at.
        tick_time: wall-clock time of that tick, epoch seconds (retention measures age by it).
        rows: every row of the dataset that changed in the micro-batch, before matching.
    """

    dataset: str
    epoch: int
    seq: int
    tick: int
    tick_time: float
    rows: pa.Table


@dataclass(frozen=True)
class Retention:
    """How long the log keeps entries, per (dataset, epoch) stream.

    An entry is dropped when it is *expired* — older than ``max_age_seconds`` by its tick_time,
    or not among the newest ``max_entries`` of its stream — and no holder needs it. Retention
    drops a prefix of each stream: age counts from the first entry young enough (tick_time only
    grows with seq in the pipeline, so that is exactly the old entries).

    Attributes:
        max_age_seconds: expire entries whose tick_time is older than this (None: never).
        max_entries: keep at most this many newest entries per stream (None: no limit).
        floor: (dataset, epoch) -> the lowest seq some holder (connected relay, durable
            subscription) still needs. Entries at or above it are never dropped, whatever their
            age; a stream absent from it has no holder. The caller recomputes it before each
            ``apply_retention``, so a holder that never releases keeps its entries forever:
            disconnecting stuck holders is the caller's policy, not the log's.

    Raises:
        ConfigError: a negative limit.
    """

    max_age_seconds: float | None = None
    max_entries: int | None = None
    floor: Mapping[Stream, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_age_seconds is not None and not self.max_age_seconds >= 0:
            raise ConfigError(f"log retention max_age_seconds must be >= 0: {self.max_age_seconds}")
        if self.max_entries is not None and self.max_entries < 0:
            raise ConfigError(f"log retention max_entries must be >= 0: {self.max_entries}")


@dataclass(frozen=True)
class Gap:
    """Seqs ``first..last`` (inclusive) that the log cannot return, and why."""

    first: int
    last: int
    reason: GapReason

    def __str__(self) -> str:
        one = self.first == self.last
        seqs = f"seq {self.first}" if one else f"seqs {self.first}..{self.last}"
        verb = {
            "trimmed": "was trimmed" if one else "were trimmed",
            "never logged": "was never logged" if one else "were never logged",
            "not logged yet": "is not logged yet" if one else "are not logged yet",
        }[self.reason]
        return f"{seqs} {verb}"


class LogGap(BadRequest):
    """A read asked for seqs the log does not hold.

    Attributes:
        dataset, epoch: the stream read.
        gaps: the missing seqs, ascending, each with its reason.
        held: (first, last) seq the stream holds now, or None.
    """

    def __init__(
        self, dataset: str, epoch: int, gaps: Sequence[Gap], held: tuple[int, int] | None
    ) -> None:
        self.dataset = dataset
        self.epoch = epoch
        self.gaps = tuple(gaps)
        self.held = held
        holds = "nothing" if held is None else f"seqs {held[0]}..{held[1]}"
        missing = ", ".join(str(gap) for gap in self.gaps)
        super().__init__(f"{dataset} epoch {epoch}: {missing} (the log holds {holds})")


class BatchLog(ABC):
    """Durable, replayable micro-batches, keyed by (dataset, epoch, seq); thread-safe."""

    @abstractmethod
    def append(self, entry: LogEntry) -> None:
        """Store ``entry``; durable when this returns.

        A no-op if (dataset, epoch, seq) is held, or lies below the stream's trim point.

        Raises:
            sqlite3.Error, psycopg.Error: the entry could not be stored (disk full, server
                gone): it is not in the log, and the micro-batch must fail (Spark re-runs it).
            RuntimeError: the log is closed.
        """

    @abstractmethod
    def read(self, dataset: str, epoch: int, first: int, last: int) -> Iterator[LogEntry]:
        """Entries with seq in ``first..last``, ascending (nothing if ``first > last``).

        Raises:
            LogGap: some seq in the range is not held; raised by this call, before any entry,
                or by the iterator if a concurrent trim removes entries not yet yielded.
        """

    @abstractmethod
    def bounds(self, dataset: str, epoch: int) -> tuple[int, int] | None:
        """The first and last seq held for the stream, or None if it holds nothing."""

    @abstractmethod
    def trim(self, dataset: str, epoch: int, below: int) -> int:
        """Drop the stream's entries with seq < ``below``; returns how many were dropped.

        The caller's explicit decision: ``Retention.floor`` does not apply here.
        """

    @abstractmethod
    def apply_retention(self, policy: Retention, now: float) -> int:
        """Drop expired entries no holder needs (see ``Retention``); returns how many."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the log cannot be used afterwards."""

    def __enter__(self) -> BatchLog:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def encode_rows(rows: pa.Table) -> pa.Buffer:
    """A table as Arrow IPC stream bytes (schema, metadata and nulls exact)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue()


def decode_rows(blob: bytes) -> pa.Table:
    """The table ``encode_rows`` wrote."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def find_gaps(
    first: int, last: int, held: Sequence[int], trimmed_below: int, last_held: int | None
) -> list[Gap]:
    """The seqs of ``first..last`` not in ``held``, each run split by why it is missing.

    Args:
        first, last: the range asked for (inclusive).
        held: the seqs held within the range, ascending.
        trimmed_below: the stream's trim point: seqs below it were dropped.
        last_held: the stream's last seq held anywhere (None: nothing held).
    """
    gaps: list[Gap] = []
    start = first
    for seq in [*held, last + 1]:
        if seq > start:
            gaps.extend(_split_run(start, seq - 1, trimmed_below, last_held))
        start = seq + 1
    return gaps


def _split_run(first: int, last: int, trimmed_below: int, last_held: int | None) -> list[Gap]:
    # Below the trim point: dropped. After the stream's last entry: the publisher is not there
    # yet. Between: a micro-batch that was never appended.
    ahead = trimmed_below if last_held is None else max(trimmed_below, last_held + 1)
    runs: list[Gap] = []
    cuts: list[tuple[int, int, GapReason]] = [
        (first, min(last, trimmed_below - 1), "trimmed"),
        (max(first, trimmed_below), min(last, ahead - 1), "never logged"),
        (max(first, ahead), last, "not logged yet"),
    ]
    for low, high, reason in cuts:
        if low <= high:
            runs.append(Gap(low, high, reason))
    return runs
