"""Subscribing to relays that share a map of responsibility: redirects followed.

A relay in a cluster answers a subscription another relay is responsible for with a redirect
(docs/cluster.md, "The redirect policy"). :class:`ClusterSubscriber` (``connect_cluster``)
follows them with one connection per relay, so views of one place meet at one relay.

1. At most ``max_hops`` redirects are followed for one subscription, then the last relay is
   asked to ``stay``.
2. A relay it is sent to but cannot reach is not waited for: the one that redirected is asked
   to ``stay``.
3. A connection that fails is forgotten (its views end with its error); one per relay, shared.
4. A held view whose part moved is ended by its relay with a redirect and followed (one more
   hop if redirected there): the same object, resumed (``every``) or pushed in full.
5. Sent back to the relay it was just redirected from (the relays disagree, or one lost the map),
   it asks that relay to stay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fanout.background import Background
from fanout.client.subscriber import LiveView, Subscriber, SubscriptionError, connect
from fanout.views import View
from fanout.wire.handshake import HandshakeRefused

#: Redirects followed for one subscription before a relay is asked to stay.
MAX_HOPS = 3


class ClusterSubscriber:
    """Connections to the relays of one cluster, opened as redirects lead to them."""

    def __init__(
        self,
        entry: str,
        stack: contextlib.AsyncExitStack,
        moving: Background,
        **options: Any,
    ) -> None:
        """Subscriptions start at ``entry``; ``options`` go to every ``connect``; each
        connection is closed with ``stack``; the tasks moving views run in ``moving``."""
        self.entry = entry
        self._stack = stack
        self._moving = moving
        self._options = options
        self._connections: dict[str, Subscriber] = {}
        # One connection opened at a time per URL; the attempts ended and the last one's error.
        self._opening: dict[str, asyncio.Lock] = {}
        self._attempts: dict[str, int] = {}
        self._failed: dict[str, OSError | HandshakeRefused] = {}
        #: Redirects followed so far, all subscriptions together.
        self.redirects = 0
        #: Held views moved to another relay so far (rule 4).
        self.moves = 0

    async def connection(self, url: str) -> Subscriber:
        """The open connection to ``url``, opened now if there is none (rule 3).

        Raises:
            OSError, HandshakeRefused: the relay cannot be reached or refused the connection.
        """
        attempts = self._attempts.get(url, 0)
        async with self._opening.setdefault(url, asyncio.Lock()):
            # Views moving together (a split) ask at once: the first opens the connection and
            # the rest share it, or share its failure rather than each trying (and waiting) again.
            held = self._connections.get(url)
            if held is not None and held.failure is None:
                return held
            if self._attempts.get(url, 0) > attempts:  # one ended while this one waited
                raise self._failed[url]
            try:
                subscriber = await self._stack.enter_async_context(connect(url, **self._options))
            except (OSError, HandshakeRefused) as error:
                self._failed[url] = error
                raise
            finally:
                self._attempts[url] = self._attempts.get(url, 0) + 1
            subscriber.on_moved = self._moved
            self._connections[url] = subscriber
            return subscriber

    async def subscribe(
        self, view: View, dataset: str = "agents", *, max_hops: int = MAX_HOPS, **options: Any
    ) -> LiveView:
        """Hold ``view`` at the relay responsible for it (``Subscriber.subscribe``'s options).

        Raises:
            SubscriptionError: a relay refused it for another reason than a redirect.
            OSError, HandshakeRefused: the entry relay cannot be reached.
        """
        url, previous, stay = self.entry, None, False
        for hop in range(max_hops + 1):
            try:
                subscriber = await self.connection(url)
            except (OSError, HandshakeRefused):
                if previous is None:
                    raise
                url, previous = previous, None  # rule 2: the relay that sent us here serves it
                return await (await self.connection(url)).subscribe(
                    view, dataset, stay=True, **options
                )
            try:
                stay = stay or hop == max_hops
                return await subscriber.subscribe(view, dataset, stay=stay, **options)
            except SubscriptionError as error:
                if error.code != "redirect" or error.location is None or stay:
                    raise  # a relay that serves nothing (its lease lapsed) redirects a stay
                self.redirects += 1
                stay = error.location == previous  # rule 5
                url, previous = error.location, url
        raise AssertionError("unreachable: the last hop stays")  # pragma: no cover

    def _moved(self, view: LiveView, location: str) -> None:
        """A relay ended held ``view`` with a redirect: follow it (rule 4)."""
        self._moving.start(self._move(view, location))

    async def _move(self, view: LiveView, location: str) -> None:
        every = view.mode == "every"
        options: dict[str, Any] = {
            "rate": view.rate,
            "priority": view.priority,
            "relevance": view.state.asked.relevance,
            "transform": view.transform,
            "transduce": view.state.asked.transduce,
            "confirmed": view.state.asked.confirmed,
            "mode": view.mode,
            # a transduced view starts again (a full push): its window was at the relay it left
            "resume": view if every and view.state.asked.transduce is None else None,
            "into": view,
        }
        try:
            subscriber = await self.connection(location)
            # Asked to stay: the relay the part moved to may not have read the map since it
            # was handed the part (it reads it every beat), and would send the view back.
            try:
                await subscriber.subscribe(view.view, view.dataset, stay=True, **options)
            except SubscriptionError as error:
                if error.code != "redirect" or error.location is None:
                    raise
                # A relay that serves nothing yet (back in the map, it waits a lease) sends
                # it on: one more hop, staying there.
                onward = await self.connection(error.location)
                await onward.subscribe(view.view, view.dataset, stay=True, **options)
        except SubscriptionError as error:
            _end(view, error)
            return
        except (OSError, HandshakeRefused) as error:
            message = f"its part moved to the relay at {location}, which failed: {error}"
            _end(view, SubscriptionError("moved", message))
            return
        self.moves += 1

    async def settled(self) -> None:
        """Return once no held view is moving (rule 4)."""
        while running := self._moving.running:
            await asyncio.wait(running)

    def relay_of(self, view: LiveView) -> str:
        """The URL of the relay serving ``view``.

        Raises:
            KeyError: ``view`` is not one of this cluster subscriber's.
        """
        for url, subscriber in self._connections.items():
            if any(held is view for held in subscriber.views):
                return url
        raise KeyError("not a view of this cluster subscriber")


@contextlib.asynccontextmanager
async def connect_cluster(entry: str, **options: Any) -> AsyncIterator[ClusterSubscriber]:
    """A :class:`ClusterSubscriber` entering at relay ``entry``; every connection it opened is
    closed when the block ends. ``options``: ``connect``'s (name, token, ssl, ...)."""
    # The moves are stopped before the connections close (the block leaves in that order).
    async with contextlib.AsyncExitStack() as stack, Background() as moving:
        try:
            yield ClusterSubscriber(entry, stack, moving, **options)
        finally:
            moving.cancel()


def _end(view: LiveView, error: SubscriptionError) -> None:
    """End ``view``, which no connection holds (its move failed), with ``error``."""
    view.state.end(error)
    view.wake()
