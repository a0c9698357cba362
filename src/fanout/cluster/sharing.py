"""The forward policy's asyncio side: a relay of a map with several upstreams, the publisher and
the relays responsible for the parts it forwards (``cluster.upstreams`` decides).

Frames the core sends upstream are routed (``send``); a ``peerlink`` to another relay is opened
when first needed and owned by ``run``'s task group. Every batch goes through the assembly;
whole seqs go to the writer in order. An unreachable relay is not asked again for
``RETRY_AFTER`` seconds (the publisher serves its parts meanwhile). When the map changes, or a
split or merge moves a part, the primitives held at a relay no longer responsible are acquired
anew, routed by the new map. A relay whose lease lapsed keeps its subscribers but owns nothing
(``upstreams`` rule 4): it routes by the map without itself, its parts acquired from their new
owners and released at the publisher, until it serves again (``registry`` rule 8).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Protocol

from fanout.cluster.peerlink import PeerLink
from fanout.cluster.registry import Registry
from fanout.cluster.responsibility import ResponsibilityMap
from fanout.cluster.upstreams import PUBLISHER, Taken, Upstreams, acquired_anew, routing_map
from fanout.relay.core.relaycore import UPSTREAM, Send
from fanout.wire import codec
from fanout.wire.messages import Batch, Catalog, Error, Resync

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """What sharing needs of the link to the publisher
    (``relay.shell.upstreamlink.UpstreamLink``)."""

    tls_ca: Path | None

    @property
    def token(self) -> str:
        """The relay's token as it is now (it may be renewed while the relay runs)."""
        ...

    def send(self, data: bytes) -> None: ...

    def wake(self) -> None: ...


class Writer(Protocol):
    """What sharing needs of the relay's writer (``relay.shell.writer.Writer``, which the
    composition root hands in): whole seqs queued in order, room waited for, and every seq
    queued so far swapped in."""

    def put(self, batch: Batch) -> None: ...

    async def room(self, queued: int) -> None: ...

    async def drain(self) -> None: ...


#: Seconds a relay that could not be reached is not asked again.
RETRY_AFTER = 5.0


class Coverage(Protocol):
    """What sharing asks of the relay when part of a stream is lost (``tiers.below.Relays``):
    each also tells the relays below which of their primitives wait for snapshots again."""

    def resync(self, dataset: str, prims: Collection[int] | None = None) -> list[Send]:
        """Acquire primitives ``prims`` of ``dataset`` (default: all) anew
        (``RelayCore.resync``)."""
        ...

    def on_resync(self, resync: Resync) -> list[Send]:
        """An upstream relay's ``Resync`` (``RelayCore.unready``)."""
        ...


