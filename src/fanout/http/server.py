"""The relay's HTTP side on its WebSocket port: the streaming API and plain JSON answers.

websockets accepts every connection on the relay's port and reads its HTTP request. A request
for ``/v1/subscribe`` that is not a WebSocket upgrade is answered here, as a stream
(:class:`HttpSubscription`): the connection's ``handshake`` (``HttpConnection``) hands it over
instead of upgrading, and the stream holds one subscription of the relay's core, as a
WebSocket subscriber holds many, until the subscription ends or the client goes away. Other
plain requests (``GET /v1/datasets``, ``GET /metrics``) are answered whole by ``process_request``
(:func:`routes`). The events' content is ``http.api``'s.

A stream is pushed to like a WebSocket subscriber: only when its connection has written
everything before (the transport's buffer limit is 0, as for WebSocket subscribers), so a slow
reader gets fewer, larger deltas and never delays anyone; one that leaves a push unread for
``stall_timeout`` seconds is cut off by the relay's housekeeping (``close``).

The response is HTTP/1.1 chunked: every event is one chunk, the stream ends with the last
chunk when the subscription ends. A stream whose part moved to another relay ends normally
after a ``moved`` event (``http.api.MOVE_RETRY_MS``): its client makes the request again,
here or there, and is redirected or served. Before a request is redirected, the relay makes
sure its map is not a beat old (``RelayApi.confirm``): an HTTP client never asks to stay, and a
relay just handed a part would otherwise send the request back, round in a circle.

``OPTIONS`` on the API's paths is a CORS preflight, answered with the methods and headers
allowed (a browser's ``EventSource`` reconnecting to another relay sends ``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from importlib import resources
from typing import ClassVar

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import SERVER, Request, Response

from fanout import expiry, metrics
from fanout.errors import ProtocolError, Unauthorized
from fanout.http.api import (
    CONTENT_TYPES,
    SUB,
    EventStream,
    Format,
    HttpError,
    StreamRequest,
    datasets_json,
    not_a_get,
    parse_subscribe,
    same_request_at,
)
from fanout.relay.api import RelayApi
from fanout.relay.core.rules import visible
from fanout.wire import codec
from fanout.wire.messages import Error

log = logging.getLogger(__name__)

SUBSCRIBE = "/v1/subscribe"
DATASETS = "/v1/datasets"
#: The live viewer's files (``http/viewer/``), by the path they are served at.
VIEWER = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
}
#: Seconds a finished stream's last bytes may take to go out before the socket is dropped.
LINGER = 5.0
#: HTTP status of each error code the relay's core answers a subscription with.
_STATUS = {
    "unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
    "forbidden": HTTPStatus.FORBIDDEN,
    "unknown_dataset": HTTPStatus.NOT_FOUND,
}

Hook = Callable[[ServerConnection, Request], Response | None]
#: websockets' hooks, as ``ServerConnection.handshake`` takes them.
RequestHook = Callable[[ServerConnection, Request], Awaitable[Response | None] | Response | None]
ResponseHook = Callable[
    [ServerConnection, Request, Response], Awaitable[Response | None] | Response | None
]


class HttpConnection(ServerConnection):
    """A connection on the relay's port: a WebSocket, or an HTTP stream (``/v1/subscribe``).

    ``relay`` and ``opening`` are set on the subclass :func:`connection_type` makes.
    """

    relay: ClassVar[RelayApi]
    #: Seconds a new connection may take to send its request and finish the WebSocket
    #: handshake (websockets' ``open_timeout``, which ``serve`` leaves off: it would also
    #: bound a stream, which lasts as long as its subscription).
    opening: ClassVar[float]
    on_resume: Callable[[], None] | None = None

    async def handshake(
        self,
        process_request: RequestHook | None = None,
        process_response: ResponseHook | None = None,
        server_header: str | None = SERVER,
    ) -> None:
        """Answer a stream request with a stream, anything else as websockets would."""
        deadline = asyncio.get_running_loop().time() + self.opening
        async with asyncio.timeout_at(deadline):
            await asyncio.wait(
                [self.request_rcvd, self.connection_lost_waiter],
                return_when=asyncio.FIRST_COMPLETED,
            )
        request = self.request
        if request is not None and _api_not_get(request):
            status, extra, body = not_a_get(request.method)
            head = _head(status, "application/json", length=len(body), extra=extra)
            self.transport.write(head + body)
            self.transport.close()
            return
        if request is not None and _is_stream(request):
            await HttpSubscription(self, request).run()
            return
        async with asyncio.timeout_at(deadline):
            await super().handshake(process_request, process_response, server_header)

    def resume_writing(self) -> None:
        """The transport wrote what it held: tell the stream (flow control)."""
        super().resume_writing()
        if self.on_resume is not None:
            self.on_resume()


class HttpFrontEnd:
    """HTTP on the relay's port (``relay.api.FrontEnd``): the WebSocket server's port takes
    every connection, and hands plain requests here through ``process_request`` and the
    connection class of ``connection_type``."""

    def __init__(self) -> None:
        self._relay: RelayApi | None = None
        self._routes: Hook | None = None

    async def start(self, relay: RelayApi, tasks: asyncio.TaskGroup) -> None:
        """Answer the relay's plain HTTP requests from now on (nothing of its own to run)."""
        self._relay = relay
        self._routes = routes(relay, metrics.route(relay.samples, relay.unready))

    async def stop(self) -> None:
        """Nothing to stop: streams end with the port's connections."""

    @property
    def relay(self) -> RelayApi:
        """The relay it serves, once started."""
        assert self._relay is not None, "the HTTP front end is not started"
        return self._relay

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """websockets' ``process_request`` hook: the API's and the viewer's plain answers,
        ``/metrics`` and the probes (``metrics.route``); None for a WebSocket handshake."""
        assert self._routes is not None, "the HTTP front end is not started"
        return self._routes(connection, request)

    def connection_type(self, opening: float) -> type[HttpConnection]:
        """The connection class for websockets' ``serve(create_connection=...)``."""
        return connection_type(self.relay, opening)


