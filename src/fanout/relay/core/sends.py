"""What the relay's core hands its shell: frames addressed to the publisher or to a client."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import msgspec

from fanout.wire import codec
from fanout.wire.messages import Error, Frame, NoUpdate, Subscribed, Unsubscribed

#: ``Send.to`` for frames bound to the publisher; clients are numbered from 1.
UPSTREAM = 0
#: The small frames a connection gets room of its own for (``fanout.connection.Outbound``):
#: answers to its requests and notices about its subscriptions, not pushes nor batches.
CONTROL = (Subscribed, Unsubscribed, Error, NoUpdate)


class Send(msgspec.Struct, frozen=True, gc=False):
    """A frame for the publisher (``to == UPSTREAM``) or for one client.

    ``frame`` is a frame, or the bytes of one already encoded (pushes, whose encoded rows may be
    shared by several subscribers).
    """

    to: int
    frame: Frame | bytes

    def message(self) -> Frame:
        """The frame, decoded if it was sent encoded (for tests and tools)."""
        if isinstance(self.frame, bytes):
            return codec.to_subscriber().decode(self.frame)
        return self.frame

    def data(self) -> bytes:
        """The frame's wire bytes."""
        return self.frame if isinstance(self.frame, bytes) else codec.encode(self.frame)

    @property
    def control(self) -> bool:
        """Whether it is a control frame (``CONTROL``)."""
        return isinstance(self.frame, CONTROL)


#: Ticks remembered for the shell's tick-to-push histogram between two of its reads.
PUSHED_TICKS = 4096


@dataclass
class Counters:
    """What the relay has done; see ``RelayCore.stats``.

    ``pushed_ticks``: the wall-clock time of the tick of each push since the shell last took
    them (``RelayCore.take_pushed_ticks``), for its tick-to-push latency; bounded (the oldest
    are dropped: the shell takes them after every round of pushes).
    """

    batches: int = 0
    pushes: int = 0
    no_updates: int = 0
    ended: int = 0
    curiosity_asked: int = 0
    curiosity_asked_seqs: int = 0
    pushed_ticks: deque[float] = field(default_factory=lambda: deque(maxlen=PUSHED_TICKS))
