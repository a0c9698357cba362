"""A reader: asks the publisher for its authoritative rows (used to check what relays deliver).

async with open_reader("ws://127.0.0.1:7700") as reader:
    tick, rows = await reader.read("agents", Box((0, 0), (100, 100)), tick=1234)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import numpy.typing as npt
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from fanout.client.subscriber import MAX_FRAME, SubscriptionError
from fanout.errors import ProtocolError
from fanout.views import View
from fanout.wire import codec
from fanout.wire.columns import decode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Catalog,
    DatasetInfo,
    Error,
    Hello,
    ReadState,
    StateRows,
)
from fanout.wire.session import check_welcome

Rows = dict[str, npt.NDArray[Any]]


class StateReader:
    """One reader connection to the publisher."""

    def __init__(self, websocket: ClientConnection) -> None:
        self._websocket = websocket
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[tuple[int, Rows]]] = {}
        self.datasets: dict[str, DatasetInfo] = {}
        self._catalog = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def catalog(self) -> dict[str, DatasetInfo]:
        """The publisher's datasets."""
        await self._catalog.wait()
        return self.datasets

    async def read(self, dataset: str, view: View, tick: int = -1) -> tuple[int, Rows]:
        """The publisher's rows of ``dataset`` inside ``view`` as of ``tick`` (-1: latest).

        Raises:
            SubscriptionError: the publisher refused (unknown tick, bad view, timeout).
        """
        req = next(self._ids)
        future: asyncio.Future[tuple[int, Rows]] = asyncio.get_running_loop().create_future()
        self._pending[req] = future
        await self._websocket.send(codec.encode(ReadState(req, dataset, view, tick)))
        try:
            return await future
        finally:
            self._pending.pop(req, None)

    async def _read(self) -> None:
        decoder = codec.from_publisher()
        failure: Exception = SubscriptionError("closed", "connection to the publisher closed")
        try:
            async for message in self._websocket:
                self._on_frame(decoder.decode(message))
        except (ConnectionClosed, ProtocolError) as exc:
            failure = SubscriptionError("closed", str(exc))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(failure)

    def _on_frame(self, frame: object) -> None:
        match frame:
            case Catalog(datasets=datasets):
                self.datasets = {info.name: info for info in datasets}
                self._catalog.set()
            case StateRows(req=req) if req in self._pending:
                self._pending[req].set_result((frame.tick, decode_columns(frame.rows)))
            case Error(ref=ref) if ref is not None and ref in self._pending:
                self._pending[ref].set_exception(SubscriptionError(frame.code, frame.message))
            case _:
                raise ProtocolError(f"unexpected frame from the publisher: {frame!r:.200}")


@contextlib.asynccontextmanager
async def open_reader(url: str) -> AsyncIterator[StateReader]:
    """Connect to the publisher's control plane as a reader."""
    async with ws_connect(url, max_size=MAX_FRAME, compression=None, open_timeout=10) as websocket:
        await websocket.send(codec.encode(Hello(version=PROTOCOL_VERSION, role="reader")))
        check_welcome(codec.from_publisher().decode(await websocket.recv()))
        reader = StateReader(websocket)
        reader._task = asyncio.create_task(reader._read())
        try:
            yield reader
        finally:
            await websocket.close()
            await reader._task
