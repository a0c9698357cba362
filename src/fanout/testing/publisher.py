"""A scripted publisher: a WebSocket server speaking the publisher's side of the real protocol to
real relays, sending the batches its caller makes (no Spark)::

    publisher = ScriptedPublisher(Catalog([info]))
    async with serving(publisher) as url, running_relay(url) as (relay, relay_url):
        acquire = await publisher.next_acquire()  # once a subscriber subscribed at the relay
        await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])

1. A relay's ``Hello`` is welcomed with the next of ``catalogs`` (the last one stays); any other
   first frame closes the connection (1002).
2. Every ``Acquire`` is held until its ``Release`` and fresh until ``take_fresh``; frames go to
   ``on_frame``, or acquires to ``next_acquire``.
3. A batch goes to every relay connected; seqs count from 0 per dataset (``next_seq``).
4. ``Curious`` is answered from the last ``LOGGED`` batches sent (a seq's ``Knowledge``: its
   upserts and deletes), ``lost`` for one not kept; nothing else. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from fanout.testing.ports import LOOPBACK
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Catalog,
    Curious,
    DatasetInfo,
    Error,
    Frame,
    Hello,
    Knowledge,
    Release,
    Welcome,
)

#: Batches kept to answer ``Curious`` from.
LOGGED = 10_000


class ScriptedPublisher:
    """Serves relays a catalog, tracks their primitives, sends them the batches it is given.

    Attributes:
        catalogs: the catalogs still to send, one per connection (the last one stays).
        relays: the relay connections open now.
        connections: relay connections accepted so far.
        hellos: each relay connection's ``Hello``, in order.
        held: the primitives held, by number (an ``Acquire`` not yet released).
        next_seq: the next batch's seq, by dataset.
    """

    def __init__(
        self,
        catalogs: Catalog | Sequence[Catalog],
        *,
        name: str = "scripted",
        on_frame: Callable[[Frame], None] | None = None,
    ) -> None:
        """Args:
        catalogs: what relays are told the datasets are (one catalog, or one a connection).
        name: the server's name in ``Welcome``.
        on_frame: called with every frame from a relay (then ``next_acquire`` has none).
        """
        self.catalogs = [catalogs] if isinstance(catalogs, Catalog) else list(catalogs)
        if not self.catalogs:
            raise ValueError("a scripted publisher needs a catalog")
        self.name = name
        self.relays: list[ServerConnection] = []
        self.connections = 0
        self.hellos: list[Hello] = []
        self.held: dict[int, Acquire] = {}
        self.next_seq: dict[str, int] = {}
        self._on_frame = on_frame
        self._fresh: list[int] = []
        self._acquired: asyncio.Queue[Acquire] = asyncio.Queue()
        self._datasets = {info.name: info for info in self.catalogs[-1].datasets}
        #: The batches sent, by (dataset, epoch, seq): the last ``LOGGED``.
        self.log: dict[tuple[str, int, int], Batch] = {}

    @property
    def datasets(self) -> dict[str, DatasetInfo]:
        """The datasets of the catalog sent last (or to be sent first), by name."""
        return self._datasets

    async def handle(self, websocket: ServerConnection) -> None:
        """Serve one relay connection until it closes (``websockets`` handler)."""
        decoder = codec.to_publisher()
        hello = decoder.decode(await websocket.recv())
        if not isinstance(hello, Hello):
            await websocket.close(CloseCode.PROTOCOL_ERROR, "expected a hello")
            return
        self.hellos.append(hello)
        await websocket.send(codec.encode(Welcome(PROTOCOL_VERSION, self.name, "scripted")))
        catalog = self.catalogs.pop(0) if len(self.catalogs) > 1 else self.catalogs[0]
        self._datasets = {info.name: info for info in catalog.datasets}
        await websocket.send(codec.encode(catalog))
        self.relays.append(websocket)
        self.connections += 1
        try:
            with contextlib.suppress(ConnectionClosed):
                async for message in websocket:
                    frame = decoder.decode(message)
                    if isinstance(frame, Curious):
                        for answer in self._answers(frame):
                            await websocket.send(codec.encode(answer))
                    self._take(frame)
        finally:
            if websocket in self.relays:  # a test may have taken it out to close it
                self.relays.remove(websocket)

    def _answers(self, curious: Curious) -> list[Knowledge | Error]:
        """A relay's ``Curious``, answered from the batches sent (rule 4)."""
        answers: list[Knowledge | Error] = []
        for seq in range(curious.first, curious.last + 1):
            batch = self.log.get((curious.dataset, curious.epoch, seq))
            if batch is None:
                message = f"seq {seq} of {curious.dataset!r} is not in the scripted log"
                return [Error("lost", message, ref=curious.req)]
            answers.append(
                Knowledge(
                    curious.req,
                    batch.dataset,
                    batch.epoch,
                    batch.seq,
                    batch.tick,
                    batch.tick_time,
                    batch.upserts,
                    batch.deletes,
                )
            )
        return answers

    def _take(self, frame: Frame) -> None:
        match frame:
            case Acquire(prim=prim):
                self.held[prim] = frame
                self._fresh.append(prim)
            case Release(prim=prim):
                self.held.pop(prim, None)
                if prim in self._fresh:
                    self._fresh.remove(prim)
        if self._on_frame is not None:
            self._on_frame(frame)
        elif isinstance(frame, Acquire):
            self._acquired.put_nowait(frame)

    async def next_acquire(self, timeout: float = 5.0) -> Acquire:
        """The next ``Acquire`` a relay sent (in order, each once).

        Raises:
            TimeoutError: none came within ``timeout`` seconds.
        """
        return await asyncio.wait_for(self._acquired.get(), timeout)

    def take_fresh(self) -> list[int]:
        """The primitives acquired (and not released) since the last call: the snapshots the
        next batch carries, as the real publisher's does."""
        fresh, self._fresh = self._fresh, []
        return fresh

    async def send(
        self,
        upserts: Mapping[str, npt.ArrayLike] | None = None,
        *,
        deletes: Sequence[Any] | npt.NDArray[Any] = (),
        snapshots: Sequence[int] = (),
        dataset: str | None = None,
        tick: int | None = None,
        tick_time: float | None = None,
        epoch: int = 1,
    ) -> Batch:
        """Send one batch to every relay connected.

        Args:
            upserts: the rows changed, as columns (need not be every column: a test may send
                a malformed batch).
            deletes: the keys deleted.
            snapshots: primitives whose snapshot this batch carries (``take_fresh()``).
            dataset: which dataset (default: the catalog's first).
            tick: the batch's tick (default: its seq); tick_time: its wall-clock time (default:
                now).
            epoch: the stream's epoch.

        Returns:
            The batch sent; its seq is ``next_seq[dataset]``, which moves on by one.
        """
        info = self._info(dataset)
        seq = self.next_seq.get(info.name, 0)
        self.next_seq[info.name] = seq + 1
        batch = Batch(
            dataset=info.name,
            epoch=epoch,
            seq=seq,
            tick=seq if tick is None else tick,
            tick_time=time.time() if tick_time is None else tick_time,
            upserts=encode_columns(upserts or {}),
            deletes=encode_columns({info.key: _keys(deletes, info)}),
            snapshots=list(snapshots),
        )
        self.log[(batch.dataset, batch.epoch, batch.seq)] = batch
        if len(self.log) > LOGGED:
            del self.log[next(iter(self.log))]
        await self.broadcast(batch)
        return batch

    async def broadcast(self, frame: Frame) -> int:
        """Send any frame (an ``Error`` refusing a primitive, say) to every relay connected.

        Returns:
            How many relays it was sent to.
        """
        message = codec.encode(frame)
        sent = 0
        for relay in list(self.relays):
            with contextlib.suppress(ConnectionClosed):  # it is going: it will not miss this
                await relay.send(message)
                sent += 1
        return sent

    def _info(self, dataset: str | None) -> DatasetInfo:
        if dataset is None:
            return next(iter(self._datasets.values()))
        try:
            return self._datasets[dataset]
        except KeyError:
            raise ValueError(f"the catalog has no dataset {dataset!r}") from None


def _keys(deletes: Sequence[Any] | npt.NDArray[Any], info: DatasetInfo) -> npt.NDArray[Any]:
    """Deleted keys as an array of the key column's dtype."""
    dtype = info.columns.get(info.key, "<i8")
    return np.asarray(deletes, dtype=object if dtype == "str" else np.dtype(dtype))


@contextlib.asynccontextmanager
async def serving(
    publisher: ScriptedPublisher, host: str = LOOPBACK, port: int = 0
) -> AsyncIterator[str]:
    """Serve ``publisher`` on ``port`` of ``host`` (0: a free one); yield its URL
    (``ws://host:port``)."""
    async with serve(publisher.handle, host, port, max_size=None, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://{host}:{port}"
