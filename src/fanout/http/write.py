"""One ``POST /v1/publish/{dataset}`` request: a producer's write, forwarded to the publisher like
a WebSocket subscriber's ``Publish`` (``relay.core.forwarding``) and answered with the offsets or
the refusal (``http.publishing``).

The request is a connection of the relay's own for as long as it waits (``relay.api.Downstream``),
admitted as a WebSocket write is (``relay.core.admission``): with authentication, its token
(``Authorization: Bearer``) must grant ``producer``. It waits at most ``ANSWER_TIMEOUT`` seconds
for the publisher; past that it is answered 503 and the write may or may not be applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import unquote

from fanout.errors import ProtocolError, Unauthorized
from fanout.http.answers import Answer, json_headers, refusal, request_token, unauthorized
from fanout.http.api import HttpError
from fanout.http.publishing import PUBLISH, REQ, answer, parse_publish
from fanout.relay.api import RelayApi
from fanout.wire import codec
from fanout.wire.messages import Error, Published

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fanout.http.server import PortConnection

log = logging.getLogger(__name__)

#: Seconds a write waits for the publisher's answer.
ANSWER_TIMEOUT = 30.0


class HttpWrite:
    """One write request, a ``relay.api.Downstream`` while it waits for its answer."""

    def __init__(
        self, connection: PortConnection, relay: RelayApi, target: str, headers: Mapping[str, str]
    ) -> None:
        self._connection = connection
        self._relay = relay
        self._target = target
        self._headers = headers
        self._decoder = codec.to_subscriber()
        self._answer: asyncio.Future[Published | Error] = asyncio.get_running_loop().create_future()
        self.sent = 0
        self.sent_bytes = 0
        self.closed_for: str | None = None

    async def run(self, body: bytes) -> None:
        """Write ``body`` (the request's whole body) and answer the request."""
        try:
            self._connection.answer(await self._write(body))
        except HttpError as exc:
            self._connection.answer(refusal(exc))

    async def _write(self, body: bytes) -> Answer:
        relay = self._relay
        try:
            grant = relay.authenticate(request_token(self._headers, self._target), "producer")
        except Unauthorized as exc:
            raise unauthorized(exc) from None
        name = unquote(self._target.split("?", 1)[0].removeprefix(PUBLISH))
        infos = {info.name: info for info in relay.catalog()}
        if not infos:
            message = "the relay has no catalog from its publisher yet; write again later"
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", message)
        info = infos.get(name)  # as over the WebSocket, writing takes the role, not read rules
        if info is None:
            message = f"unknown dataset {name!r} (serving: {', '.join(infos)})"
            raise HttpError(HTTPStatus.NOT_FOUND, "invalid_view", message)
        request = parse_publish(body, info)
        if (full := relay.room()) is not None:
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", full)
        client = relay.open(self)
        try:
            relay.connect(client, grant)
            relay.write(client, request)
            async with asyncio.timeout(ANSWER_TIMEOUT):
                frame = await self._answer
        except TimeoutError:
            message = f"no answer from the publisher within {ANSWER_TIMEOUT:g} s: the write may"
            raise HttpError(
                HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", message + " or may not be applied"
            ) from None
        finally:
            relay.closed(relay.close(client))
        result = answer(frame)
        if isinstance(result, HttpError):
            raise result
        return Answer(HTTPStatus.OK, json_headers(len(result), HTTPStatus.OK, cors=True), result)

    # -- what the relay's shell calls --------------------------------------------------------

    @property
    def idle(self) -> bool:
        """A write takes no pushes; it is never due one."""
        return True

    def stalled_for(self, now: float) -> float:
        """A write holds no unread bytes."""
        return 0.0

    def offer_probed(self, data: bytes, acked: Callable[[float], None]) -> bool:
        """``offer(data)``; no acknowledgements on HTTP: its link is not estimated
        (``relay.core.links``)."""
        self.offer(data)
        return False

    def offer(self, data: bytes, control: bool = False) -> bool:
        """Take the relay's answer to the write (``Published`` or ``Error``)."""
        try:
            frame = self._decoder.decode(data)
        except ProtocolError as exc:  # the relay's own frame: a bug, said
            log.error("HTTP write: the relay's answer does not decode: %s", exc)
            return False
        if not isinstance(frame, Published | Error) or self._answer.done():
            return False
        self._answer.set_result(frame)
        self.sent += 1
        self.sent_bytes += len(data)
        return True

    def close(self, reason: str) -> None:
        """Cut off by the relay: the write is answered as unavailable."""
        self.closed_for = reason
        if not self._answer.done():
            self._answer.set_result(Error("unavailable", reason, ref=REQ))
