"""``GET /healthz`` and ``GET /readyz`` on the publisher's port, for orchestrators' probes.

``/healthz`` answers 200 while the control plane serves (the process is alive and its event
loop turns); ``/readyz`` answers 200 once relays may be served — every dataset's streaming
query runs and has reported progress — and 503 with the reason until then, or once a query
stopped. Like ``GET /metrics`` (``fanout.metrics``), they are plain HTTP answered on the
WebSocket port instead of an upgrade.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

Hook = Callable[[ServerConnection, Request], Response | None]

HEALTH = "/healthz"
READY = "/readyz"


def route(not_ready: Callable[[], str | None], fallback: Hook) -> Hook:
    """A ``process_request`` hook answering the probes, then ``fallback``'s paths.

    Args:
        not_ready: why the publisher is not ready, or None when it is.
        fallback: the hook for every other request.
    """

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == HEALTH:
            return connection.respond(HTTPStatus.OK, "ok\n")
        if path == READY:
            why = not_ready()
            if why is None:
                return connection.respond(HTTPStatus.OK, "ready\n")
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {why}\n")
        return fallback(connection, request)

    return process_request