def connection_type(relay: RelayApi, opening: float) -> type[HttpConnection]:
    """The connection class for websockets' ``serve(create_connection=...)``."""
    return type("RelayConnection", (HttpConnection,), {"relay": relay, "opening": opening})


def routes(relay: RelayApi, fallback: Hook) -> Hook:
    """A ``process_request`` hook answering ``GET /v1/datasets`` and the viewer's files
    (``GET /``), then ``fallback``'s paths."""

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in VIEWER and not _upgrade(request):
            return viewer_file(path)
        if path == DATASETS and not _upgrade(request):
            try:
                grant = relay.authenticate(request_token(request))
            except Unauthorized as exc:
                return refusal(_unauthorized(exc))
            shown = visible({info.name: info for info in relay.catalog()}, grant)
            return json_response(HTTPStatus.OK, datasets_json(list(shown.values())))
        return fallback(connection, request)

    return process_request


def json_response(status: int, body: bytes, extra: list[tuple[str, str]] = []) -> Response:  # noqa: B006  # not mutated
    """A whole JSON response."""
    headers = Headers(
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("Connection", "close"),
            *extra,
        ]
    )
    return Response(status, HTTPStatus(status).phrase, headers, body)


def viewer_file(path: str) -> Response:
    """One of the viewer's files, packaged with fanout (``http/viewer/``)."""
    name, content_type = VIEWER[path]
    body = _viewer_bytes(name)
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-cache"),
            ("X-Content-Type-Options", "nosniff"),
            ("Connection", "close"),
        ]
    )
    return Response(HTTPStatus.OK, "OK", headers, body)


@functools.cache
def _viewer_bytes(name: str) -> bytes:
    return (resources.files("fanout.http") / "viewer" / name).read_bytes()


def refusal(error: HttpError) -> Response:
    """A refused request's whole response."""
    return json_response(error.status, error.body(), _challenge(error))


def request_token(request: Request) -> str | None:
    """The token a request presents: ``Authorization: Bearer ...``, else ``access_token=``
    in the query (for clients that cannot set headers: a browser's ``EventSource``)."""
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    query = urllib.parse.urlsplit(request.path).query
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name == "access_token":
            return value
    return None


def _unauthorized(exc: Unauthorized) -> HttpError:
    status = HTTPStatus.FORBIDDEN if exc.code == "forbidden" else HTTPStatus.UNAUTHORIZED
    return HttpError(status, exc.code, exc.message)


def _challenge(error: HttpError) -> list[tuple[str, str]]:
    """RFC 6750's ``WWW-Authenticate`` for a 401: which scheme to use."""
    if error.status != HTTPStatus.UNAUTHORIZED:
        return []
    return [("WWW-Authenticate", 'Bearer realm="fanout", error="invalid_token"')]


