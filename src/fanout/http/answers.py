"""Whole HTTP answers of the relay's port, and what every request and stream shares: the
token a request presents, refusals as JSON (RFC 6750's challenge for a 401)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus

import h11
from websockets.http11 import SERVER

from fanout.errors import Unauthorized
from fanout.http.api import HttpError

__all__ = [
    "SERVER",
    "Answer",
    "challenge",
    "json_headers",
    "plain_headers",
    "refusal",
    "request_token",
    "response",
    "unauthorized",
]


@dataclass(frozen=True)
class Answer:
    """A whole HTTP answer."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""


def response(status: int, headers: list[tuple[str, str]]) -> h11.Response:
    """h11's response head of ``status``, with its reason phrase."""
    return h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)


def refusal(error: HttpError) -> Answer:
    """A refused request's whole answer."""
    body = error.body()
    extra = challenge(error)
    if error.location is not None:
        extra = [*extra, ("Location", error.location)]
    return Answer(error.status, json_headers(len(body), error.status, extra, cors=True), body)


def request_token(headers: Mapping[str, str], target: str) -> str | None:
    """The token a request presents: ``Authorization: Bearer ...``, else ``access_token=``
    in the query (for clients that cannot set headers: a browser's ``EventSource``)."""
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    query = urllib.parse.urlsplit(target).query
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name == "access_token":
            return value
    return None


def unauthorized(exc: Unauthorized) -> HttpError:
    """The HTTP refusal of a token refused."""
    status = HTTPStatus.FORBIDDEN if exc.code == "forbidden" else HTTPStatus.UNAUTHORIZED
    return HttpError(status, exc.code, exc.message)


def challenge(error: HttpError) -> list[tuple[str, str]]:
    """RFC 6750's ``WWW-Authenticate`` for a 401: which scheme to use."""
    if error.status != HTTPStatus.UNAUTHORIZED:
        return []
    return [("WWW-Authenticate", 'Bearer realm="fanout", error="invalid_token"')]


def json_headers(
    length: int,
    status: int,
    extra: Sequence[tuple[str, str]] = (),
    *,
    cors: bool = False,
) -> list[tuple[str, str]]:
    """A whole JSON answer's headers (RFC 9110 8.6: a 204 has no ``Content-Length``)."""
    headers = [("Content-Type", "application/json"), ("Cache-Control", "no-store")]
    if cors:
        headers.append(("Access-Control-Allow-Origin", "*"))
    if status != HTTPStatus.NO_CONTENT:
        headers.append(("Content-Length", str(length)))
    return [*headers, ("Connection", "close"), *extra]


def plain_headers(content_type: str, body: bytes) -> list[tuple[str, str]]:
    return [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
