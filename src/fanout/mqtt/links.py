"""Exactly once between relays: sequence numbers per peer link, resent until acknowledged,
deduplicated on receipt. No sockets here (``cluster`` carries the bytes). Rules:

1. A sender numbers what it forwards to each peer 1, 2, 3, ... (per incarnation) and keeps each
   message until acknowledged (``Outgoing``), or until it gives the peer up for dead (``drop``):
   numbers go on from there, never from 1 again.
2. On a new connection it sends again, in order, every message not acknowledged, then new ones.
3. A receiver delivers only numbers above the last it delivered of that sender (``Incoming``)
   and acknowledges the last after each read.
4. Bounds: ``limit`` unacknowledged messages per peer (the oldest dropped and counted), and
   ``SENDERS`` senders remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

SENDERS = 1000


class Outgoing:
    """One peer's link, sender side (rules 1, 2 and 4)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.next = 1
        self.unacked: OrderedDict[int, bytes] = OrderedDict()
        self.written = 0  # the last number written on the current connection
        self.dropped = 0

    def add(self, packet: Callable[[int], bytes]) -> int:
        """Number the next message (``packet(number)`` is its bytes) and keep it; its number."""
        number = self.next
        self.next += 1
        self.unacked[number] = packet(number)
        while len(self.unacked) > self.limit:
            self.unacked.popitem(last=False)
            self.dropped += 1
        return number

    def ack(self, number: int) -> None:
        """The peer delivered every message up to ``number``."""
        while self.unacked and next(iter(self.unacked)) <= number:
            self.unacked.popitem(last=False)

    def drop(self) -> int:
        """Give up what waits (its peer looks dead); how many. Numbering goes on: a peer that
        lived after all delivers only numbers above its last (rule 3), so numbers never restart
        on a link to one incarnation."""
        dropped = len(self.unacked)
        self.unacked.clear()
        return dropped

    def reconnected(self) -> None:
        """A new connection: everything not acknowledged is to be written again (rule 2)."""
        self.written = 0

    def to_write(self) -> list[bytes]:
        """The messages not yet written on this connection, in order; marked written."""
        out = [data for number, data in self.unacked.items() if number > self.written]
        if self.unacked:
            self.written = max(self.written, next(reversed(self.unacked)))
        return out


class Incoming:
    """Every sender's last delivered number, receiver side (rules 3 and 4)."""

    def __init__(self) -> None:
        self.last: OrderedDict[str, int] = OrderedDict()
        self.duplicates = self.gaps = 0

    def accept(self, sender: str, number: int) -> bool:
        """Whether message ``number`` of ``sender`` is new (deliver it) or came before."""
        last = self.last.get(sender, 0)
        if number <= last:
            self.duplicates += 1
            return False
        if number > last + 1 and last:
            self.gaps += 1  # the sender dropped some past its bound (rule 4)
        self.last[sender] = number
        self.last.move_to_end(sender)
        while len(self.last) > SENDERS:
            self.last.popitem(last=False)
        return True
