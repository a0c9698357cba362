"""The HTTP streaming API's pure side: requests in, subscriptions and JSON events out.

``GET /v1/subscribe?dataset=&view=&mode=&rate=`` subscribes like a ``Subscribe`` frame and
answers a stream of JSON events, one per line (NDJSON, ``application/x-ndjson``) or as
Server-Sent Events (``text/event-stream``, chosen by ``format=sse`` or an ``Accept`` header
naming it). ``GET /v1/datasets`` describes the datasets. The events, tokens and resuming, and
a stream whose part moved: docs/http.md.

Nothing here touches a socket: :func:`parse_subscribe` reads a request's query, and
:class:`EventStream` turns the relay's frames for one subscription into encoded events.
"""

from __future__ import annotations

import base64
import binascii
import math
import urllib.parse
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView, ProtocolError
from fanout.views import registry
from fanout.views.text import parse as parse_view
from fanout.wire.columns import decode_columns, encode_columns, key_column, to_python
from fanout.wire.messages import (
    DatasetInfo,
    Error,
    NoUpdate,
    Push,
    Subscribe,
    Subscribed,
    Transform,
    Unsubscribed,
)
from fanout.wire.options import Resume

#: The one subscription an HTTP stream holds, as the core numbers it on its connection.
SUB = 1
#: Query parameters ``/v1/subscribe`` takes; any other is refused (a typo would be ignored).
PARAMETERS = frozenset(
    {"dataset", "view", "mode", "rate", "priority", "columns", "token", "format", "access_token"}
)
#: How events are written.
Format = Literal["ndjson", "sse"]
CONTENT_TYPES: dict[Format, str] = {
    "ndjson": "application/x-ndjson",
    "sse": "text/event-stream",
}
#: Error codes from the relay that do not end a subscription.
_GOES_ON = frozenset({"resync"})
#: The reconnection time (``retry:``, milliseconds) a moved SSE stream gives before it ends.
#:
#: What the WHATWG HTML standard (9.2 "Server-sent events") guarantees, and the move relies on:
#: when a response's body ends normally, an ``EventSource`` *reestablishes the connection*: it
#: waits its reconnection time (the last ``retry:`` field; by default a few seconds, chosen by
#: the browser, which may wait longer after failures) and fetches its request again, with
#: ``Last-Event-ID`` set to the last ``id:`` it received if that is not empty. A status other
#: than 200 (or another content type) *fails* it for good, so a moved stream ends normally,
#: never with an error status. Fetch follows a 307 by itself, with the same method and headers
#: (``Last-Event-ID`` is kept). So the stream's ``every`` view reconnects to the same URL at the
#: relay it moved from, which is no longer responsible and answers a 307 to the same request at
#: the relay that is; there ``Last-Event-ID`` resumes it after the last event applied, and a
#: ``latest`` view (its events carry no id) starts again with a full push. The other relay is
#: another origin, so the redirected request is a CORS request: the 307 and the stream carry
#: ``Access-Control-Allow-Origin``, and since Fetch does not safelist ``Last-Event-ID`` a
#: browser may first send a preflight (``OPTIONS``), which relays answer
#: (``http.server``). The reconnection time given here stays the ``EventSource``'s for its
#: later reconnections too: short, but not so short that clients whose relay died hammer it.
MOVE_RETRY_MS = 500
#: Seconds a browser may keep a CORS preflight's answer (``Access-Control-Max-Age``).
PREFLIGHT_MAX_AGE = 600
_JSON = msgspec.json.Encoder()


