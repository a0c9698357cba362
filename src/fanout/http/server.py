"""The relay's port: HTTP served with h11, WebSocket upgrades handed to the WebSocket server.

The HTTP front end (``relay.api.FrontEnd``) listens on the relay's port and reads each
connection's request with h11. A WebSocket upgrade is handed over whole, with the bytes read so
far, to the WebSocket server — or, if it asks for the subprotocol ``mqtt`` or the path
``/mqtt`` and MQTT over WebSockets is on, to the MQTT front end. Anything else is answered here:
``/v1/subscribe`` with a stream (``http.stream``); ``POST /v1/publish/...`` (``http.api``);
``GET /v1/datasets``, the viewer's files, the admin API (``http.admin``), the front ends' lists
(``http.pages``), ``/metrics`` and the probes with a whole answer; the API's paths by another
method with ``not_a_get`` (``OPTIONS``: a CORS preflight); any other path with 426. Every
answer closes its connection.

Bounds: a request head larger than h11's limit (16 KiB) is answered 431, a malformed one 400;
a connection that has not sent its request within ``opening`` seconds is closed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl as ssl_module
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Any, cast

import h11

from fanout import metrics, tls
from fanout.errors import Unauthorized
from fanout.http import admin
from fanout.http.answers import (
    SERVER,
    Answer,
    json_headers,
    plain_headers,
    refusal,
    request_token,
    response,
    unauthorized,
)
from fanout.http.api import HttpError, datasets_json, not_a_get
from fanout.http.pages import Page, listing
from fanout.http.publishing import MAX_BODY, PUBLISH
from fanout.http.stream import HttpSubscription
from fanout.http.write import HttpWrite
from fanout.relay.api import RelayApi
from fanout.relay.core.rules import visible

log = logging.getLogger(__name__)

SUBSCRIBE = "/v1/subscribe"
DATASETS = "/v1/datasets"
#: The live viewer's files (``http/viewer/``), by the path they are served at.
VIEWER = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/map.js": ("map.js", "text/javascript; charset=utf-8"),
    "/viewtext.js": ("viewtext.js", "text/javascript; charset=utf-8"),
    "/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
    # @fanout/client for browsers (clients/typescript, bundled): the viewer's, any page's
    "/fanout-client.js": ("fanout-client.js", "text/javascript; charset=utf-8"),
}

#: Hands a WebSocket upgrade's connection to the WebSocket server, with what was read of it.
Upgrade = Callable[[asyncio.Transport, bytes], None]
#: Where MQTT over WebSockets is asked for, besides the subprotocol ``mqtt`` on any path.
MQTT_PATH = "/mqtt"
#: Answers a ``GET`` of a path from elsewhere (a relay's workers ask their leader:
#: ``relay.shell.workers``), given the request's target and headers.
Elsewhere = Callable[[str, Mapping[str, str]], Awaitable[Answer]]


class HttpFrontEnd:
    """The relay's port: HTTP here, WebSocket upgrades to ``upgrade``.

    Attributes:
        port: the port it listens on, once started.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        opening: float,
        upgrade: Upgrade,
        tls_files: tuple[Path, Path] | None = None,
        reuse_port: bool = False,
    ) -> None:
        """Args:
        host, port: where to listen (port 0: any free one).
        reuse_port: listen with ``SO_REUSEPORT``, the port shared with the relay's other
            workers (``relay.shell.workers``): the kernel spreads connections across them.
        opening: seconds a connection may take to send its request.
        upgrade: takes a WebSocket upgrade's connection (``websocket.server``).
        tls_files: the certificate and key to serve ``https://`` and ``wss://`` with.
        """
        self._host, self.port = host, port
        self._opening = opening
        self._upgrade = upgrade
        self._tls_files = tls_files
        self._reuse_port = reuse_port
        self._relay: RelayApi | None = None
        self._tasks: asyncio.TaskGroup | None = None
        self._streams: set[asyncio.Task[None]] = set()
        #: The listening server, once started (the WebSocket server closes it too).
        self.listener: asyncio.Server | None = None
        #: Takes the upgrades of MQTT over WebSockets (``mqtt.ws``), if it is served here.
        self.mqtt_upgrade: Upgrade | None = None
        #: The admin pages front ends offer, by path (``http.pages``: the MQTT broker's lists).
        self.pages: dict[str, Page] = {}
        #: Paths whose ``GET`` is answered from elsewhere, not by the relay itself.
        self.elsewhere: dict[str, Elsewhere] = {}

    @property
    def tls(self) -> bool:
        """Whether the port serves TLS."""
        return self._tls_files is not None

    async def start(self, relay: RelayApi, tasks: asyncio.TaskGroup) -> None:
        """Listen on the relay's port; streams run as tasks of ``tasks``."""
        self._relay, self._tasks = relay, tasks
        context: ssl_module.SSLContext | None = None
        if self._tls_files is not None:
            context = tls.server_context(*self._tls_files)
        loop = asyncio.get_running_loop()
        self.listener = await loop.create_server(
            lambda: PortConnection(self),
            self._host,
            self.port,
            ssl=context,
            reuse_port=self._reuse_port or None,
        )
        self.port = self.listener.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening, end every stream (its last chunk) and wait for them."""
        if self.listener is not None:
            self.listener.close()
        streams = list(self._streams)
        for task in streams:
            task.cancel()
        if streams:
            await asyncio.wait(streams)

    @property
    def relay(self) -> RelayApi:
        """The relay it serves, once started."""
        assert self._relay is not None, "the HTTP front end is not started"
        return self._relay

    def take(self, connection: PortConnection, request: h11.Request, head: bytes) -> None:
        """Serve a connection's request (``head``: the bytes read so far)."""
        target = request.target.decode("latin-1")
        headers = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in request.headers
        }
        method = request.method.decode("latin-1")
        path = target.split("?", 1)[0]
        relay = self.relay
        if path in self.elsewhere and method == "GET":
            self._run(_answered_elsewhere(connection, self.elsewhere[path], target, headers))
        elif (probe := metrics.answer(target, relay.samples, relay.unready)) is not None:
            code, content_type, body = probe
            connection.answer(Answer(code, plain_headers(content_type, body), body))
        elif "websocket" in headers.get("upgrade", "").lower():
            connection.hand_over()
            upgrade = self._upgrade
            if self.mqtt_upgrade is not None and (path == MQTT_PATH or _asks_mqtt(request)):
                upgrade = self.mqtt_upgrade
            upgrade(connection.transport, head)
        elif path.startswith(PUBLISH):
            self._write(connection, method, target, headers)
        elif path in admin.PATHS:
            connection.answer(self.admin(method, path, headers, target))
        elif (path in (SUBSCRIBE, DATASETS) or path in self.pages) and method != "GET":
            status, extra, body = not_a_get(method)
            connection.answer(
                Answer(status, json_headers(len(body), status, extra, cors=True), body)
            )
        elif path == SUBSCRIBE:
            self._stream(HttpSubscription(connection, relay, target, headers))
        elif path == DATASETS:
            connection.answer(self._datasets(headers, target))
        elif path in self.pages:
            connection.answer(listing(relay, self.pages[path], target, headers))
        elif path in VIEWER:
            connection.answer(viewer_file(path))
        else:  # a WebSocket port, as websockets answers a plain request
            body = b"Failed to open a WebSocket connection: this is a WebSocket port.\n"
            connection.answer(
                Answer(HTTPStatus.UPGRADE_REQUIRED, plain_headers(metrics.TEXT, body), body)
            )

    def _write(
        self, connection: PortConnection, method: str, target: str, headers: Mapping[str, str]
    ) -> None:
        """A producer's write: its body is read (``MAX_BODY`` bytes at most), then written."""
        if method != "POST":
            status, extra, body = not_a_get(method, "POST")
            connection.answer(
                Answer(status, json_headers(len(body), status, extra, cors=True), body)
            )
            return
        write = HttpWrite(connection, self.relay, target, headers)
        declared = headers.get("content-length", "")
        connection.read_body(MAX_BODY, declared, lambda body: self._run(write.run(body)))

    def _run(self, job: Coroutine[Any, Any, None]) -> None:
        assert self._tasks is not None, "the HTTP front end is not started"
        task = self._tasks.create_task(job)
        self._streams.add(task)
        task.add_done_callback(self._streams.discard)

    def _datasets(self, headers: Mapping[str, str], target: str) -> Answer:
        try:
            grant = self.relay.authenticate(request_token(headers, target))
        except Unauthorized as exc:
            return refusal(unauthorized(exc))
        shown = visible({info.name: info for info in self.relay.catalog()}, grant)
        body = datasets_json(list(shown.values()), self.relay.held())
        return Answer(HTTPStatus.OK, json_headers(len(body), HTTPStatus.OK), body)

    def admin(self, method: str, path: str, headers: Mapping[str, str], target: str) -> Answer:
        """An admin request (``http.admin``): its token must grant role ``admin``."""
        if method != "GET":
            status, extra, body = not_a_get(method)
            return Answer(status, json_headers(len(body), status, extra, cors=True), body)
        try:
            self.relay.authenticate(request_token(headers, target), "admin")
            body = admin.answer(self.relay, path, target.partition("?")[2])
        except Unauthorized as exc:
            return refusal(unauthorized(exc))
        except HttpError as exc:
            return refusal(exc)
        return Answer(HTTPStatus.OK, json_headers(len(body), HTTPStatus.OK, cors=True), body)

    def _stream(self, stream: HttpSubscription) -> None:
        self._run(_streamed(stream))