class HttpSubscription:
    """One ``/v1/subscribe`` stream: a downstream connection of the relay holding one
    subscription, written to as events.

    Attributes:
        sent: events written.
        sent_bytes: bytes of those events (chunk framing not counted).
        closed_for: why ``close`` cut the stream off, if it did.
    """

    def __init__(self, connection: HttpConnection, request: Request) -> None:
        self._connection = connection
        self._request = request
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
        #: What the request's token grants (None without authentication).
        self.grant: object = None

    async def run(self) -> None:
        """Serve the stream until its subscription ends or the client goes away."""
        relay = self._connection.relay
        try:
            request = self._parse(relay)
        except HttpError as exc:
            self._refuse(exc)
            await self._close()
            return
        self._events = EventStream(
            request.format,
            request.subscribe.mode,
            request.subscribe.resume,
            path=self._request.path,
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
                [self._ended, self._connection.connection_lost_waiter],
                timeout=None if ends is None else ends - self._loop.time(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:  # the token expired: a last error event, and the stream ends
                self.offer(codec.encode(expiry.expired()))
        finally:
            relay.closed(relay.close(client))
            self._connection.on_resume = None
            await self._close()

    def _parse(self, relay: RelayApi) -> StreamRequest:
        try:
            self.grant = relay.authenticate(request_token(self._request))
        except Unauthorized as exc:
            raise _unauthorized(exc) from None
        query = urllib.parse.urlsplit(self._request.path).query
        datasets = {info.name: info.index for info in relay.catalog()}
        request = parse_subscribe(query, _headers(self._request), datasets)
        why = relay.room()
        if why is not None:
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", why)
        return request

    # -- what the relay's shell calls (as on a WebSocket subscriber's ``Outbound``) --------

    @property
    def idle(self) -> bool:
        """Everything written: the stream may take the next push."""
        transport = self._connection.transport
        return not self._connection.paused and not transport.is_closing()

    def stalled_for(self, now: float) -> float:
        """Seconds the stream has held bytes the client did not read (0 if none)."""
        return 0.0 if self._stalled_since is None else time.monotonic() - self._stalled_since

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
            log.error("HTTP stream %s: %s", self._connection.remote_address, exc)
            self._end()
            return False
        if event:
            self._write_event(event)
        if self._events.ended:
            self._end()
        return True

    def close(self, reason: str) -> None:
        """Cut the stream off (a slow consumer): it is dropped at once, unread bytes too."""
        if self.closed_for is None:
            log.warning("closing HTTP stream %s: %s", self._connection.remote_address, reason)
            self.closed_for = reason
            self._connection.transport.abort()

    # -- writing -----------------------------------------------------------------------

    def _write_event(self, event: bytes) -> None:
        transport = self._connection.transport
        if not self._head_sent:
            self._head_sent = True
            transport.write(_head(HTTPStatus.OK, CONTENT_TYPES[self._format], chunked=True))
        transport.write(b"%x\r\n%b\r\n" % (len(event), event))
        self.sent += 1
        self.sent_bytes += len(event)
        if self._connection.paused and self._stalled_since is None:
            self._stalled_since = time.monotonic()

    def _resumed(self, client: int) -> None:
        self._stalled_since = None
        self._connection.relay.writable(client)

    def _end(self) -> None:
        if not self._ended.done():
            self._ended.set_result(None)

    def _refusal(self, error: Error) -> HttpError:
        """The HTTP answer to the relay's refusal of the stream's subscription: a redirect to
        another relay is a 307 to the same request there, which HTTP clients follow (a
        browser's ``EventSource``, ``fetch``, ``curl -L``)."""
        if error.code == "redirect" and error.location is not None:
            location = same_request_at(error.location, self._request.path)
            return HttpError(HTTPStatus.TEMPORARY_REDIRECT, error.code, error.message, location)
        status = _STATUS.get(error.code, HTTPStatus.BAD_REQUEST)
        return HttpError(status, error.code, error.message)

    def _refuse(self, error: HttpError) -> None:
        body = error.body()
        extra = _challenge(error)
        if error.location is not None:
            extra = [*extra, ("Location", error.location)]
        head = _head(error.status, "application/json", length=len(body), extra=extra)
        self._connection.transport.write(head + body)
        self._head_sent = True
        self._finished = True

    async def _close(self) -> None:
        """End the response (its last chunk) and close the connection once it is written."""
        transport = self._connection.transport
        if self._head_sent and not self._finished:
            transport.write(b"0\r\n\r\n")
        self._finished = True
        if not transport.is_closing():
            transport.close()  # after the buffered bytes are written
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._connection.connection_lost_waiter), LINGER)


def _head(
    status: int,
    content_type: str,
    *,
    chunked: bool = False,
    length: int = 0,
    extra: list[tuple[str, str]] = [],  # noqa: B006  # not mutated
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        f"Content-Type: {content_type}",
        "Cache-Control: no-store",
        "Access-Control-Allow-Origin: *",
        "Connection: close",
        f"Server: {SERVER}",
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}",
        *(f"{name}: {value}" for name, value in extra),
    ]
    if status == HTTPStatus.NO_CONTENT:  # RFC 9110 8.6: no Content-Length, no body
        lines.remove("Content-Length: 0")
    if content_type == CONTENT_TYPES["sse"]:
        lines.append("X-Accel-Buffering: no")  # proxies such as nginx: do not hold events back
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _api_not_get(request: Request) -> bool:
    """A request of the API's (``/v1/...``) by another method than GET."""
    path = request.path.split("?", 1)[0]
    return path in (SUBSCRIBE, DATASETS) and request.method != "GET" and not _upgrade(request)


def _headers(request: Request) -> Mapping[str, str]:
    return {name.lower(): value for name, value in request.headers.raw_items()}


def _upgrade(request: Request) -> bool:
    return "websocket" in request.headers.get("Upgrade", "").lower()


def _is_stream(request: Request) -> bool:
    return request.path.split("?", 1)[0] == SUBSCRIBE and not _upgrade(request)
