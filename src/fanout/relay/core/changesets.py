"""``every`` mode: every seq of the stream delivered to a subscriber, in order, exactly once
(US 7,487,246; docs/delivery.md, "How it works"), sans I/O.

Per dataset the relay remembers a bounded window of recent *change sets* — what each live batch
changed, by seq — and what it learnt from the publisher's log. An ``every`` subscription has a
*cursor* (the last seq its subscriber has) and the keys its subscriber holds; the push for seq
``s`` is computed from the change set of ``s`` alone:

* an upserted row inside the view is *updated* if the subscriber holds its key, else *entered*;
* an upserted row outside the view, or a deleted key, *left* if the subscriber holds it.

A SQL view that decides row by row has its query run on the change set's rows alone
(``rows_step``). Seqs before ``trusted_after`` (from which the relay's window is complete for the
view), and batches that carried snapshots, come from the publisher's log (``Curious`` ->
``Knowledge``: a micro-batch's whole change).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.relay.core.transforms import Shape, apply
from fanout.relay.data.buffers import Array, Keys, Stamp
from fanout.relay.data.engine import Result
from fanout.relay.data.nulls import with_companions
from fanout.relay.data.pushes import NO_ROWS, Body, encode_push, encode_rows
from fanout.relay.data.pushes import members as among
from fanout.relay.data.rows import encoded
from fanout.views.members import Selecting, members
from fanout.wire.messages import DatasetInfo, NoUpdate

#: Change sets a dataset's window keeps at most (each is one micro-batch) ...
WINDOW = 600
#: ... and rows at most, over all of them (the window of a busy dataset is shorter).
WINDOW_ROWS = 2_000_000
#: Change sets kept while no ``every`` subscription reads the dataset (a resume arriving then
#: takes older seqs from the publisher's log).
IDLE_WINDOW = 8
#: Seqs one curiosity request asks for at most.
CURIOSITY_CHUNK = 500
#: Steps (one seq's push for one view and held keys) remembered for sharing ...
STEPS = 4096
#: ... and their bytes at most (keys and encoded rows): counted alone, 4096 steps of a view of
#: 100,000 rows would hold gigabytes.
STEPS_BYTES = 64 * 2**20
#: What one remembered step costs beyond its keys and rows (its token, the dict's entry).
STEP_OVERHEAD = 256

_encoder = msgspec.msgpack.Encoder()


@dataclass(frozen=True)
class ChangeSet:
    """What one micro-batch changed.

    Attributes:
        epoch, seq, tick, tick_time: its stamp.
        rows: upserted rows, column -> array (every dataset column).
        deleted: deleted keys.
        pure: only changes (no snapshot rows mixed in).
        whole: the micro-batch's whole change (from the publisher's log), not only what one
            relay's coverage held.
    """

    epoch: int
    seq: int
    tick: int
    tick_time: float
    rows: Mapping[str, Array]
    deleted: Keys
    pure: bool = True
    whole: bool = False

    @property
    def size(self) -> int:
        """Rows upserted + keys deleted."""
        upserted = len(next(iter(self.rows.values()))) if self.rows else 0
        return upserted + len(self.deleted)


@dataclass
class Cursor:
    """Where an ``every`` subscription is in its stream.

    Attributes:
        epoch, seq: the last seq its subscriber received (a push or a no-update).
        keys: the sorted keys its subscriber holds after that seq.
        trusted_after: the seq after which the relay's live change sets are complete for its
            view (its coverage was ready from then on); None until the subscription is
            servable again after it started, resumed, or lost its coverage.
    """

    epoch: int
    seq: int
    keys: Keys
    trusted_after: int | None = None


@dataclass
class Delta:
    """One seq's push for one subscription: positions into the change set's rows, keys left."""

    entered: npt.NDArray[np.intp]
    updated: npt.NDArray[np.intp]
    left: Keys
    held: Keys

    @property
    def changes(self) -> int:
        """Rows entered + updated + keys left."""
        return len(self.entered) + len(self.updated) + len(self.left)


def delta(
    change: ChangeSet, key: str, view: Selecting, index: tuple[str, ...], held: Keys
) -> Delta:
    """The push of ``change`` for a view whose subscriber holds the sorted keys ``held`` (held
    keys found by bisection: ``np.isin``'s set-up alone cost more, per subscription and seq)."""
    if change.rows:
        keys = np.asarray(change.rows[key])
        inside = members(view, change.rows, index)
    else:
        keys, inside = held[:0], np.zeros(0, dtype=bool)
    has = among(keys, held)
    entered = np.flatnonzero(inside & ~has)
    updated = np.flatnonzero(inside & has)
    gone = np.asarray(change.deleted, dtype=held.dtype)
    left = keys[~inside & has]
    if len(gone):
        left = np.concatenate([left, gone[among(gone, held)]])
    left = np.unique(left).astype(held.dtype)
    remaining = held[~among(held, left)] if len(left) else held
    after = np.union1d(remaining, keys[entered]).astype(held.dtype) if len(entered) else remaining
    return Delta(entered, updated, left, after)


@dataclass(frozen=True)
class Step:
    """One seq's push for a view, from the keys its subscriber held before.

    Attributes:
        held: the sorted keys the subscriber holds after it.
        body: the push's rows, or None for a no-update (nothing in the view changed).
    """

    held: Keys
    body: Body | None


def step(
    change: ChangeSet,
    view: Selecting,
    shape: Shape,
    held: Keys,
    *,
    key: str,
    index: tuple[str, ...],
) -> Step:
    """The push of ``change`` for a view of this ``shape`` whose subscriber holds ``held``
    (``key``, ``index``: the dataset's key and index columns)."""
    found = delta(change, key, view, index, held)
    if not found.changes:
        return Step(found.held, None)
    body = Body(
        keys=found.held,
        anchor=None,
        full=False,
        changes=found.changes,
        entered=_rows(change, found.entered, shape),
        updated=_rows(change, found.updated, shape),
        left=encode_rows({key: found.left}),
    )
    return Step(found.held, body)


def shared_step(
    steps: Steps,
    change: ChangeSet,
    view: Selecting,
    shape: Shape,
    held: Keys,
    *,
    info: DatasetInfo,
) -> Step:
    """``step`` for a view of the dataset ``info`` describes, shared through ``steps`` by every
    subscription with the same view, shape and held keys at this seq."""
    index = tuple(info.index_columns)
    return steps.get(
        change,
        view,
        shape,
        held,
        lambda: step(change, view, shape, held, key=info.key, index=index),
    )


def rows_step(change: ChangeSet, result: Result, shape: Shape, held: Keys, *, key: str) -> Step:
    """The push of ``change`` for a SQL view whose query, run on the change's rows alone, gave
    ``result`` (``TableStore.evaluate_rows``): its rows are the query's, projected and
    computed; a held key that changed to outside it, or was deleted, left."""
    has = np.isin(result.keys, held)
    entered, updated = np.flatnonzero(~has), np.flatnonzero(has)
    changed = np.asarray(change.rows[key]) if change.rows else held[:0]
    outside = changed[~np.isin(changed, result.keys)]
    gone = np.asarray(change.deleted, dtype=held.dtype)
    left = np.union1d(outside[np.isin(outside, held)], gone[np.isin(gone, held)])
    after = np.union1d(held[~np.isin(held, left)], result.keys).astype(held.dtype)
    if not (len(entered) or len(updated) or len(left)):
        return Step(after, None)
    body = Body(
        keys=after,
        anchor=None,
        full=False,
        changes=len(entered) + len(updated) + len(left),
        entered=encoded(result.rows, entered, shape),
        updated=encoded(result.rows, updated, shape),
        left=encode_rows({key: left.astype(held.dtype)}),
    )
    return Step(after, body)


def encode_step(sub: int, change: ChangeSet, found: Step) -> bytes:
    """The wire bytes of subscription ``sub``'s push (or no-update) of ``found``."""
    if found.body is None:
        return _encoder.encode(NoUpdate(sub, change.epoch, change.seq, change.tick))
    stamp = Stamp(change.epoch, change.seq, change.tick, change.tick_time)
    return encode_push(sub, stamp, found.body)


class Steps:
    """Recent steps by (change set, view, shape, keys held): ``every`` subscriptions with the same
    view and transform at the same seq (an audience following one stream) share one delta and
    one encoding of its rows; only the frame's subscription number differs.

    Attributes:
        computed: steps computed; shared: steps served from the memo instead.
    """

    def __init__(self, size: int = STEPS, budget: int = STEPS_BYTES) -> None:
        self.size = size
        self.budget = budget
        self.computed = 0
        self.shared = 0
        #: What the remembered steps cost (``_cost``), at most ``budget``.
        self.bytes = 0
        self._steps: OrderedDict[Hashable, tuple[Step, int]] = OrderedDict()

    def get(
        self,
        change: ChangeSet,
        view: Hashable,
        shape: Shape,
        held: Keys,
        compute: Callable[[], Step],
    ) -> Step:
        """The step of ``change`` for ``view`` in ``shape`` from ``held``: ``compute()``,
        called once for equal arguments while the step is remembered."""
        stream = (change.epoch, change.seq, change.pure, change.whole)
        token = (stream, view, shape, _content(held))
        remembered = self._steps.get(token)
        if remembered is not None:
            self._steps.move_to_end(token)
            self.shared += 1
            return remembered[0]
        found = compute()
        self.computed += 1
        cost = _cost(held, found)
        if cost > self.budget:
            return found  # larger than the whole memo: not remembered
        self._steps[token] = (found, cost)
        self.bytes += cost
        while len(self._steps) > self.size or self.bytes > self.budget:
            _, (_, oldest) = self._steps.popitem(last=False)
            self.bytes -= oldest
        return found


def _cost(held: Keys, found: Step) -> int:
    """The bytes a remembered step holds: the keys held before (in its token) and after, and
    its encoded rows (an object key counted as 64 bytes)."""
    keys = [held, found.held]
    rows = 0
    if found.body is not None:
        body = found.body
        rows = len(body.entered) + len(body.updated) + len(body.left)
        keys += [] if body.keys is found.held else [body.keys]
    size = sum(k.nbytes if k.dtype != object else 64 * len(k) for k in keys)
    return STEP_OVERHEAD + size + rows


def _content(keys: Keys) -> Hashable:
    """The keys themselves, hashable (equal for equal keys)."""
    return tuple(keys.tolist()) if keys.dtype == object else (keys.dtype.str, keys.tobytes())


def _rows(change: ChangeSet, positions: npt.NDArray[np.intp], shape: Shape) -> msgspec.Raw:
    if not len(positions):
        return NO_ROWS
    names = with_companions(shape.columns, change.rows)
    return encode_rows(apply({c: change.rows[c][positions] for c in names}, shape, None))


@dataclass
class History:
    """One dataset's change sets by seq: the live window, and knowledge from the log.

    Attributes:
        latest: the newest seq seen live (-1: none yet).
        epoch: the stream those seqs belong to (-1: none yet).
    """

    window: int = WINDOW
    window_rows: int = WINDOW_ROWS
    latest: int = -1
    epoch: int = -1
    _live: OrderedDict[int, ChangeSet] = field(default_factory=OrderedDict)
    _learnt: OrderedDict[int, ChangeSet] = field(default_factory=OrderedDict)
    _asked: dict[int, tuple[int, int]] = field(default_factory=dict)

    def record(self, change: ChangeSet) -> None:
        """Remember a live batch's change set (the oldest beyond the window are forgotten).

        A seq seen before keeps its first change set: the publisher re-sends a quiet dataset's
        last seq to carry snapshots, and that copy is not pure.
        """
        if change.epoch != self.epoch:
            self.clear()  # a new stream: the old seqs mean nothing in it
            self.epoch = change.epoch
        if change.seq in self._live:
            return
        self._live[change.seq] = change
        self.latest = max(self.latest, change.seq)
        _bound(self._live, self.window, self.window_rows)

    def learn(self, change: ChangeSet) -> None:
        """Remember a micro-batch's whole change, from the publisher's log."""
        if change.epoch != self.epoch:
            return  # asked for before the stream changed
        self._learnt[change.seq] = change
        _bound(self._learnt, self.window, self.window_rows)

    def clear(self) -> None:
        """Forget everything (a new epoch)."""
        self._live.clear()
        self._learnt.clear()
        self._asked.clear()
        self.latest = -1
        self.epoch = -1

    def get(self, seq: int, trusted_after: int) -> ChangeSet | None:
        """The change set of ``seq`` usable for a view complete in the window after
        ``trusted_after``, or None if it must be learnt first."""
        live = self._live.get(seq)
        if live is not None and live.pure and seq > trusted_after:
            return live
        return self._learnt.get(seq)

    def wanted(self, first: int, trusted_after: int) -> tuple[int, int] | None:
        """The seqs to ask the publisher for so that ``first`` onwards can be served, or None
        when they are there or already asked for."""
        if first > self.latest or self.get(first, trusted_after) is not None:
            return None
        if any(a <= first <= b for a, b in self._asked.values()):
            return None
        last = first
        while (
            last + 1 <= self.latest
            and last + 1 - first < CURIOSITY_CHUNK
            and self.get(last + 1, trusted_after) is None
        ):
            last += 1
        return first, last

    def asked(self, req: int, first: int, last: int) -> None:
        """A curiosity request ``req`` for seqs first..last is on its way."""
        self._asked[req] = (first, last)

    def received(self, req: int, seq: int) -> None:
        """Knowledge of ``seq`` came in answer to ``req``: the request is settled at its last."""
        span = self._asked.get(req)
        if span is not None and seq >= span[1]:
            del self._asked[req]

    def answered(self, req: int) -> tuple[int, int] | None:
        """Request ``req`` is settled (answered or lost); returns its range."""
        return self._asked.pop(req, None)

    def owns(self, req: int) -> bool:
        """Whether request ``req`` is one of this dataset's."""
        return req in self._asked

    def forget_requests(self) -> None:
        """Requests in flight will not be answered (the publisher connection dropped)."""
        self._asked.clear()


def _bound(changes: OrderedDict[int, ChangeSet], limit: int, rows: int) -> None:
    total = sum(change.size for change in changes.values())
    while changes and (len(changes) > limit or total > rows):
        _, oldest = changes.popitem(last=False)
        total -= oldest.size
