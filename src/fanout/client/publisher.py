"""A reader: asks the publisher for its authoritative rows (used to check what relays deliver).

async with open_reader("ws://127.0.0.1:7700") as reader:
    tick, rows = await reader.read("agents", Box((0, 0), (100, 100)), tick=1234)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from ssl import SSLContext
from typing import Any

import numpy as np
import numpy.typing as npt
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from fanout import tls
from fanout.background import Background
from fanout.client.subscriber import MAX_FRAME, SubscriptionError
from fanout.connection import close_reason, dial, greet
from fanout.errors import ProtocolError
from fanout.views import View
from fanout.wire import codec
from fanout.wire.columns import Columns, decode_columns, encode_columns, from_values
from fanout.wire.handshake import check_welcome
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Catalog,
    DatasetInfo,
    Error,
    Frame,
    Hello,
    Publish,
    Published,
    ReadState,
    Role,
    StateRows,
)
from fanout.wire.tables import table_columns

Rows = dict[str, npt.NDArray[Any]]


class PublisherClient:
    """One reader or producer connection to the publisher."""

    def __init__(self, websocket: ClientConnection) -> None:
        self._websocket = websocket
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.datasets: dict[str, DatasetInfo] = {}
        self._catalog = asyncio.Event()  # set by the catalog, or by the connection's end
        #: Why the connection can serve no more, if so.
        self.failure: SubscriptionError | None = None

    async def catalog(self) -> dict[str, DatasetInfo]:
        """The publisher's datasets.

        Raises:
            SubscriptionError: the connection can serve no more (``failure``).
        """
        await self._catalog.wait()
        if self.failure is not None:
            raise self.failure
        return self.datasets

    async def read(self, dataset: str, view: View, tick: int = -1) -> tuple[int, Rows]:
        """The publisher's rows of ``dataset`` inside ``view`` as of ``tick`` (-1: latest).

        Raises:
            SubscriptionError: the publisher refused (unknown tick, bad view, timeout), or the
                connection can serve no more (``failure``).
        """
        req = next(self._ids)
        result: tuple[int, Rows] = await self._request(req, ReadState(req, dataset, view, tick))
        return result

    async def publish(
        self,
        dataset: str,
        rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]] | Any = (),
        deletes: Sequence[Any] = (),
    ) -> tuple[int, int]:
        """Upsert ``rows`` (whole rows: dicts, columns, or a pandas DataFrame or Arrow table) and
        delete keys ``deletes``. A DataFrame's missing values (``isna``: NaN in a float column,
        None, NaT, NA) and an Arrow table's nulls travel as NULL; in numpy arrays and Python
        floats NaN is a number (``wire.tables``).

        Returns:
            The ingest-log offsets (first, last) given to the events, once they are durable.

        Raises:
            SubscriptionError: the publisher refused them (unknown dataset, not an ingest
                dataset, a value of the wrong type, a missing key...), or the connection can
                serve no more (``failure``).
        """
        table = table_columns(rows)
        columns = _columns(rows) if table is None else table
        key = await self._key(dataset)
        request = Publish(
            req=next(self._ids),
            dataset=dataset,
            upserts=encode_columns(columns) if columns else Columns(),
            deletes=encode_columns({key: np.asarray(list(deletes))}) if deletes else Columns(),
        )
        result: tuple[int, int] = await self._request(request.req, request)
        return result

    async def _key(self, dataset: str) -> str:
        info = (await self.catalog()).get(dataset)
        if info is None:
            raise SubscriptionError("invalid_view", f"unknown dataset {dataset!r}")
        return info.key

    async def _request(self, req: int, frame: Frame) -> Any:
        if self.failure is not None:
            raise self.failure
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req] = future
        await self._websocket.send(codec.encode(frame))
        try:
            return await future
        finally:
            self._pending.pop(req, None)

    async def _read(self) -> None:
        decoder = codec.from_publisher()
        failure = SubscriptionError("closed", "connection to the publisher closed")
        try:
            async for message in self._websocket:
                self._on_frame(decoder.decode(message))
        except ConnectionClosed as exc:
            failure = SubscriptionError("closed", str(exc))
        except ProtocolError as exc:
            failure = SubscriptionError("protocol", str(exc))
            # Nobody reads this connection any more: close it, so the publisher learns why.
            await self._websocket.close(CloseCode.PROTOCOL_ERROR, close_reason(str(exc)))
        self.failure = failure
        self._catalog.set()
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
            case Published(req=req) if req in self._pending:
                self._pending[req].set_result((frame.first, frame.last))
            case Error(ref=ref) if ref is not None and ref in self._pending:
                self._pending[ref].set_exception(SubscriptionError(frame.code, frame.message))
            case _:
                raise ProtocolError(f"unexpected frame from the publisher: {frame!r:.200}")


@contextlib.asynccontextmanager
async def open_publisher(
    url: str, role: Role, *, token: str = "", ssl: SSLContext | None = None
) -> AsyncIterator[PublisherClient]:
    """Connect to the publisher's control plane as a ``reader`` or ``producer``.

    ``token``: a JSON Web Token granting the role (a reader needs ``relay``), for a publisher
    that requires one; ``ssl``: the TLS context for ``wss://`` (default: the system's).
    """
    secure = ssl if ssl is not None else tls.for_url(url)
    async with dial(
        url, max_size=MAX_FRAME, compression=None, open_timeout=10, ssl=secure
    ) as websocket:
        hello = Hello(version=PROTOCOL_VERSION, role=role, token=token)
        check_welcome(
            codec.from_publisher().decode(await greet(websocket, codec.encode(hello), url))
        )
        client = PublisherClient(websocket)
        async with Background() as background:
            reader = background.start(client._read())  # ends once the connection closes
            try:
                yield client
            finally:
                await websocket.close()
                await asyncio.wait([reader])  # the requests fail with the connection


def open_reader(
    url: str, *, token: str = "", ssl: SSLContext | None = None
) -> contextlib.AbstractAsyncContextManager[PublisherClient]:
    """Connect as a reader (``read`` the authoritative state)."""
    return open_publisher(url, "reader", token=token, ssl=ssl)


def open_producer(
    url: str, *, token: str = "", ssl: SSLContext | None = None
) -> contextlib.AbstractAsyncContextManager[PublisherClient]:
    """Connect as a producer (``publish`` to ingest datasets)."""
    return open_publisher(url, "producer", token=token, ssl=ssl)


def _columns(rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    if isinstance(rows, Mapping):
        return {name: from_values(values) for name, values in rows.items()}
    if not rows:
        return {}
    names = list(rows[0])
    for index, row in enumerate(rows):
        if list(row) != names:
            raise ValueError(f"row {index} has columns {sorted(row)}, row 0 has {sorted(names)}")
    return {name: from_values([row[name] for row in rows]) for name in names}
