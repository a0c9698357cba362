"""The relay's link to its upstream (the publisher, or a relay above): its asyncio side.

The link connects, says ``Hello`` with the core's resume points, reads the upstream's frames
and reconnects with backoff (doubling to 5 s) when the connection is lost. Batches go to the
writer (``relay.shell.writer``: each is written to the inert buffer on the writer thread, the one
thread besides the loop, and the pump swaps it in as soon as it is written); any other frame
waits for the batches before it, then applies: the ``Catalog`` (the link is then connected),
``Knowledge`` for relays below, answers to subscribers' writes (``relay.core.forwarding``), errors.

When the connection is lost, the subscribers' writes awaiting answers are refused, the core
forgets what it held upstream (it acquires it anew on reconnection) and the relays below are
closed so that they connect again (``tiers``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from websockets.exceptions import ConnectionClosed

from fanout import tls
from fanout.auth import PresentedToken
from fanout.cluster.sharing import Sharing
from fanout.cluster.upstreams import PUBLISHER
from fanout.connection import Outbound, dial
from fanout.errors import ProtocolError
from fanout.relay.config import RelayConfig
from fanout.relay.core.forwarding import Forwarder
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.relay.shell.sharedstate import SharedReader
from fanout.relay.shell.writer import Writer
from fanout.tiers.below import Relays
from fanout.tiers.shared import SHARED_STATE
from fanout.wire import codec
from fanout.wire.handshake import check_welcome
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Batch,
    Catalog,
    DatasetInfo,
    DatasetState,
    Error,
    Hello,
    Knowledge,
    Pending,
    Published,
    Responsibility,
    Resync,
    Settled,
    StateRows,
    Subscribe,
    Welcome,
    Written,
)

log = logging.getLogger(__name__)

#: Largest frame accepted from the publisher (a batch with a big snapshot).
MAX_FROM_PUBLISHER = 256 << 20
#: Bytes the upstream link reads from its socket at a time (asyncio's default: 256 KiB).
UPSTREAM_READ = 8 << 20


class UpstreamLink:
    """The relay's connection to its upstream, kept up until cancelled.

    Attributes:
        writer: writes the upstream's batches; the pump swaps them in.
        ready: set once the first catalog came (the relay may say it is ready).
        datasets: the upstream's datasets and their index kinds, for subscribers' ``Welcome``.
        catalog: the upstream's datasets as its last ``Catalog`` listed them.
    """

    def __init__(
        self,
        config: RelayConfig,
        core: RelayCore,
        relays: Relays,
        forwarder: Forwarder,
        *,
        dispatch: Callable[[Iterable[Send]], None],
        wake: Callable[[], None],
        reply: Callable[[int, Published | Error], None],
        close_below: Callable[[int], None],
        subscribe: Callable[[int, Subscribe], None],
    ) -> None:
        """Args:
        config: the relay's configuration (``publisher`` is the upstream's URL).
        core: the relay's core.
        relays: the relays below (``tiers``).
        forwarder: subscribers' writes awaiting the upstream's answers.
        dispatch: sends the frames the core and the relays below return.
        wake: wakes the pump.
        reply: sends an answer to a subscriber's write (client, frame).
        close_below: closes a relay below's connection (it connects again).
        subscribe: admits and takes a subscription (the relay's ``subscribe``): those held
            until the catalog are admitted again once it comes, their tokens' rules applied
            to datasets now known.
        """
        self._config = config
        self._core = core
        self._relays = relays
        self._forwarder = forwarder
        self._dispatch = dispatch
        self._reply = reply
        self._close_below = close_below
        self._subscribe = subscribe
        directory = config.process.shared_directory
        shared = SharedReader(Path(directory)) if directory else None
        self.writer = Writer(relays, dispatch, wake, self.drop, relays.decoded, shared=shared)
        self._capabilities = [SHARED_STATE] if shared is not None else []
        self.wake = wake
        self.tls_ca = config.upstream.tls_ca
        self._token = PresentedToken(config.upstream.token, config.upstream.token_file)
        self._outbound: Outbound | None = None
        self._transport: asyncio.Transport | None = None
        self.ready = asyncio.Event()
        #: The forward policy's upstreams (``cluster.sharing``), if the relay forwards.
        self.sharing: Sharing | None = None
        #: A worker's: takes its leader's map of responsibility (``cluster.mapcopy``).
        self.on_map: Callable[[Responsibility], None] | None = None
        self.datasets: dict[str, str] = {}
        self.catalog: list[DatasetInfo] = []

    @property
    def token(self) -> str:
        """The token to present upstream, as it is now (``auth.PresentedToken``)."""
        return self._token.current()

    @property
    def connected(self) -> bool:
        """Whether the link is connected and has the upstream's catalog."""
        return self._outbound is not None

    def stats(self) -> dict[str, int]:
        """The forward policy's counts, if the relay forwards (``cluster.sharing``)."""
        return {} if self.sharing is None else self.sharing.stats()

    def send(self, data: bytes) -> None:
        """Send a frame upstream; with no connection there is nothing to tell: on reconnect
        the core acquires everything it holds anew."""
        if self._outbound is not None:
            self._outbound.offer(data)

    async def run(self) -> None:
        """Connect and follow the upstream until cancelled, reconnecting with backoff."""
        config = self._config
        delay = config.upstream.reconnect_delay
        while True:
            try:
                await self._follow()
                delay = config.upstream.reconnect_delay
            except (OSError, ConnectionClosed, ProtocolError, TimeoutError) as exc:
                log.warning(
                    "upstream %s: %s; reconnecting in %.1f s", config.upstream.publisher, exc, delay
                )
            self._outbound = None
            if self.sharing is not None:
                self.sharing.publisher_lost()
            for client, refusal in self._forwarder.lost():
                self._reply(client, refusal)
            self._dispatch(self._core.serving.live.lost())  # shown, may never be logged
            self._core.on_upstream_lost()
            for client in self._relays.upstream_lost():  # they connect again (``fanout.tiers``)
                self._close_below(client)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _follow(self) -> None:
        config = self._config
        async with dial(
            config.upstream.publisher,
            max_size=MAX_FROM_PUBLISHER,
            compression=None,
            open_timeout=10,
            ping_interval=config.upstream.keepalive,
            ping_timeout=config.upstream.keepalive,
            ssl=tls.for_url(config.upstream.publisher, config.upstream.tls_ca),
        ) as websocket:
            decoder = codec.from_publisher()
            hello = Hello(
                version=PROTOCOL_VERSION,
                role="relay",
                name=config.name,
                capabilities=self._capabilities,
                resume=self._core.resume_points(),
                token=self.token,
            )
            await websocket.send(codec.encode(hello))
            check_welcome(decoder.decode(await websocket.recv()))
            _read_more_at_once(websocket.transport)
            self._transport = websocket.transport
            async with Outbound(websocket, limit=4096) as outbound:
                try:
                    async for message in websocket:
                        await self._on_frame(decoder.decode(message), outbound)
                except ConnectionClosed:
                    if self.writer.failure is not None:  # dropped for a batch that failed
                        raise self.writer.failure from None
                    raise
                finally:
                    self._transport = None
                    await self.writer.stop()

    def _on_dataset(self, frame: DatasetState | Resync) -> None:
        """The upstream's streaming query of a dataset stopped or runs again: said in the log
        and in ``/metrics`` (``relay_upstream_dataset_running``), and passed to relays below.
        Subscribers stay: their views go on once batches come again. Or (``Resync``) its
        batches lack changes inside some primitives until their snapshots come again."""
        if isinstance(frame, Resync):
            self._dispatch(self._relays.on_resync(frame))
            self.wake()
            return
        state = frame
        upstream = self._config.upstream.publisher
        if state.running:
            log.warning("upstream %s: dataset %s runs again", upstream, state.dataset)
        else:
            log.warning(
                "upstream %s: dataset %s stopped (%s); it restarts in %.1f s",
                upstream,
                state.dataset,
                state.reason,
                state.retry_in,
            )
        self._dispatch(self._relays.on_dataset_state(state))

    def drop(self, error: BaseException) -> None:
        """A batch failed to write: drop the connection (the link then reconnects)."""
        log.warning(
            "upstream %s: dropping the connection: %s", self._config.upstream.publisher, error
        )
        if self._transport is not None:
            self._transport.abort()

    def _answered(self, frame: Published | Error) -> None:
        """The publisher's answer to a forwarded write: to its writer, and to the live path,
        which confirms or undoes what it showed at once (``relay.core.livepath``)."""
        live = self._core.serving.live
        if isinstance(frame, Published):
            self._dispatch(live.accepted(frame.req, frame.last))
        elif frame.ref is not None:
            self._dispatch(live.refused(frame.ref))
        self._reply(*self._forwarder.answer(frame))

    def _elsewhere(self, frame: Written | Pending | Settled) -> None:
        """A write made elsewhere (``relay.core.livepath``): logged (``Written``), or from a
        worker's leader before the publisher answers (``Pending``, then ``Settled``). Shown at
        once, and passed on once logged to the relays below: the batches before it do not
        carry it."""
        live, now = self._core.serving.live, asyncio.get_running_loop().time()
        below: Written | None
        match frame:
            case Written():
                sends, below = live.from_elsewhere(frame, now), frame
            case Pending():
                sends, below = live.pending(frame, now), None
            case Settled():
                sends, below = live.settled(frame)
        self._dispatch(sends)
        if below is not None:
            self._dispatch(self._relays.on_written(below))

    async def _batch(self, frame: Batch) -> None:
        if self.sharing is not None:
            await self.sharing.on_piece(PUBLISHER, frame)  # assembled with other relays' pieces
            return
        self.writer.put(frame)
        # One batch may wait while another is written, so that the next write starts as soon
        # as the pump swaps the last one in; more wait in the socket.
        await self.writer.room(1)

    def _on_catalog(self, catalog: Catalog, outbound: Outbound) -> None:
        """Upstream's datasets (first on every connection): every primitive acquired again,
        and the subscriptions held until now admitted as if they had just come."""
        self._core.on_catalog(catalog)  # raises ProtocolError before anything is changed
        held = self._core.holding.release()  # admitted below, their datasets known
        if self.sharing is not None:
            self.sharing.on_catalog(catalog)
        self.datasets = {info.name: info.index for info in catalog.datasets}
        self.catalog = list(catalog.datasets)
        self._outbound = outbound
        self._core.serving.live.back()  # accepted writes wait for the stream again
        self._dispatch(self._core.on_upstream_connected())
        for request in held:
            self._subscribe(request.client, request.request)
        self.ready.set()

    async def _on_frame(self, frame: object, outbound: Outbound) -> None:
        if isinstance(frame, Batch):
            await self._batch(frame)
            return
        if isinstance(frame, Written | Pending | Settled):
            self._elsewhere(frame)
            return
        await self.writer.drain()  # other frames apply after the batches before them
        match frame:
            case Catalog() as catalog:
                self._on_catalog(catalog, outbound)
            case Knowledge() as knowledge:
                waiting, sends = self._relays.on_knowledge(knowledge)
                self._dispatch(sends)
                if waiting:
                    self.wake()
            case DatasetState() | Resync():
                self._on_dataset(frame)
            case Responsibility() as told if self.on_map is not None:
                self.on_map(told)
            case Published() | Error() if self._forwarder.answers(frame):
                self._answered(frame)
            case Error() as error:
                passed = self._relays.on_upstream_error(error)
                if passed is None:
                    self._dispatch(self._core.on_upstream_error(error))
                    self._dispatch(self._relays.uncovered())
                else:
                    self._dispatch(passed)
                self.wake()
            case Welcome() | StateRows() | Responsibility():
                raise ProtocolError(f"unexpected {type(frame).__name__.lower()} from the publisher")


def _read_more_at_once(transport: asyncio.BaseTransport) -> None:
    """Let the upstream link read up to ``UPSTREAM_READ`` bytes a time.

    asyncio's socket transport reads at most 256 KiB per turn of the event loop (its
    ``max_size``), and a turn may hold a round of pushes of up to ``pump_budget``: with a
    busy pump, a tick's batch of megabytes would come in over a dozen rounds and be swapped
    in that much later. Reading what the socket holds takes it in one or two. A transport
    without ``max_size`` (another event loop's) is left as it is.
    """
    if isinstance(getattr(transport, "max_size", None), int):
        transport.max_size = UPSTREAM_READ  # type: ignore[attr-defined]
