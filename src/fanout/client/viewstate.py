"""One subscription's state on the subscriber's side, with no I/O: what was asked, the
materialised rows, where the stream is, and the updates not yet yielded.

Rules:

1. What was asked (:class:`Asked`) is immutable, replaced when the view changes; everything else
   is progress, changed only by :class:`fanout.client.core.ClientCore`, which owns the state.
2. Every push and no-update is applied to the rows in order; a push that does not decode or
   holds rows without the key changes nothing (``ProtocolError``).
3. The updates not yet yielded are bounded by ``buffer`` in mode ``latest``: the oldest is
   dropped (counted in ``dropped``), never the rows. Mode ``every`` drops none.
4. A resumed view continues from the earlier one's rows and seq and takes the updates it had not
   yielded (the earlier one yields nothing more).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from fanout.errors import FanoutError, ProtocolError
from fanout.views import View
from fanout.wire.columns import Columns as Payload
from fanout.wire.columns import decode_columns, encode_columns, key_column, to_python
from fanout.wire.messages import Mode, NoUpdate, Push, Transform
from fanout.wire.options import Relevance, Resume, Transduce

Columns = dict[str, npt.NDArray[Any]]


class SubscriptionError(FanoutError):
    """The relay refused or ended a subscription; ``code`` is the relay's error code.

    ``location``: with code ``redirect``, the URL of the relay responsible for the subscription
    (``fanout.client.following`` follows it).
    """

    def __init__(self, code: str, message: str, location: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.location = location


@dataclass(frozen=True)
class Update:
    """One push (or no-update) of a view, as received.

    Attributes:
        tick: the publisher tick the view's content is at.
        seq: the publisher micro-batch it was cut from; epoch: the stream it belongs to.
        full: the first push of the subscription (``entered`` is the whole view).
        entered, updated: rows column by column; left: keys that left the view.
        received_at: wall-clock time of arrival; tick_time: wall-clock time of the tick.
        provisional: it carries writes the publisher has not confirmed yet (docs/concepts.md,
            "Two paths").
    """

    sub: int
    epoch: int
    seq: int
    tick: int
    full: bool
    entered: Columns
    updated: Columns
    left: npt.NDArray[Any]
    tick_time: float
    received_at: float
    provisional: bool = False

    @property
    def no_update(self) -> bool:
        """Nothing in the view changed (the relay's no-update message)."""
        return not (self.full or self.entered or self.updated or len(self.left))

    def changed(self) -> int:
        """Rows entered, updated or left in this update."""
        count = len(self.left)
        for rows in (self.entered, self.updated):
            if rows:
                count += len(next(iter(rows.values())))
        return count


@dataclass(frozen=True)
class Asked:
    """What a subscription asked for (rule 1)."""

    dataset: str
    view: View
    rate: float = 10.0
    priority: int = 0
    transform: Transform | None = None
    mode: Mode = "latest"
    relevance: Relevance | None = None
    transduce: Transduce | None = None
    confirmed: bool = False


@dataclass
class ViewState:
    """A subscription's rows, position and updates not yet yielded (rules 2-4)."""

    sub: int
    asked: Asked
    key: str
    columns: list[str]
    buffer: int = 256
    rows: dict[Any, dict[str, Any]] = field(default_factory=dict)
    epoch: int = -1
    seq: int = -1
    tick: int = -1
    updates: int = 0
    dropped: int = 0
    resyncs: int = 0
    gaps: int = 0
    moves: int = 0
    #: Received and applied to ``rows``, not yet yielded by an iteration.
    pending: deque[Update] = field(default_factory=deque)
    #: Ended: by the relay (``error`` None: unsubscribed) or with the connection.
    ended: bool = False
    error: SubscriptionError | None = None

    def apply(self, frame: Push | NoUpdate, now: float) -> Update:
        """Apply a push or no-update received at wall-clock time ``now`` (rules 2, 3).

        Raises:
            ProtocolError: the push does not decode or holds rows without the key.
        """
        if isinstance(frame, NoUpdate):
            empty = np.empty(0, np.int64)
            update = Update(
                frame.sub, frame.epoch, frame.seq, frame.tick, False, {}, {}, empty, 0.0, now
            )
        else:
            update = self._apply_push(frame, now)
        if self.asked.mode == "every" and not update.full and update.seq != self.seq + 1:
            self.gaps += 1  # a relay broke its promise; counted so that tests can see it
        self.epoch, self.seq, self.tick = update.epoch, update.seq, update.tick
        self.updates += 1
        if self.asked.mode == "latest" and len(self.pending) >= self.buffer:
            self.pending.popleft()
            self.dropped += 1
        self.pending.append(update)
        return update

    def end(self, error: SubscriptionError | None) -> None:
        """The subscription ended (``error`` None: the relay confirmed an unsubscribe)."""
        self.error = error
        self.ended = True

    def token(self) -> Resume:
        """Where this view is: (epoch, seq, keys held), to resume an ``every`` subscription."""
        keys = list(self.rows)
        if keys and all(isinstance(k, int) for k in keys):
            column: npt.NDArray[Any] = np.array(sorted(keys), dtype=np.int64)
        else:
            column = np.array(sorted(keys), dtype=object)
        return Resume(self.epoch, self.seq, encode_columns({self.key: column}))

    def take_over(self, earlier: ViewState) -> None:
        """Continue where ``earlier`` (a view of an ended connection) stopped (rule 4): the
        token counts its pending updates, so the relay sends only what follows them."""
        self.rows = dict(earlier.rows)
        self.epoch, self.seq, self.tick = earlier.epoch, earlier.seq, earlier.tick
        self.resyncs, self.gaps = earlier.resyncs, earlier.gaps
        self.pending.extendleft(reversed(earlier.pending))
        earlier.pending.clear()

    def _apply_push(self, push: Push, now: float) -> Update:
        entered = self._rows_of(push.entered, "entered")
        updated = self._rows_of(push.updated, "updated")
        left = key_column(push.left, self.key, f"push for subscription {self.sub}: left")
        if left.dtype.kind in "iu":
            left = left.astype(np.int64)
        if push.full:
            self.rows.clear()
        for key in left.tolist():
            self.rows.pop(key, None)
        for columns in (entered, updated):
            if columns:
                names = list(columns)
                for values in zip(*(to_python(columns[n]) for n in names), strict=True):
                    row = dict(zip(names, values, strict=True))
                    self.rows[row[self.key]] = row
        return Update(
            push.sub,
            push.epoch,
            push.seq,
            push.tick,
            push.full,
            entered,
            updated,
            left,
            push.tick_time,
            now,
            push.provisional,
        )

    def _rows_of(self, columns: Payload, section: str) -> Columns:
        """A push's section decoded; rows must carry the key.

        Raises:
            ProtocolError: the section does not decode, or holds rows without the key column.
        """
        decoded = decode_columns(columns)
        if columns.length and self.key not in decoded:
            raise ProtocolError(
                f"push for subscription {self.sub}: {columns.length} {section} rows without"
                f" the key column {self.key!r}"
            )
        return decoded
