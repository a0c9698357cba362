"""The relay's admin API, for tokens with role ``admin``: a live EXPLAIN and the subscribers
that cost the most (docs/http.md, "Admin").

``GET /v1/admin/explain?dataset=&view=[&rule=DATASET=VIEW...][&rate=]`` explains a view as the
relay holds things now (``relay.core.explaining``), narrowed by the rules given as a token's
``rules`` claim would narrow it; ``GET /v1/admin/subscribers?top=N`` lists the top ``N`` by
bytes pushed (``relay.shell.admin``); ``GET /v1/admin/batches`` the last batches' wall-clock times
through the relay (read, written, swapped in, pushed). Nothing here touches a socket.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping
from http import HTTPStatus

import msgspec

from fanout.errors import InvalidView, Unauthorized
from fanout.http.api import HttpError
from fanout.relay.api import RelayApi
from fanout.views import registry
from fanout.views.text import parse as parse_view

EXPLAIN = "/v1/admin/explain"
SUBSCRIBERS = "/v1/admin/subscribers"
BATCHES = "/v1/admin/batches"
PATHS = frozenset({EXPLAIN, SUBSCRIBERS, BATCHES})
#: Query parameters each path takes; any other is refused (a typo would be ignored).
PARAMETERS = {
    EXPLAIN: frozenset({"dataset", "view", "rule", "rate", "access_token"}),
    SUBSCRIBERS: frozenset({"top", "access_token"}),
    BATCHES: frozenset({"access_token"}),
}
#: Most subscribers one request may list.
MOST = 1000
_JSON = msgspec.json.Encoder()


def answer(relay: RelayApi, path: str, query: str) -> bytes:
    """The JSON body answering an admin request (its token already checked).

    Raises:
        HttpError: a missing, repeated, unknown or malformed parameter (400), an unknown
            dataset (404), a view the relay cannot explain (400), rules refusing it (403).
    """
    params = _params(query, PARAMETERS[path])
    if path == SUBSCRIBERS:
        return _JSON.encode(relay.subscribers(_top(params))) + b"\n"
    if path == BATCHES:
        return _JSON.encode(relay.batches()) + b"\n"
    dataset = _one(params, "dataset")
    datasets = relay.datasets()
    if dataset not in datasets:
        known = ", ".join(sorted(datasets)) or "none yet: the relay is not connected upstream"
        raise HttpError(404, "unknown_dataset", f"unknown dataset {dataset!r} (known: {known})")
    language = registry.language(datasets[dataset])
    rules: dict[str, list[str]] | None = None
    for rule in params.get("rule", []):
        name, equals, text = rule.partition("=")
        if not (name and equals and text):
            raise HttpError(400, "bad_request", f"rule {rule!r}: expected DATASET=VIEW")
        rules = rules or {}
        rules.setdefault(name, []).append(text)
    try:
        view = parse_view(_one(params, "view"), language)
        said = relay.explain(dataset, view, rules, _rate(params))
    except InvalidView as exc:
        raise HttpError(400, "invalid_view", f"view: {exc}") from None
    except Unauthorized as exc:
        raise HttpError(HTTPStatus.FORBIDDEN, exc.code, exc.message) from None
    return _JSON.encode(said) + b"\n"


def top(query: str) -> int:
    """How many subscribers ``GET /v1/admin/subscribers?query`` asks for (raises HttpError)."""
    return _top(_params(query, PARAMETERS[SUBSCRIBERS]))


def _params(query: str, known: frozenset[str]) -> dict[str, list[str]]:
    try:
        pairs = urllib.parse.parse_qsl(
            query, keep_blank_values=True, strict_parsing=bool(query), max_num_fields=64
        )
    except ValueError as exc:
        raise HttpError(400, "bad_request", f"the query string does not parse: {exc}") from None
    params: dict[str, list[str]] = {}
    for name, value in pairs:
        if name not in known:
            expected = ", ".join(sorted(known))
            raise HttpError(400, "bad_request", f"unknown parameter {name!r} (known: {expected})")
        params.setdefault(name, []).append(value)
    return params


def _one(params: Mapping[str, list[str]], name: str) -> str:
    values = params.get(name, [])
    if len(values) > 1:
        raise HttpError(400, "bad_request", f"parameter {name!r} given twice")
    if not values or not values[0]:
        raise HttpError(400, "bad_request", f"parameter {name!r} is required")
    return values[0]


def _top(params: Mapping[str, list[str]]) -> int:
    text = _one(params, "top") if "top" in params else "20"
    if not text.isdigit() or not 1 <= int(text) <= MOST:
        raise HttpError(400, "bad_request", f"top must be a whole number 1 to {MOST}, not {text!r}")
    return int(text)


def _rate(params: Mapping[str, list[str]]) -> float:
    text = _one(params, "rate") if "rate" in params else "10"
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise HttpError(400, "bad_request", f"rate must be a positive number, not {text!r}")
    return rate
