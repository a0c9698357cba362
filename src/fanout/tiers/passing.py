"""A leader's workers' writes passed to its other workers before the publisher answers, sans I/O
(``relay.shell.workers``): on one process a write is shown at once to every ``latest``
subscriber it concerns; with workers, so it is to those of the other workers. Rules:

1. A worker's write (``Publish``) waits for the publisher's answer by (worker, its ``req``); one
   answered before it went upstream (refused by admission or the forwarder) is passed to none.
2. Forwarded, it is passed at once as ``Pending``, under a reference of the leader's, to the
   other workers it concerns (``Relays.on_written``'s choice); not whole rows: to none.
3. ``Published``: those told ``Pending`` are told ``Settled`` with its offsets, the others it
   concerns now ``Written``; refused: those told ``Settled`` with none, the others nothing.
4. A worker told ``Pending`` of a write gets no ``Written`` of it (it would count it twice).
5. Bounded by the leader's forwarder (``relay.core.forwarding``): each write is answered once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from fanout.errors import FanoutError
from fanout.relay.core.sends import Send
from fanout.tiers.below import Relays
from fanout.wire.messages import Error, Pending, Publish, Published, Settled, Written


@dataclass
class Waiting:
    """A worker's write waiting for the publisher's answer, and whom it was passed to."""

    request: Publish
    ref: int = 0  # the leader's reference in ``Pending`` (0: not passed)
    told: frozenset[int] = frozenset()


class PassedWrites:
    """The workers' writes waiting for the publisher's answers (the rules above).

    Attributes:
        passed: writes passed as ``Pending`` to a worker at least; invalid: not passed, their
            rows not whole (rule 2).
    """

    def __init__(self, relays: Relays) -> None:
        self._relays = relays
        self._waiting: dict[tuple[int, int | None], Waiting] = {}
        self._refs = itertools.count(1)
        self.passed = 0
        self.invalid = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def forwarding(self, client: int, request: Publish) -> None:
        """Worker ``client``'s write goes on to the publisher now (rule 1)."""
        self._waiting[(client, request.req)] = Waiting(request)

    def forwarded(self, client: int, request: Publish) -> list[Send]:
        """Worker ``client``'s write went on unless answered meanwhile: the ``Pending`` frames to
        the other workers it concerns (rule 2)."""
        waiting = self._waiting.get((client, request.req))
        if waiting is None:
            return []
        ref = next(self._refs)
        pending = Pending(ref, request.dataset, request.upserts, request.deletes)
        try:
            sends = [send for send in self._relays.on_written(pending) if send.to != client]
        except (FanoutError, TypeError, ValueError):
            self.invalid += 1  # the publisher refuses it, or its ``Written`` goes when logged
            return []
        waiting.ref, waiting.told = ref, frozenset(send.to for send in sends)
        self.passed += bool(sends)
        return sends

    def answered(self, client: int, answer: Published | Error) -> list[Send]:
        """The publisher answered worker ``client``'s write: what the other workers are told
        (rules 3 and 4)."""
        req = answer.req if isinstance(answer, Published) else answer.ref
        waiting = self._waiting.pop((client, req), None)
        if waiting is None:
            return []
        if isinstance(answer, Error):
            return [Send(to, Settled(waiting.ref)) for to in sorted(waiting.told)]
        settled = Settled(waiting.ref, answer.first, answer.last)
        request = waiting.request
        written = Written(
            request.dataset, answer.first, answer.last, request.upserts, request.deletes
        )
        others = [
            send
            for send in self._relays.on_written(written)
            if send.to != client and send.to not in waiting.told
        ]
        return [Send(to, settled) for to in sorted(waiting.told)] + others
