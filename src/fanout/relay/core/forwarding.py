"""Subscribers' writes on their way to the publisher through a relay (``Publish`` forwarded over
the upstream link; docs/protocol.md). Pure bookkeeping: the server sends what it says.

Rules:

1. A write is forwarded under a request number of the relay's own, negative, so that the
   publisher's answer (``Published``, or an ``Error`` whose ``ref`` is that number) cannot be
   taken for a primitive's.
2. The answer goes back to the subscriber that wrote, under the subscriber's ``req``.
3. At most ``limit`` writes wait for answers; past that, or while there is no publisher
   connection, a write is refused ``unavailable`` and nothing is sent.
4. When the publisher connection is lost, every waiting write is answered ``unavailable``: it
   may or may not have been applied.
"""

from __future__ import annotations

import itertools

import msgspec

from fanout.wire.messages import Error, Publish, Published

#: Writes waiting for the publisher's answer at a time, at most (rule 3).
MAX_FORWARDED = 1024


class Forwarder:
    """The writes a relay forwarded and whom each answer goes to (the rules above)."""

    def __init__(self, limit: int = MAX_FORWARDED) -> None:
        self.limit = limit
        self._waiting: dict[int, tuple[int, int]] = {}  # upstream req -> (client, its req)
        self._ids = itertools.count(-1, -1)

    def __len__(self) -> int:
        return len(self._waiting)

    def forward(self, client: int, request: Publish, connected: bool) -> Publish | Error:
        """What to do with a subscriber's write: send this ``Publish`` upstream, or answer the
        subscriber this ``Error`` (rules 1 and 3)."""
        if not connected:
            reason = "the relay has no connection to the publisher now; write again later"
        elif len(self._waiting) >= self.limit:
            reason = f"the relay forwards {self.limit} writes at most at a time"
        else:
            upstream = next(self._ids)
            self._waiting[upstream] = (client, request.req)
            return msgspec.structs.replace(request, req=upstream)
        return Error("unavailable", reason, ref=request.req)

    def answers(self, frame: object) -> bool:
        """Whether ``frame`` from the publisher answers a forwarded write."""
        match frame:
            case Published(req=req):
                return req in self._waiting
            case Error(ref=ref):
                return ref is not None and ref in self._waiting
        return False

    def answer(self, frame: Published | Error) -> tuple[int, Published | Error]:
        """(client, the frame to send it) for the publisher's answer (rule 2).

        Raises:
            KeyError: ``frame`` answers no forwarded write (see :meth:`answers`).
        """
        if isinstance(frame, Published):
            client, req = self._waiting.pop(frame.req)
            return client, msgspec.structs.replace(frame, req=req)
        assert frame.ref is not None
        client, req = self._waiting.pop(frame.ref)
        return client, msgspec.structs.replace(frame, ref=req)

    def lost(self) -> list[tuple[int, Error]]:
        """The publisher connection is gone: an ``unavailable`` for every waiting write (rule 4)."""
        message = "the relay lost its publisher connection: the write may or may not be applied"
        out = [
            (client, Error("unavailable", message, ref=req))
            for client, req in self._waiting.values()
        ]
        self._waiting.clear()
        return out
