"""Exactly once between relays: sequence numbers per peer link, resent until acknowledged,
deduplicated on receipt. No sockets here (``cluster`` carries the bytes).

Rules:

1. The sending relay numbers what it forwards to each peer 1, 2, 3, ... (per peer and per
   incarnation of the sender: a relay that restarts starts again at 1 under a new name) and
   keeps each message until the peer acknowledges its number (``Outgoing``).
2. A connection to the peer that breaks loses nothing: on the next connection the sender sends
   again, in order, every message not acknowledged, then the new ones.
3. The receiving relay delivers a message only if its number is above the last it delivered of
   that sender (``Incoming``): a message sent again is acknowledged and not delivered twice.
   It acknowledges the last number it delivered after each read.
4. Bounds: at most ``limit`` messages wait for their acknowledgement per peer (past that the
   oldest is dropped and counted: ``dropped``); a receiver remembers ``SENDERS`` senders (the
   oldest forgotten first).
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
