"""The handshake and error rules of every connection, sans I/O (docs/protocol.md).

Rules, for the accepting side (relay for subscribers, publisher for relays and readers):

1. The first frame must be ``Hello`` with our ``PROTOCOL_VERSION`` and a role we serve; it is
   answered with ``Welcome``. Anything else first is answered with ``Error`` and the connection
   closes: we cannot know how to talk to that peer. With authentication, the ``Hello``'s token
   must grant its role, or the connection is refused (``unauthorized``, ``forbidden``).
2. After the handshake, a frame that does not decode (or a second ``Hello``) is answered with
   ``Error`` and the connection stays open: one bad frame must not cost a subscriber its other
   subscriptions.
3. A peer that sends ``MAX_BAD_FRAMES`` bad frames in a row is closed: it is not speaking our
   protocol and would otherwise cost us decode work forever.

The connecting side sends ``Hello`` and expects ``Welcome``; an ``Error`` instead is a refusal.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec

from fanout.errors import ProtocolError, Unauthorized
from fanout.wire.codec import Decoder
from fanout.wire.messages import PROTOCOL_VERSION, Error, Frame, Hello, Role, Welcome

MAX_BAD_FRAMES = 16

T = TypeVar("T")


class Phase(enum.Enum):
    """Where a connection is in its life."""

    AWAIT_HELLO = "await_hello"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What one received message leads to: a frame for the application, a reply, a close."""

    deliver: T | None = None
    reply: Frame | None = None
    close: bool = False


class AcceptingSession(Generic[T]):
    """Handshake and error policy for the side that accepts connections."""

    def __init__(
        self,
        decoder: Decoder[T],
        server: str,
        roles: frozenset[Role],
        *,
        room: Callable[[], str | None] = lambda: None,
        datasets: Callable[[object], dict[str, str]] = lambda grant: {},
        authenticate: Callable[[Hello], object] | None = None,
    ) -> None:
        """Args:
        decoder: decodes the frames this side takes.
        server: this side's name, in its ``Welcome``.
        roles: the roles it serves.
        room: asked when a valid ``Hello`` arrives: None to admit the connection, else why
            there is no room for it (refused with code ``unavailable``).
        datasets: asked when a ``Hello`` is admitted, with what its token grants: the datasets
            served to it and the kind of each one's index, for the ``Welcome`` (a relay's, to
            its subscribers).
        authenticate: asked when a ``Hello`` of a served role arrives, before anything else:
            what its token grants (kept as ``grant``), or raises ``Unauthorized``, and the
            connection is refused with the error's code (``unauthorized``, ``forbidden``)
            and closed. None: no authentication.
        """
        self._decoder = decoder
        self._server = server
        self._roles = roles
        self._room = room
        self._datasets = datasets
        self._authenticate = authenticate
        #: What the peer's token grants (``authenticate``'s answer), once admitted.
        self.grant: object = None
        self.phase = Phase.AWAIT_HELLO
        self.hello: Hello | None = None
        self.session_id = uuid.uuid4().hex[:12]
        self.bad_frames = 0

    def receive(self, data: bytes | str) -> Outcome[T]:
        """Take one WebSocket message; say what to deliver, reply and whether to close."""
        if self.phase is Phase.CLOSED:
            return Outcome(close=True)
        try:
            frame = self._decoder.decode(data)
        except ProtocolError as exc:
            return self._bad_frame(str(exc), _reference(data))
        if self.phase is Phase.AWAIT_HELLO:
            return self._handshake(frame)
        if isinstance(frame, Hello):
            return self._bad_frame("duplicate hello: the handshake is already done")
        self.bad_frames = 0
        return Outcome(deliver=frame)

    def _handshake(self, frame: T) -> Outcome[T]:
        if not isinstance(frame, Hello):
            return self._refuse(f"expected hello first, got {type(frame).__name__.lower()}")
        if frame.version != PROTOCOL_VERSION:
            return self._refuse(
                f"protocol version {frame.version} is not supported (this side speaks"
                f" {PROTOCOL_VERSION})"
            )
        if frame.role not in self._roles:
            return self._refuse(f"role {frame.role!r} is not served here ({sorted(self._roles)})")
        if self._authenticate is not None:
            try:
                self.grant = self._authenticate(frame)
            except Unauthorized as exc:
                return self._refuse(exc.message, code=exc.code)
        if (full := self._room()) is not None:
            return self._refuse(full, code="unavailable")
        self.phase = Phase.OPEN
        self.hello = frame
        welcome = Welcome(
            version=PROTOCOL_VERSION,
            server=self._server,
            session=self.session_id,
            datasets=self._datasets(self.grant),
        )
        return Outcome(reply=welcome)

    def _refuse(self, message: str, code: str = "handshake") -> Outcome[T]:
        self.phase = Phase.CLOSED
        return Outcome(reply=Error(code=code, message=message), close=True)

    def _bad_frame(self, message: str, ref: int | None = None) -> Outcome[T]:
        if self.phase is Phase.AWAIT_HELLO:
            return self._refuse(message)
        self.bad_frames += 1
        if self.bad_frames >= MAX_BAD_FRAMES:
            self.phase = Phase.CLOSED
            closing = f"{message} ({self.bad_frames} bad frames in a row; closing)"
            return Outcome(reply=Error(code="protocol", message=closing, ref=ref), close=True)
        return Outcome(reply=Error(code="protocol", message=message, ref=ref))


def _reference(data: bytes | str) -> int | None:
    """The ``sub``, ``req`` or ``prim`` a frame that failed to decode names, if it can be read:
    so that a ``Subscribe`` whose view is invalid is refused as that subscription's error."""
    if isinstance(data, str):
        return None
    try:
        fields = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
        # Not msgpack, or msgpack with a string that is not UTF-8 (UnicodeDecodeError) or a key
        # that cannot key a dict: no reference to read, and the frame is refused all the same.
        return None
    if not isinstance(fields, dict):
        return None
    for name in ("sub", "req", "prim"):
        value = fields.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class HandshakeRefused(ProtocolError):
    """The accepting side answered our ``Hello`` with an ``Error``.

    Attributes:
        code: the ``Error``'s code: ``handshake`` (this side's ``Hello`` was refused), or
            ``unavailable`` (the peer has no room for another connection: try another).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def check_welcome(frame: object) -> Welcome:
    """Validate the accepting side's first frame.

    Raises:
        HandshakeRefused: if it is an ``Error`` (the peer's message is kept).
        ProtocolError: if it is anything else but a compatible ``Welcome``.
    """
    if isinstance(frame, Error):
        raise HandshakeRefused(frame.code, frame.message)
    if not isinstance(frame, Welcome):
        raise ProtocolError(f"expected welcome, got {type(frame).__name__.lower()}")
    if frame.version != PROTOCOL_VERSION:
        raise ProtocolError(f"peer speaks protocol {frame.version}, we speak {PROTOCOL_VERSION}")
    return frame