class HttpError(Exception):
    """A request refused: its HTTP status, an error code and a message for whoever sent it."""

    def __init__(self, status: int, code: str, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        #: With status 307: where the same request is to be made (its ``Location`` header).
        self.location = location

    def body(self) -> bytes:
        """The JSON body of the refusal: ``{"error": code, "message": message}`` (and
        ``"location"`` for a redirect)."""
        body = {"error": self.code, "message": self.message}
        if self.location is not None:
            body["location"] = self.location
        return _JSON.encode(body) + b"\n"


@dataclass(frozen=True)
class StreamRequest:
    """What a ``/v1/subscribe`` request asks for.

    Attributes:
        subscribe: the ``Subscribe`` frame it stands for.
        format: ``ndjson`` or ``sse``.
    """

    subscribe: Subscribe
    format: Format


def parse_subscribe(
    query: str, headers: Mapping[str, str], datasets: Mapping[str, str]
) -> StreamRequest:
    """Read a ``/v1/subscribe`` request.

    Args:
        query: the URL's query string (after ``?``).
        headers: the request's headers (``Accept``, ``Last-Event-ID``), names in any case.
        datasets: the relay's datasets, name -> index kind (``space``, ``sql``, ...).

    Returns:
        The subscription and the format to answer in.

    Raises:
        HttpError: a missing, repeated, unknown or malformed parameter (400), an unknown
            dataset (404), a view that does not parse (400), a token that does not decode
            (400); the message says which.
    """
    params = _single_params(query)
    dataset = _required(params, "dataset")
    if dataset not in datasets:
        known = ", ".join(sorted(datasets)) or "none yet: the relay is not connected upstream"
        raise HttpError(404, "unknown_dataset", f"unknown dataset {dataset!r} (known: {known})")
    kind = registry.language(datasets[dataset])
    try:
        view = parse_view(_required(params, "view"), kind)
    except InvalidView as exc:
        raise HttpError(400, "invalid_view", f"view: {exc}") from None
    mode = params.get("mode", "latest")
    if mode not in ("latest", "every"):
        raise HttpError(400, "bad_request", f"mode must be 'latest' or 'every', not {mode!r}")
    rate = _number(params, "rate", 10.0)
    priority = int(_number(params, "priority", 0.0, integer=True))
    transform = None
    if "columns" in params:
        columns = [name for name in params["columns"].split(",") if name]
        transform = Transform(columns=columns)
    # The header wins: an EventSource reconnecting to a URL that holds a token sends the
    # token of the last event it received in Last-Event-ID, which is newer.
    token = _header(headers, "last-event-id") or params.get("token")
    resume = None
    if token:
        if mode != "every":
            raise HttpError(400, "bad_request", "a resume token is for mode=every only")
        resume = decode_token(token)
    subscribe = Subscribe(
        SUB,
        dataset,
        view,
        rate=rate,
        priority=priority,
        transform=transform,
        mode=mode,  # type: ignore[arg-type]  # checked above
        resume=resume,
    )
    return StreamRequest(subscribe, _format(params, headers))


def not_a_get(method: str, allowed: str = "GET") -> tuple[int, list[tuple[str, str]], bytes]:
    """The answer to a request of the API (``/v1/...``) made with another method than the one
    it takes (``allowed``: GET, or POST for writes).

    ``OPTIONS`` is a CORS preflight: ``allowed`` is allowed, with the headers clients send
    (``Last-Event-ID``: an ``EventSource`` reconnecting to another relay, see
    :data:`MOVE_RETRY_MS`; ``Authorization``). Any other method is refused.

    Returns:
        The status (204, or 405), headers to add, and the body (empty, or the refusal's JSON).
    """
    if method == "OPTIONS":
        preflight = [
            ("Access-Control-Allow-Methods", allowed),
            ("Access-Control-Allow-Headers", "Last-Event-ID, Authorization, Accept, Content-Type"),
            ("Access-Control-Max-Age", str(PREFLIGHT_MAX_AGE)),
        ]
        return 204, preflight, b""
    message = f"{method} is not served here: this path of the relay's HTTP API takes {allowed}"
    return 405, [("Allow", f"{allowed}, OPTIONS")], HttpError(405, "bad_request", message).body()


def datasets_json(infos: list[DatasetInfo], held: Mapping[str, int]) -> bytes:
    """``GET /v1/datasets``'s body: each dataset's key, columns, index and view language, and
    the rows the relay holds of it (``held``: by name; 0 for one it holds none of)."""
    described = [
        {
            "name": info.name,
            "key": info.key,
            "columns": info.columns,
            "index": info.index,
            "index_columns": info.index_columns,
            "view": registry.language(info.index),
            "rows_held": held.get(info.name, 0),
        }
        for info in infos
    ]
    return _JSON.encode({"datasets": described}) + b"\n"


def same_request_at(location: str, path: str, *, without_token: bool = False) -> str:
    """The request for ``path`` (its path and query) made at another relay.

    Args:
        location: the other relay's URL as the map names it (``ws://`` or ``wss://``; ``http``
            and ``https`` are taken as they are).
        path: this request's path and query, as received.
        without_token: leave the ``token`` parameter out (a moved stream's old token: the
            ``moved`` event gives the newer one).

    Returns:
        ``http(s)://`` the other relay's host and port, then ``path`` (its other parameters
        as they were written).
    """
    there = urllib.parse.urlsplit(location)
    scheme = {"ws": "http", "wss": "https"}.get(there.scheme, there.scheme)
    route, _, query = path.partition("?")
    if without_token and query:
        kept = [
            pair
            for pair in query.split("&")
            if urllib.parse.unquote_plus(pair.partition("=")[0]) != "token"
        ]
        query = "&".join(kept)
    return f"{scheme}://{there.netloc}{route}" + (f"?{query}" if query else "")


def encode_token(resume: Resume) -> str:
    """A resume token as URL-safe text (msgpack, deflated, base64url without padding)."""
    packed = zlib.compress(msgspec.msgpack.encode(resume), 6)
    return base64.urlsafe_b64encode(packed).rstrip(b"=").decode()


def decode_token(token: str) -> Resume:
    """Read a token :func:`encode_token` wrote.

    Raises:
        HttpError: 400, the token is not one (truncated, edited, another program's).
    """
    try:
        packed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        resume = msgspec.msgpack.decode(zlib.decompress(packed), type=Resume)
        decode_columns(resume.keys)
    except (ValueError, binascii.Error, zlib.error, msgspec.DecodeError, ProtocolError):
        raise HttpError(400, "bad_token", "the resume token does not decode") from None
    return resume


class EventStream:
    """One HTTP subscription's events, from the relay's frames for it.

    Attributes:
        ended: whether the subscription is over (an error that ends it, unsubscribed, or
            moved); nothing more is to be written after the last event.
        key: the key column, once ``subscribed``.
        token: where the stream is (mode ``every``): the last event's token, or the one it
            resumed from; None before either.
    """

    def __init__(
        self, format: Format, mode: str, resumed: Resume | None = None, *, path: str = ""
    ) -> None:
        """Args:
        format: how events are written.
        mode: the subscription's mode (``every`` events carry tokens).
        resumed: the token the stream resumes from: the keys held before its first event.
        path: the request's path and query (a ``moved`` event names it at another relay).
        """
        self.format, self.mode, self.path = format, mode, path
        self.ended = False
        self.key = ""
        self.token: str | None = None
        if resumed is not None and mode == "every":
            self.token = encode_token(resumed)
        #: Keys the subscriber holds (mode ``every`` only, for its tokens).
        self._held: set[Any] = set()
        self._held_dtype: npt.DTypeLike = np.int64
        if resumed is not None:
            keys = decode_columns(resumed.keys)
            for column in keys.values():
                self._held_dtype = column.dtype
                self._held.update(column.tolist())

    def event(self, frame: object) -> bytes:
        """The encoded event for one frame of the relay (``b""`` for one that is not its).

        Raises:
            ProtocolError: a push whose rows do not decode (a relay's bug: the stream ends).
        """
        match frame:
            case Subscribed() as subscribed:
                self.key = subscribed.key
                return self._write(
                    "subscribed",
                    {"type": "subscribed", "key": subscribed.key, "columns": subscribed.columns},
                )
            case Push() as push:
                return self._push(push)
            case NoUpdate() as none:
                body: dict[str, Any] = {"type": "no_update", "epoch": none.epoch}
                body.update(seq=none.seq, tick=none.tick)
                return self._write("no_update", self._stamped(body, none.epoch, none.seq))
            case Error(code="redirect", location=str()) as moved:
                self.ended = True
                return self._moved(moved)
            case Error() as error:
                self.ended = self.ended or error.code not in _GOES_ON
                return self._write(
                    "error", {"type": "error", "error": error.code, "message": error.message}
                )
            case Unsubscribed():
                self.ended = True
        return b""

    def _push(self, push: Push) -> bytes:
        entered, updated = decode_columns(push.entered), decode_columns(push.updated)
        left = key_column(push.left, self.key, "left")
        if self.mode == "every":
            if push.full:
                self._held.clear()
            self._held.difference_update(left.tolist())
            for rows in (entered, updated):
                if self.key in rows:
                    self._held_dtype = rows[self.key].dtype
                    self._held.update(rows[self.key].tolist())
        body: dict[str, Any] = {
            "type": "push",
            "epoch": push.epoch,
            "seq": push.seq,
            "tick": push.tick,
            "tick_time": push.tick_time,
            "full": push.full,
            "entered": rows_json(entered),
            "updated": rows_json(updated),
            "left": [_plain(value) for value in left.tolist()],
        }
        return self._write("push", self._stamped(body, push.epoch, push.seq))

    def _moved(self, error: Error) -> bytes:
        """The last event of a stream whose part moved to another relay (the core's redirect
        ending its held subscription): where to make the same request, with what token."""
        assert error.location is not None, "matched on a location"
        body: dict[str, Any] = {
            "type": "moved",
            "location": same_request_at(error.location, self.path, without_token=True),
        }
        if self.mode == "every":
            body["token"] = self.token
        body["message"] = error.message
        # No id: the EventSource's last event id stays the last push's token (MOVE_RETRY_MS).
        return self._write("moved", body, retry=MOVE_RETRY_MS, with_id=False)

    def _stamped(self, body: dict[str, Any], epoch: int, seq: int) -> dict[str, Any]:
        if self.mode == "every":
            self.token = encode_token(self._token(epoch, seq))
            body["token"] = self.token
        return body

    def _token(self, epoch: int, seq: int) -> Resume:
        keys = sorted(self._held)
        if keys and all(isinstance(key, int) for key in keys):
            column: npt.NDArray[Any] = np.array(keys, dtype=np.int64)
        else:
            column = np.array(keys, dtype=object)
        return Resume(epoch, seq, encode_columns({self.key: column}))

    def _write(
        self, name: str, body: dict[str, Any], *, retry: int | None = None, with_id: bool = True
    ) -> bytes:
        data = _JSON.encode(body)
        if self.format == "ndjson":
            return data + b"\n"
        token = body.get("token") if with_id else None
        head = f"id: {token}\n" if token else ""
        if retry is not None:
            head += f"retry: {retry}\n"
        return f"{head}event: {name}\n".encode() + b"data: " + data + b"\n\n"


def rows_json(columns: Mapping[str, npt.NDArray[Any]]) -> list[dict[str, Any]]:
    """Rows as JSON objects, column by column: non-finite floats become ``None``; timestamps
    are RFC 3339 text in UTC (``Z``); bytes are base64 text (msgspec's JSON spelling of
    ``bytes``)."""
    names = list(columns)
    values = [[_plain(value) for value in to_python(columns[name])] for name in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]


def _plain(value: Any) -> Any:
    """A value strict JSON can hold: NaN and infinities (a NULL number) become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _single_params(query: str) -> dict[str, str]:
    try:
        pairs = urllib.parse.parse_qsl(
            query, keep_blank_values=True, strict_parsing=bool(query), max_num_fields=32
        )
    except ValueError as exc:
        raise HttpError(400, "bad_request", f"the query string does not parse: {exc}") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in PARAMETERS:
            expected = ", ".join(sorted(PARAMETERS))
            raise HttpError(400, "bad_request", f"unknown parameter {name!r} (known: {expected})")
        if name in params:
            raise HttpError(400, "bad_request", f"parameter {name!r} given twice")
        params[name] = value
    return params


def _required(params: Mapping[str, str], name: str) -> str:
    value = params.get(name)
    if not value:
        raise HttpError(400, "bad_request", f"parameter {name!r} is required")
    return value


def _number(
    params: Mapping[str, str], name: str, default: float, *, integer: bool = False
) -> float:
    text = params.get(name)
    if text is None:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        wanted = "an integer" if integer else "a number"
        raise HttpError(400, "bad_request", f"{name} must be {wanted}, not {text!r}") from None
    if not math.isfinite(value):
        raise HttpError(400, "bad_request", f"{name} must be finite, not {text!r}")
    return value


def _format(params: Mapping[str, str], headers: Mapping[str, str]) -> Format:
    chosen = params.get("format")
    if chosen is None:
        accept = _header(headers, "accept") or ""
        return "sse" if "text/event-stream" in accept else "ndjson"
    if chosen not in CONTENT_TYPES:
        raise HttpError(400, "bad_request", f"format must be 'ndjson' or 'sse', not {chosen!r}")
    return "sse" if chosen == "sse" else "ndjson"


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None
