"""The answers to a connection's requests that are blocking work (``ReadState``, ``Publish``,
``Curious``: ``publisher.protocol`` rule 6), run on threads off the control plane's loop.

Each request is answered once: its result, an ``Error`` naming it when the datasets refuse it,
or ``Error{internal}`` for a fault of ours (``answered``), so that no request waits forever and
the connection lives. ``Datasets`` is what the control plane and these answers need of the
publisher's datasets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from fanout import metrics
from fanout.connection import Outbound
from fanout.errors import FanoutError, InvalidView
from fanout.publisher.log import LogGap
from fanout.views import View
from fanout.wire import codec
from fanout.wire.arrow import to_numpy
from fanout.wire.columns import decode_columns, encode_columns, key_column
from fanout.wire.messages import (
    Batch,
    Curious,
    DatasetInfo,
    Error,
    Knowledge,
    Publish,
    Published,
    ReadState,
    StateRows,
)

log = logging.getLogger(__name__)


class Datasets(Protocol):
    """What the control plane needs of the publisher's datasets (``service.DatasetService``)."""

    def infos(self) -> list[DatasetInfo]:
        """The catalog."""

    def check(self, name: str, view: View) -> View:
        """The primitive to hold for ``view`` (raises InvalidView)."""

    def read(self, name: str, view: View, tick: int) -> tuple[int, pa.Table]:
        """The authoritative rows in ``view`` at ``tick`` (blocking)."""

    def replay(self, name: str, epoch: int, after: int) -> list[Batch]:
        """Logged batches after seq ``after`` for a resuming relay (blocking; raises LogGap)."""

    def publish(
        self, name: str, upserts: dict[str, np.ndarray], deletes: np.ndarray
    ) -> tuple[int, int]:
        """Append a producer's events durably (blocking)."""

    def knowledge(self, name: str, epoch: int, req: int, first: int, last: int) -> list[Knowledge]:
        """Logged micro-batches for a curious relay (blocking; raises BadRequest/LogGap)."""

    def samples(self) -> list[metrics.Sample]:
        """The datasets' figures for ``GET /metrics``."""


#: Told of each write once durable: the request, the columns it upserted, its offsets.
Logged = Callable[[Publish, dict[str, np.ndarray], int, int], None]


async def answer(
    datasets: Datasets,
    request: ReadState | Publish | Curious,
    outbound: Outbound,
    logged: Logged = lambda *_: None,
) -> None:
    """Answer a request that is blocking work, run on a thread; a refusal goes to the
    requester as an ``Error`` naming its request. A write, once durable and answered, is told
    to ``logged`` (the control plane passes it on to other relays: ``publisher.passing``)."""
    match request:
        case ReadState():
            await _read_state(datasets, request, outbound)
        case Publish():
            await _publish(datasets, request, outbound, logged)
        case Curious():
            await _curious(datasets, request, outbound)


async def _curious(datasets: Datasets, request: Curious, outbound: Outbound) -> None:
    try:
        answers = await asyncio.to_thread(
            datasets.knowledge,
            request.dataset,
            request.epoch,
            request.req,
            request.first,
            request.last,
        )
    except FanoutError as exc:
        code = "lost" if isinstance(exc, LogGap) else exc.code
        outbound.offer(codec.encode(Error(code, str(exc), ref=request.req)))
        return
    for answer in answers:
        await outbound.put(codec.encode(answer))


async def _publish(
    datasets: Datasets, request: Publish, outbound: Outbound, logged: Logged
) -> None:
    # Acknowledged only once durable: the append returns after the fsync.
    try:
        upserts = decode_columns(request.upserts)
        deletes = key_column(
            request.deletes, _key_of(datasets, request.dataset), f"publish {request.req} deletes"
        )
        first, last = await asyncio.to_thread(datasets.publish, request.dataset, upserts, deletes)
    except FanoutError as exc:
        outbound.offer(codec.encode(Error(exc.code, str(exc), ref=request.req)))
        return
    outbound.offer(codec.encode(Published(request.req, first, last)))
    logged(request, upserts, first, last)


def _key_of(datasets: Datasets, dataset: str) -> str:
    """The key column of ``dataset`` (raises InvalidView: no such dataset)."""
    keys = {info.name: info.key for info in datasets.infos()}
    if dataset not in keys:
        raise InvalidView(f"unknown dataset {dataset!r} (serving: {', '.join(keys) or 'none'})")
    return keys[dataset]


async def _read_state(datasets: Datasets, request: ReadState, outbound: Outbound) -> None:
    try:
        tick, table = await asyncio.to_thread(
            datasets.read, request.dataset, request.view, request.tick
        )
    except (FanoutError, TimeoutError) as exc:
        code = exc.code if isinstance(exc, FanoutError) else "timeout"
        outbound.offer(codec.encode(Error(code, str(exc), ref=request.req)))
        return
    rows = encode_columns({name: to_numpy(table.column(name)) for name in table.column_names})
    reply = StateRows(req=request.req, dataset=request.dataset, tick=tick, rows=rows)
    outbound.offer(codec.encode(reply))


async def answered(
    req: int, job: Callable[[], Coroutine[Any, Any, None]], outbound: Outbound
) -> None:
    """Run a request's ``job``; a fault of ours in it is logged and told to the requester
    (``Error{code: "internal"}``), so that no request waits forever and the connection lives.
    The job's coroutine is made here: a connection that ends before this task runs leaves
    none behind never awaited."""
    try:
        await job()
    except Exception as exc:
        log.exception("request %d failed", req)
        message = f"request {req} failed in the publisher: {type(exc).__name__}: {exc}"
        outbound.offer(codec.encode(Error("internal", message, ref=req)))
