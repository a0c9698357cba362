"""The curiosity of the relays below, merged in flight, sans I/O (Gryphon's curiosity streams).

A mid relay asked by several relays below for overlapping seqs asks its upstream once per gap:
1. **Asks.** An ask of (dataset, epoch, first..last) needs only the seqs no request in flight
   still awaits and the caller's window does not hold (it answers those itself); each run of
   the rest becomes one request upstream (a *flight*).
2. **Answers.** Upstream answers a flight with its seqs in order (``Knowledge``); each answer
   goes to every ask still waiting for that seq, once; an ask that has all its seqs is done.
3. **Refusals.** A refused flight fails every ask waiting for one of its seqs, once each.
While a flight awaits a seq no other flight awaits it: upstream is asked each seq at most once
while in flight. Why and how: docs/cluster.md (curiosity).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

#: (dataset, epoch): the stream the seqs belong to.
Stream = tuple[str, int]
#: (client, its request number): who asked, under which number.
Asker = tuple[int, int]


@dataclass
class Flight:
    """A request upstream: seqs ``next..last`` of ``stream`` are still awaited."""

    stream: Stream
    next: int
    last: int


@dataclass
class Ask:
    """An ask from below, with the seqs it still waits for."""

    asker: Asker
    stream: Stream
    waiting: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Request:
    """A request to send upstream, under our number ``req``: seqs ``first..last``."""

    req: int
    dataset: str
    epoch: int
    first: int
    last: int


class Curiosity:
    """The asks of the relays below and the flights upstream they share.

    Attributes:
        flights: the requests upstream not yet fully answered, by our number.
        asks: the asks from below still waiting, by an id of ours.
    """

    def __init__(self, first_req: int) -> None:
        """
        Args:
            first_req: the number of the first request upstream (then counting up).
        """
        self._reqs = itertools.count(first_req)
        self._ids = itertools.count()
        self.flights: dict[int, Flight] = {}
        self.asks: dict[int, Ask] = {}

    def ask(
        self,
        asker: Asker,
        dataset: str,
        epoch: int,
        first: int,
        last: int,
        *,
        held: frozenset[int] = frozenset(),
    ) -> list[Request]:
        """An ask from below for seqs ``first..last`` (``first <= last``) but those in ``held``
        (answered by the caller from its window): the requests to send upstream for those of
        its seqs no flight awaits (rule 1)."""
        stream = (dataset, epoch)
        waiting = set(range(first, last + 1)) - held
        if waiting:
            self.asks[next(self._ids)] = Ask(asker, stream, waiting)
        requests = []
        skipped = sorted([*self._awaited(stream), *((seq, seq) for seq in held)])
        for lo, hi in _gaps(first, last, skipped):
            req = next(self._reqs)
            self.flights[req] = Flight(stream, lo, hi)
            requests.append(Request(req, dataset, epoch, lo, hi))
        return requests

    def answer(self, req: int, seq: int) -> list[Asker]:
        """Upstream answered seq ``seq`` of flight ``req``: who gets it (rule 2; none: not
        ours, or a seq it no longer awaits)."""
        flight = self.flights.get(req)
        if flight is None or not flight.next <= seq <= flight.last:
            return []
        flight.next = seq + 1
        if flight.next > flight.last:
            del self.flights[req]
        askers = []
        for number, ask in list(self.asks.items()):
            if ask.stream == flight.stream and seq in ask.waiting:
                ask.waiting.discard(seq)
                askers.append(ask.asker)
                if not ask.waiting:
                    del self.asks[number]
        return askers

    def refused(self, req: int) -> list[Asker] | None:
        """Upstream refused flight ``req``: the asks it fails, each once (rule 3; None: not
        ours)."""
        flight = self.flights.pop(req, None)
        if flight is None:
            return None
        failed = []
        for number, ask in list(self.asks.items()):
            if ask.stream == flight.stream and any(
                flight.next <= seq <= flight.last for seq in ask.waiting
            ):
                del self.asks[number]
                failed.append(ask.asker)
        return failed

    def gone(self, client: int) -> None:
        """A relay below went away: its asks are forgotten (their flights still land here)."""
        self.asks = {n: a for n, a in self.asks.items() if a.asker[0] != client}

    def streams(self) -> set[Stream]:
        """The streams of the asks still waiting."""
        return {ask.stream for ask in self.asks.values()}

    def clear(self) -> None:
        """The upstream was lost: nothing is in flight any more, and no ask will be answered."""
        self.flights.clear()
        self.asks.clear()

    def _awaited(self, stream: Stream) -> list[tuple[int, int]]:
        return sorted((f.next, f.last) for f in self.flights.values() if f.stream == stream)


def _gaps(first: int, last: int, awaited: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs of ``first..last`` outside the ranges ``awaited`` (sorted by their start)."""
    gaps, at = [], first
    for lo, hi in awaited:
        if hi < at or lo > last:
            continue
        if lo > at:
            gaps.append((at, lo - 1))
        at = max(at, hi + 1)
    if at <= last:
        gaps.append((at, last))
    return gaps
