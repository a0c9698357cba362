"""The admin API of a relay with workers, answered for the whole relay (``relay.shell.workers``).

Each worker answers ``/v1/admin/...`` for itself on its own loopback port; the relay's port (any
worker, which asks the leader: ``relay.shell.carry.asked``) and the leader's port answer for the
relay: the leader checks the token and the query as any relay would (its own answer), asks every
worker the same with the request's token, and merges the answers (``relay.shell.admin``). A
worker that does not answer (restarting, gone) is left out and named in ``workers_unanswered``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fanout.http import admin as paths
from fanout.http.answers import Answer, json_headers
from fanout.http.server import HttpFrontEnd
from fanout.relay.shell import admin
from fanout.relay.shell.carry import asked

log = logging.getLogger(__name__)


async def answer(
    http: HttpFrontEnd, workers: Mapping[int, str], target: str, headers: Mapping[str, str]
) -> Answer:
    """``GET target`` (an admin path) of the relay whose leader serves ``http`` and whose
    workers listen at ``workers`` (their own ``ws://127.0.0.1:PORT``, by number)."""
    path, _, query = target.partition("?")
    own = http.admin("GET", path, headers, target)  # the token and the query checked
    if own.status != HTTPStatus.OK:
        return own
    asking = [_asked(index, address, target, headers) for index, address in workers.items()]
    answers = dict(await asyncio.gather(*asking))
    theirs = {index: body for index, body in answers.items() if body is not None}
    mine = json.loads(own.body)
    if path == paths.SUBSCRIBERS:
        body = admin.merged_subscribers(mine, theirs, paths.top(query))
    elif path == paths.BATCHES:
        body = admin.merged_batches(mine, theirs)
    else:
        body = admin.merged_explain(mine, theirs)
    body["workers_unanswered"] = sorted(set(answers) - set(theirs))
    encoded = json.dumps(body).encode() + b"\n"
    return Answer(HTTPStatus.OK, json_headers(len(encoded), HTTPStatus.OK, cors=True), encoded)


async def _asked(
    index: int, address: str, target: str, headers: Mapping[str, str]
) -> tuple[int, Any]:
    """Worker ``index``'s own answer to ``target`` (its parsed body), or None, logged."""
    try:
        got = await asked("http" + address.removeprefix("ws"), target, headers)
        if got.status == HTTPStatus.OK:
            return index, json.loads(got.body)
        why = f"it answered {got.status}: {got.body[:200]!r}"
    except (OSError, ValueError) as exc:
        why = str(exc)
    path = target.partition("?")[0]
    log.warning("relay worker %d did not answer %s: %s", index, path, why)
    return index, None