class Sharing:
    """The upstreams of a relay with the forward policy."""

    def __init__(
        self,
        coverage: Coverage,
        registry: Registry,
        writer: Writer,
        publisher: Publisher,
        dispatch: Callable[[Iterable[Send]], None],
    ) -> None:
        """Args:
        coverage: the relay's coverage (resynced when part of a stream is lost).
        registry: the map.
        writer: where whole seqs go.
        publisher: the link to the publisher (``relay.shell.upstreamlink``).
        dispatch: sends the core's frames.
        """
        self._coverage, self._registry, self._writer = coverage, registry, writer
        self._to_publisher, self._dispatch = publisher.send, dispatch
        self._wake = publisher.wake
        self._publisher, self._tls_ca = publisher, publisher.tls_ca
        self.upstreams = Upstreams(registry.name)
        self._links: dict[str, PeerLink] = {}
        self._failed: dict[str, float] = {}
        self._group: asyncio.TaskGroup | None = None
        #: The map routed by (``upstreams`` rule 4), and whether this relay owns its parts.
        self._routing, self._owning = registry.map, True
        registry.on_change = self._map_changed
        registry.lapse_watchers.append(self._lapsed)
        registry.back_watchers.append(self._serving_again)

    async def run(self) -> None:
        """Own the links to other relays until cancelled."""
        async with asyncio.TaskGroup() as group:
            self._group = group
            await asyncio.Event().wait()

    # -- frames going up -------------------------------------------------------------------

    def dispatch_below(self, sends: Iterable[Send]) -> None:
        """Dispatch what a relay below's frame made the core send: what it acquires for the
        relay below, from the publisher (``upstreams`` rule 1)."""
        for send in sends:
            if send.to == UPSTREAM:
                self.send(send, below=True)
            else:
                self._dispatch((send,))

    def send(self, send: Send, *, below: bool = False) -> None:
        """Route a frame of the core's to its upstream (``below``: sent for a relay below)."""
        frame = send.message()
        upstream = self.upstreams.route(frame, self._routing, self._reachable, below=below)
        if upstream is None:
            return
        data = codec.encode(frame)
        if upstream == PUBLISHER:
            self._to_publisher(data)
        else:
            self._link(upstream).send(data)

    def _reachable(self, name: str) -> bool:
        failed = self._failed.get(name)
        return failed is None or time.monotonic() - failed > RETRY_AFTER

    def _link(self, name: str) -> PeerLink:
        link = self._links.get(name)
        if link is None:
            url = self._routing.members[name]
            link = PeerLink(
                name,
                url,
                me=self._registry.name,
                token=self._publisher.token,
                tls_ca=self._tls_ca,
                on_batch=self.on_piece,
                on_error=self._refused,
                on_resync=self._resynced,
            )
            self._links[name] = link
            assert self._group is not None, "the relay runs Sharing.run before it sends"
            self._group.create_task(self._follow(link))
        return link

    async def _follow(self, link: PeerLink) -> None:
        await link.run()
        self._links.pop(link.name, None)
        self._failed[link.name] = time.monotonic()
        await self._apply(self.upstreams.lost(link.name))

    def _refused(self, name: str, error: Error) -> None:
        """The other relay refused something (a primitive it cannot serve): given up, its
        parts go to the publisher."""
        log.warning(
            "relay %s refused %s: %s; not asking it again for a while",
            name,
            error.ref,
            error.message,
        )
        link = self._links.get(name)
        if link is not None:
            link.close()

    # -- pieces coming down ----------------------------------------------------------------

    def on_catalog(self, catalog: Catalog) -> None:
        """The publisher's catalog came."""
        self.upstreams.on_catalog(catalog)

    async def on_piece(self, upstream: str, batch: Batch) -> None:
        """A batch from ``upstream`` (``PUBLISHER`` or a relay's name)."""
        await self._apply(self.upstreams.on_batch(upstream, batch))

    async def _apply(self, taken: Taken) -> None:
        for upstream, frame in taken.sends:
            data = codec.encode(frame)
            if upstream == PUBLISHER:
                self._to_publisher(data)
            elif (link := self._links.get(upstream)) is not None:
                link.send(data)
        for dataset, prims in taken.resync.items():
            self._dispatch(self._coverage.resync(dataset, prims))
            self._wake()
        for batch in taken.batches:
            self._writer.put(batch)
            await self._writer.room(1)

    async def _resynced(self, name: str, resync: Resync) -> None:
        """Relay ``name`` lacks changes inside primitives of this relay's until it sends their
        snapshots again: they wait for them, ``every`` views catching up. Its snapshots of them
        that came before it make none ready: those still waiting in the assembly are struck
        out, and those handed to the writer are swapped in first."""
        self.upstreams.resynced(name, resync)
        await self._writer.drain()
        self._dispatch(self._coverage.on_resync(resync))
        self._wake()

    def publisher_lost(self) -> None:
        """The publisher is lost: the core acquires everything anew once it is back, so the
        links to other relays are dropped with what they held."""
        self.upstreams.reset()
        for link in list(self._links.values()):
            link.close()

    # -- the map changing ------------------------------------------------------------------

    def _map_changed(self, before: ResponsibilityMap, after: ResponsibilityMap) -> None:
        self._reroute(routing_map(after, self._registry.name, self._owning), "the map changed")

    def _lapsed(self, without: ResponsibilityMap) -> None:
        """The lease lapsed: this relay's parts are taken from the map without it."""
        self._owning = False
        self._reroute(without, "the lease lapsed")

    def _serving_again(self) -> None:
        """A lease after coming back: routed by the map again."""
        self._owning = True
        self._reroute(self._registry.map, "serving again")

    def _reroute(self, after: ResponsibilityMap, why: str) -> None:
        """Route by ``after`` from now; acquire anew what is held where it is no longer
        routed (``upstreams.acquired_anew``)."""
        before, self._routing = self._routing, after
        anew = acquired_anew(
            self.upstreams.held, before, after, self._registry.name, self._links.__contains__
        )
        for dataset, prims in sorted(anew.items()):
            log.info(
                "%s: %d primitives of %s acquired anew, by the new map", why, len(prims), dataset
            )
            self._dispatch(self._coverage.resync(dataset, prims))
        if anew:
            self._wake()

    def stats(self) -> dict[str, int]:
        """Counts for ``GET /metrics``."""
        return {**self.upstreams.stats(), "peer_links": len(self._links)}
