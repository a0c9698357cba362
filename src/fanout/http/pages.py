"""The relay's admin lists (docs/mqtt.md, "Introspection"): JSON lists a front end offers on
the relay's port (the MQTT broker's clients, sessions and subscriptions), for tokens granting
``admin`` (anyone when the relay asks for no token), ``?limit=`` rows from ``?offset=`` at a
time, with the total, as NATS's monitoring endpoints (``/connz``) page theirs."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

import msgspec

from fanout.errors import Unauthorized
from fanout.http.answers import Answer, json_headers, refusal, request_token, unauthorized
from fanout.http.api import HttpError
from fanout.relay.api import RelayApi

#: A page: what its JSON names its rows, and how to make them (when asked).
Page = tuple[str, Callable[[], Sequence[Mapping[str, Any]]]]
#: Rows a page holds unless ``limit`` says otherwise (NATS's default), and at most.
DEFAULT_LIMIT, MAX_LIMIT = 1024, 100_000
PARAMETERS = frozenset({"limit", "offset", "access_token"})
_JSON = msgspec.json.Encoder()


def listing(relay: RelayApi, page: Page, target: str, headers: Mapping[str, str]) -> Answer:
    """Answer a ``GET`` of ``page`` (``target``: the request's target): 401 or 403 for a
    token that does not grant ``admin``, 400 for bad paging, else the page's JSON."""
    try:
        relay.authenticate(request_token(headers, target), "admin")
        offset, limit = paging(urllib.parse.urlsplit(target).query)
    except Unauthorized as exc:
        return refusal(unauthorized(exc))
    except HttpError as exc:
        return refusal(exc)
    name, rows = page
    listed = rows()
    shown = list(listed[offset : offset + limit])
    body = _JSON.encode(
        {"total": len(listed), "offset": offset, "limit": limit, "count": len(shown), name: shown}
    )
    return Answer(HTTPStatus.OK, json_headers(len(body), HTTPStatus.OK), body)


def paging(query: str) -> tuple[int, int]:
    """``offset`` and ``limit`` from a query string.

    Raises:
        HttpError: 400: an unknown parameter, or a value that is not a whole number in range.
    """
    values = {"offset": 0, "limit": DEFAULT_LIMIT}
    for name, text in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name not in PARAMETERS:
            raise HttpError(400, "bad_request", f"unknown parameter {name!r} (limit, offset)")
        if name == "access_token":
            continue
        if not text.isdigit() or not (name == "offset" or 1 <= int(text) <= MAX_LIMIT):
            bound = "a whole number >= 0" if name == "offset" else f"from 1 to {MAX_LIMIT}"
            raise HttpError(400, "bad_request", f"{name} must be {bound}, not {text!r}")
        values[name] = int(text)
    return values["offset"], values["limit"]
