"""Assembling one dataset's stream from pieces that come from several upstreams, sans I/O
(the forward policy: docs/cluster.md). A seq is swapped in only once every piece of it came: a
view over two upstreams' parts never shows one at tick t, the other at t - 1 (CA 3197003
[0108], claim 9). Each upstream's pieces come in order on its connection. Rules:

1. An upstream is *expected* from ``expect`` until ``forget``; others' pieces are dropped.
2. An expected upstream is *started* by its first piece and then owes every later seq.
3. A seq is handed out whole (``Assembled``), in (epoch, seq) order, once no started, expected
   upstream owes it.
4. A piece of a seq already handed out is *stale*: dropped and handed back so that its snapshots
   are acquired again; but a *re-stamp* (snapshots stamped with the seq handed out last) is
   handed out alone.
5. A started upstream that skips seqs: the skipped seqs are never handed out; the core resyncs.
6. A second piece of an upstream and seq with snapshots joins the first; without, it is ignored.
   A piece older than the upstream's last is refused.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from fanout.errors import ProtocolError

#: (epoch, seq) of a micro-batch as the publisher stamped it.
Stamp = tuple[int, int]

P = TypeVar("P")


@dataclass(frozen=True)
class Assembled(Generic[P]):
    """A seq assembled whole.

    Attributes:
        stamp: its (epoch, seq).
        pieces: its pieces, one or more (the same upstream's re-stamp follows its piece).
        restamp: the pieces are snapshots re-sent at the seq handed out last (rule 4).
    """

    stamp: Stamp
    pieces: tuple[P, ...]
    restamp: bool = False


@dataclass
class _Upstream(Generic[P]):
    #: the stamp of its last piece, and of its last piece not queued any more
    last: Stamp | None = None
    before: Stamp | None = None
    #: (stamp, pieces of it) not handed out yet, in stamp order.
    queue: deque[tuple[Stamp, list[P]]] = field(default_factory=deque)


@dataclass
class Outcome(Generic[P]):
    """What adding a piece or forgetting an upstream gave.

    Attributes:
        assembled: the seqs handed out, in order.
        stale: pieces dropped because they came too late or around a gap (rules 4, 5).
    """

    assembled: list[Assembled[P]] = field(default_factory=list)
    stale: list[P] = field(default_factory=list)


class Assembly(Generic[P]):
    """One dataset's pieces from several upstreams, assembled seq by seq.

    Attributes:
        last: the stamp handed out last (None before the first).
    """

    def __init__(self) -> None:
        self._upstreams: dict[Hashable, _Upstream[P]] = {}
        self.last: Stamp | None = None

    def expect(self, upstream: Hashable) -> None:
        """Expect pieces from ``upstream`` (rule 1); a no-op if expected already."""
        self._upstreams.setdefault(upstream, _Upstream())

    def forget(self, upstream: Hashable) -> Outcome[P]:
        """Stop expecting ``upstream``: its pieces not handed out are dropped (returned as
        stale), and seqs that waited only for it are assembled."""
        gone = self._upstreams.pop(upstream, None)
        outcome: Outcome[P] = Outcome()
        if gone is not None:
            for _, pieces in gone.queue:
                outcome.stale.extend(pieces)
        self._assemble(outcome)
        return outcome

    def rewrite(self, upstream: Hashable, change: Callable[[P], P]) -> None:
        """Replace each piece of ``upstream`` not handed out yet by ``change(piece)``."""
        state = self._upstreams.get(upstream)
        for _, pieces in () if state is None else state.queue:
            pieces[:] = [change(piece) for piece in pieces]

    def expected(self) -> set[Hashable]:
        """The upstreams expected."""
        return set(self._upstreams)

    def waiting_for(self) -> set[Hashable]:
        """The started upstreams whose next piece the next seq waits for."""
        return {u for u, state in self._upstreams.items() if self._owes(state)}

    def add(self, upstream: Hashable, stamp: Stamp, piece: P, *, snapshots: bool) -> Outcome[P]:
        """Take a piece of seq ``stamp`` from ``upstream`` (``snapshots``: it carries some).

        Raises:
            ProtocolError: the piece is older than the upstream's last (rule 6).
        """
        outcome: Outcome[P] = Outcome()
        state = self._upstreams.get(upstream)
        if state is None:
            outcome.stale.append(piece)
            return outcome
        if state.last is not None and stamp < state.last:
            raise ProtocolError(f"upstream piece {stamp} after {state.last}: out of order")
        if state.last == stamp:
            self._again(state, stamp, piece, snapshots, outcome)
        else:
            state.last = stamp
            if self.last is not None and stamp <= self.last:
                state.before = stamp
                if snapshots and stamp == self.last:
                    outcome.assembled.append(Assembled(stamp, (piece,), restamp=True))
                else:
                    outcome.stale.append(piece)
            else:
                state.queue.append((stamp, [piece]))
        self._assemble(outcome)
        return outcome

    def _again(
        self, state: _Upstream[P], stamp: Stamp, piece: P, snapshots: bool, outcome: Outcome[P]
    ) -> None:
        """A second piece of the upstream's last seq (rule 6, or a re-stamp: rule 4)."""
        if not snapshots:
            return
        if state.queue and state.queue[-1][0] == stamp:
            state.queue[-1][1].append(piece)
        elif stamp == self.last:
            outcome.assembled.append(Assembled(stamp, (piece,), restamp=True))
        else:
            outcome.stale.append(piece)

    def _owes(self, state: _Upstream[P]) -> bool:
        return state.last is not None and not state.queue

    def _assemble(self, outcome: Outcome[P]) -> None:
        while True:
            heads = [state.queue[0][0] for state in self._upstreams.values() if state.queue]
            if not heads or any(self._owes(s) for s in self._upstreams.values()):
                return
            stamp = min(heads)
            pieces: list[P] = []
            skipped = False
            for state in self._upstreams.values():
                if state.queue and state.queue[0][0] == stamp:
                    pieces.extend(state.queue.popleft()[1])
                    state.before = stamp
                elif state.queue and self._skipped(state, stamp):
                    skipped = True
            if skipped:
                outcome.stale.extend(pieces)
            else:
                outcome.assembled.append(Assembled(stamp, tuple(pieces)))
                self.last = stamp

    def _skipped(self, state: _Upstream[P], stamp: Stamp) -> bool:
        """Whether an upstream whose next piece is later than ``stamp`` skipped it (rule 5):
        a piece of it came before, of the same epoch and before ``stamp``."""
        before = state.before
        return before is not None and before[0] == stamp[0] and before < stamp
