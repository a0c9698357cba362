"""Encoding and decoding frames: msgpack through msgspec, one typed decoder per direction."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from fanout.errors import ProtocolError
from fanout.wire.messages import Frame, FromPublisher, ToPublisher, ToRelay, ToSubscriber

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()


def encode(frame: Frame) -> bytes:
    """Encode one frame for a WebSocket binary message."""
    return _encoder.encode(frame)


class Decoder(Generic[T]):
    """Decodes the frames one side may receive; anything else is a :class:`ProtocolError`."""

    def __init__(self, union: Any) -> None:
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(union)

    def decode(self, data: bytes | str) -> T:
        """Decode one WebSocket message.

        Raises:
            ProtocolError: text messages, malformed msgpack, unknown frame types and invalid
                fields, with msgspec's account of where the problem is.
        """
        if isinstance(data, str):
            raise ProtocolError("text messages are not part of the protocol; send binary msgpack")
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, ValueError) as exc:
            # ValueError: msgspec lets UnicodeDecodeError through for a frame tag that is not
            # UTF-8; any other is bad input too, and answered the same way.
            raise ProtocolError(f"malformed frame: {exc}") from exc


def to_relay() -> Decoder[ToRelay]:
    """Decoder for frames a relay receives from subscribers."""
    return Decoder(ToRelay)


def to_subscriber() -> Decoder[ToSubscriber]:
    """Decoder for frames a subscriber receives from its relay."""
    return Decoder(ToSubscriber)


def to_publisher() -> Decoder[ToPublisher]:
    """Decoder for frames the publisher receives from relays and readers."""
    return Decoder(ToPublisher)


def from_publisher() -> Decoder[FromPublisher]:
    """Decoder for frames a relay or reader receives from the publisher."""
    return Decoder(FromPublisher)
