"""One ``/v1/subscribe`` stream: a downstream connection of the relay holding one subscription,
written to as events (``http.api``) in an HTTP/1.1 chunked response framed by h11.

A stream is pushed to like a WebSocket subscriber: only when its connection has written
everything before (the transport's buffer limit is 0, as for WebSocket subscribers), so a slow
reader gets fewer, larger deltas and never delays anyone; one that leaves a push unread for
``stall_timeout`` seconds is cut off by the relay's housekeeping (``close``).

Every event is one chunk; the stream ends with the last chunk when the subscription ends. A
stream whose part moved to another relay ends normally after a ``moved`` event
(``http.api.MOVE_RETRY_MS``): its client makes the request again, here or there, and is
redirected or served. Before a request is redirected, the relay makes sure its map is not a beat
old (``RelayApi.confirm``): an HTTP client never asks to stay, and a relay just handed a part
would otherwise send the request back, round in a circle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING

import h11

from fanout import expiry
from fanout.errors import ProtocolError, Unauthorized
from fanout.http.answers import SERVER, refusal, request_token, response, unauthorized
from fanout.http.api import (
    CONTENT_TYPES,
    SUB,
    EventStream,
    Format,
    HttpError,
    StreamRequest,
    parse_subscribe,
    same_request_at,
)
from fanout.relay.api import RelayApi
from fanout.wire import codec
from fanout.wire.messages import Error

if TYPE_CHECKING:
    from fanout.http.server import PortConnection

log = logging.getLogger(__name__)

#: Seconds a finished stream's last bytes may take to go out before the socket is dropped.
LINGER = 5.0
#: HTTP status of each error code the relay's core answers a subscription with.
_STATUS = {
    "unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
    "forbidden": HTTPStatus.FORBIDDEN,
    "unknown_dataset": HTTPStatus.NOT_FOUND,
}


class HttpSubscription:
    """One ``/v1/subscribe`` stream (``relay.api.Downstream``).

    Attributes:
        sent: events written.
        sent_bytes: bytes of those events (chunk framing not counted).
        closed_for: why ``close`` cut the stream off, if it did.
        grant: what the request's token grants (None without authentication).
    """

    def __init__(
        self, connection: PortConnection, relay: RelayApi, target: str, headers: Mapping[str, str]
    ) -> None:
        """A stream answering the request for ``target`` with ``headers`` (lower-case names)."""
        self._connection = connection
        self._relay = relay
        self._target = target
        self._headers = headers
        self._loop = asyncio.get_running_loop()
        self._decoder = codec.to_subscriber()
        self._events: EventStream | None = None
        self._head_sent = False
        #: Whether the response is complete (a refusal, or the last chunk written).
        self._finished = False
        self._format: Format = "ndjson"
        self._ended = self._loop.create_future()
        self._stalled_since: float | None = None
        self.sent = 0
        self.sent_bytes = 0
        self.closed_for: str | None = None
        self.grant: object = None

    async def run(self) -> None:
        """Serve the stream until its subscription ends or the client goes away."""
        relay = self._relay
        try:
            request = self._parse()
        except HttpError as exc:
            self._connection.answer(refusal(exc))
            self._head_sent = self._finished = True
            await self._close()
            return
        self._events = EventStream(
            request.format, request.subscribe.mode, request.subscribe.resume, path=self._target
        )
        self._format = request.format
        await relay.confirm(request.subscribe)
        client = relay.open(self)
        relay.connect(client, self.grant)
        self._connection.on_resume = lambda: self._resumed(client)
        try:
            relay.subscribe(client, request.subscribe)
            ends = expiry.deadline(self.grant, self._loop)
            done, _ = await asyncio.wait(
                [self._ended, self._connection.lost],
                timeout=None if ends is None else ends - self._loop.time(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:  # the token expired: a last error event, and the stream ends
                self.offer(codec.encode(expiry.expired()))
        finally:
            relay.closed(relay.close(client))
            self._connection.on_resume = None
            await self._close()

    def _parse(self) -> StreamRequest:
        relay = self._relay
        try:
            self.grant = relay.authenticate(request_token(self._headers, self._target))
        except Unauthorized as exc:
            raise unauthorized(exc) from None
        query = urllib.parse.urlsplit(self._target).query
        datasets = {info.name: info.index for info in relay.catalog()}
        request = parse_subscribe(query, self._headers, datasets)
        why = relay.room()
        if why is not None:
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", why)
        return request

    # -- what the relay's shell calls (as on a WebSocket subscriber's ``Outbound``) --------

    @property
    def idle(self) -> bool:
        """Everything written: the stream may take the next push."""
        return not self._connection.paused and not self._connection.transport.is_closing()

    def stalled_for(self, now: float) -> float:
        """Seconds the stream has held bytes the client did not read (0 if none)."""
        return 0.0 if self._stalled_since is None else time.monotonic() - self._stalled_since

    def offer_probed(self, data: bytes, acked: Callable[[float], None]) -> bool:
        """``offer(data)``; no acknowledgements on HTTP: its link is not estimated
        (``relay.core.links``)."""
        self.offer(data)
        return False

    def offer(self, data: bytes, control: bool = False) -> bool:
        """Write the event for one frame of the relay's to this connection (written at once,
        control frame or not: a stream has no queue of frames).

        Returns:
            Whether it was written (not after the stream ended).
        """
        if self._ended.done() or self._events is None:
            return False
        try:
            frame = self._decoder.decode(data)
            if not self._head_sent and isinstance(frame, Error) and frame.ref == SUB:
                self._refuse(self._refusal(frame))
                self._ended.set_result(None)
                return True
            event = self._events.event(frame)
        except ProtocolError as exc:  # the relay's own frame: a bug, said, and the stream ends
            log.error("HTTP stream %s: %s", self._peer(), exc)
            self._end()
            return False
        if event:
            self._write_event(event)
        if self._events.ended:
            self._end()
        return True

    def abort(self) -> None:
        """Drop the connection at once (the stream failed)."""
        self._connection.transport.abort()

    def close(self, reason: str) -> None:
        """Cut the stream off (a slow consumer): it is dropped at once, unread bytes too."""
        if self.closed_for is None:
            log.warning("closing HTTP stream %s: %s", self._peer(), reason)
            self.closed_for = reason
            self._connection.transport.abort()

    # -- writing -----------------------------------------------------------------------

    def _write_event(self, event: bytes) -> None:
        if not self._head_sent:
            self._head_sent = True
            self._connection.send(response(HTTPStatus.OK, self._stream_headers()))
        self._connection.send(h11.Data(data=event))
        self.sent += 1
        self.sent_bytes += len(event)
        if self._connection.paused and self._stalled_since is None:
            self._stalled_since = time.monotonic()

    def _stream_headers(self) -> list[tuple[str, str]]:
        headers = [
            ("Content-Type", CONTENT_TYPES[self._format]),
            ("Cache-Control", "no-store"),
            ("Access-Control-Allow-Origin", "*"),
            ("Connection", "close"),
            ("Server", SERVER),
            ("Transfer-Encoding", "chunked"),
        ]
        if self._format == "sse":
            headers.append(("X-Accel-Buffering", "no"))  # proxies such as nginx: hold nothing
        return headers

    def _resumed(self, client: int) -> None:
        self._stalled_since = None
        self._relay.writable(client)

    def _end(self) -> None:
        if not self._ended.done():
            self._ended.set_result(None)

    def _refusal(self, error: Error) -> HttpError:
        """The HTTP answer to the relay's refusal of the stream's subscription: a redirect to
        another relay is a 307 to the same request there, which HTTP clients follow (a
        browser's ``EventSource``, ``fetch``, ``curl -L``)."""
        if error.code == "redirect" and error.location is not None:
            location = same_request_at(error.location, self._target)
            return HttpError(HTTPStatus.TEMPORARY_REDIRECT, error.code, error.message, location)
        status = _STATUS.get(error.code, HTTPStatus.BAD_REQUEST)
        return HttpError(status, error.code, error.message)

    def _refuse(self, error: HttpError) -> None:
        self._connection.answer(refusal(error))
        self._head_sent = self._finished = True

    async def _close(self) -> None:
        """End the response (its last chunk) and close the connection once it is written."""
        transport = self._connection.transport
        if self._head_sent and not self._finished and not transport.is_closing():
            self._connection.send(h11.EndOfMessage())
        self._finished = True
        if not transport.is_closing():
            transport.close()  # after the buffered bytes are written
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._connection.lost), LINGER)

    def _peer(self) -> object:
        return self._connection.transport.get_extra_info("peername")
