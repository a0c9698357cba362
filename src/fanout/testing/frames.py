"""A frame's header decoded, the rest skipped: for peers that must leave the cores to what they
measure (benchmark clients, model relays).

Decoding a whole push or batch builds every column; a benchmark with thousands of subscribers
in one process would spend its cores there. :func:`head` decodes the fields that say what a
frame is and whom it is for (any frame of the protocol, either direction); msgspec skips the
others, and the rows of a batch are only counted::

    frame = head(message)
    if frame.type == "push":
        received.append((frame.sub, frame.seq, len(message)))
"""

from __future__ import annotations

import msgspec


class Rows(msgspec.Struct, frozen=True):
    """A ``Columns`` payload's row count; its columns are skipped undecoded."""

    length: int = 0


class Head(msgspec.Struct, frozen=True):
    """The fields of a frame that say what it is (``fanout.wire.messages``); absent ones keep
    their defaults.

    Attributes:
        type: the frame's tag (``push``, ``no_update``, ``batch``, ``error``, ...).
        sub: the subscription of a push, no-update or reply to a subscriber.
        seq, tick, tick_time: a push's, no-update's or batch's stamp.
        snapshots: the primitives whose snapshot a batch carries.
        upserts, deletes: a batch's row counts.
        code, message, ref, location: an error's (location: a redirect's relay).
    """

    type: str
    sub: int = 0
    seq: int = -1
    tick: int = -1
    tick_time: float = 0.0
    snapshots: list[int] = []
    upserts: Rows = Rows()
    deletes: Rows = Rows()
    code: str = ""
    message: str = ""
    ref: int | None = None
    location: str | None = None


_decode = msgspec.msgpack.Decoder(Head).decode


def head(message: bytes | memoryview) -> Head:
    """Decode a frame's header.

    Raises:
        msgspec.DecodeError: the message is not a msgpack map with a string ``type``.
    """
    return _decode(message)


def whole(message: bytes | memoryview) -> object:
    """Decode a message as plain msgpack (to quote an unexpected frame in full)."""
    return msgspec.msgpack.decode(message)