async def _answered_elsewhere(
    connection: PortConnection, elsewhere: Elsewhere, target: str, headers: Mapping[str, str]
) -> None:
    """Answer a request as ``elsewhere`` does; 503, said, if it cannot."""
    try:
        answer = await elsewhere(target, headers)
    except (OSError, ValueError) as exc:
        body = f"the relay could not answer {target.split('?', 1)[0]}: {exc}\n".encode()
        answer = Answer(HTTPStatus.SERVICE_UNAVAILABLE, plain_headers(metrics.TEXT, body), body)
    connection.answer(answer)


async def _streamed(stream: HttpSubscription) -> None:
    """Run a stream; a failure of its own ends it alone, said, not the relay's TaskGroup."""
    try:
        await stream.run()
    except Exception:
        log.exception("HTTP stream failed")
        stream.abort()


class PortConnection(asyncio.Protocol):
    """One connection on the relay's port until its request is read: then an answer, a stream
    (``http.stream``) or a WebSocket (handed over).

    Attributes:
        transport: the connection's transport.
        paused: whether the transport holds bytes the client has not read (flow control).
        lost: done when the connection is gone.
        on_resume: told when the transport wrote what it held (a stream's flow control).
    """

    def __init__(self, front: HttpFrontEnd) -> None:
        self._front = front
        self._h11 = h11.Connection(h11.SERVER)
        self._head = bytearray()
        self._taken = False
        self._timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport
        self.paused = False
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_resume: Callable[[], None] | None = None
        #: While a request's body is read: its bytes so far, at most ``_limit``, and who
        #: takes it whole.
        self._body: bytearray | None = None
        self._limit = 0
        self._on_body: Callable[[bytes], None] | None = None

    # -- asyncio's side ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's transport (uvloop's is not an ``asyncio.Transport`` subclass: no isinstance).
        self.transport = cast(asyncio.Transport, transport)
        # Paused as soon as the kernel leaves bytes in the transport: a stream is idle (may
        # take the next push) only when it has written everything. asyncio's TLS transport
        # pauses at ``>=`` its high-water mark where the plain one pauses at ``>``: 0 would
        # pause it when empty and never resume.
        self.transport.set_write_buffer_limits(1 if self._front.tls else 0)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._front._opening, self.transport.abort)

    def data_received(self, data: bytes) -> None:
        if self._taken and self._body is None:
            return  # after the request, nothing more is read: a stream only writes
        if self._body is None:
            self._head += data
        self._feed(data)

    def eof_received(self) -> bool | None:
        if not self._taken or self._body is not None:
            self._feed(b"")  # a request cut short is answered 400; none at all, closed
        return None  # the transport closes once written

    def _feed(self, data: bytes) -> None:
        self._h11.receive_data(data)
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._taken, self._body = True, None
                status = exc.error_status_hint
                message = f"not an HTTP request the relay takes: {exc}"
                self.answer(refusal(HttpError(status, "bad_request", message)))
                return
            if event is h11.NEED_DATA:
                return
            if isinstance(event, h11.Request):
                self._taken = True
                if self._timer is not None:
                    self._timer.cancel()
                self._front.take(self, event, bytes(self._head))
                if self._body is None:
                    return
            elif isinstance(event, h11.Data) and self._body is not None:
                self._body += event.data
                if len(self._body) > self._limit:
                    self._body = None
                    self.answer(refusal(_too_large(self._limit)))
                    return
            elif isinstance(event, h11.EndOfMessage) and self._on_body is not None:
                if self._timer is not None:
                    self._timer.cancel()
                body, on_body = bytes(self._body or b""), self._on_body
                self._body = self._on_body = None
                on_body(body)
                return
            else:  # a connection closed before its request (or its body)
                self._taken, self._body = True, None
                self.transport.close()
                return

    def read_body(self, limit: int, declared: str, on_body: Callable[[bytes], None]) -> None:
        """Read the request's body, then give it to ``on_body``; one over ``limit`` bytes is
        answered 413, at once if its ``Content-Length`` (``declared``, h11 checked it) says so."""
        if declared.isdigit() and int(declared) > limit:
            self.answer(refusal(_too_large(limit)))
            return
        if self._h11.they_are_waiting_for_100_continue:
            self.send(h11.InformationalResponse(status_code=100, headers=[]))
        self._body, self._limit, self._on_body = bytearray(), limit, on_body
        # The body must come as promptly as the head: a trickle would hold the connection.
        opening = self._front._opening
        self._timer = asyncio.get_running_loop().call_later(opening, self._body_late, opening)

    def _body_late(self, seconds: float) -> None:
        if self._body is not None:
            self._body = self._on_body = None
            message = f"the request's body did not come within {seconds:g} s"
            self.answer(refusal(HttpError(HTTPStatus.REQUEST_TIMEOUT, "bad_request", message)))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.on_resume is not None:
            self.on_resume()

    # -- writing ----------------------------------------------------------------------------

    def send(self, event: h11.Event) -> None:
        """Write one of h11's events (a response's head, a chunk of data, its end)."""
        data = self._h11.send(event)
        if data:
            self.transport.write(data)

    def answer(self, answer: Answer) -> None:
        """Write a whole answer, then close the connection once it is written."""
        headers = [*answer.headers, ("Server", SERVER)]
        try:
            self.send(response(answer.status, headers))
            if answer.body:
                self.send(h11.Data(data=answer.body))
            self.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:  # a request h11 cannot answer (HTTP/0.9, ...)
            log.debug("HTTP answer not written: %s", exc)
        self.transport.close()

    def hand_over(self) -> None:
        """The connection is no longer this protocol's (a WebSocket upgrade)."""
        self._taken = True
        if self._timer is not None:
            self._timer.cancel()


def _too_large(limit: int) -> HttpError:
    message = f"the body is larger than {limit} bytes: write fewer rows at a time"
    return HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_large", message)


def _asks_mqtt(request: h11.Request) -> bool:
    """Whether a WebSocket upgrade offers the subprotocol ``mqtt`` (MQTT 5.0 section 6)."""
    offered = b",".join(v for k, v in request.headers if k == b"sec-websocket-protocol")
    return b"mqtt" in (p.strip().lower() for p in offered.split(b","))


def viewer_file(path: str) -> Answer:
    """One of the viewer's files, packaged with fanout (``http/viewer/``)."""
    name, content_type = VIEWER[path]
    body = _viewer_bytes(name)
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-cache"),
        ("X-Content-Type-Options", "nosniff"),
        # static and public: a page of another origin may import /fanout-client.js (a module
        # script from elsewhere is fetched in CORS mode)
        ("Access-Control-Allow-Origin", "*"),
        ("Connection", "close"),
    ]
    return Answer(HTTPStatus.OK, headers, body)


@functools.cache
def _viewer_bytes(name: str) -> bytes:
    return (resources.files("fanout.http") / "viewer" / name).read_bytes()
