"""A relay's membership of a map of responsibility, wired to its core: the registry (leases in
Redis Cluster), split and merge on load (``splitting``) and, by policy, redirects or forwarding
(``sharing``). ``relay.shell.server`` holds one when started with ``--registry``. Rules:

1. **Joined before ready.** The relay joins the map (its first beat) before it reports ready, so
   a subscriber it accepts is never served by a relay the others do not know; the balancer
   starts once the relay is in the map.
2. **Moved parts take their subscriptions** (redirect policy): when a part leaves this relay —
   a split or a merge hands it over, or a relay joins that is now responsible for it — each held
   subscription of it ends with a redirect to the part's new relay, where its subscriber resumes
   (``redirects`` rule 1), its primitives released. Under the forward policy the connection
   stays and ``sharing`` acquires the part anew from its new owner.
3. **A lapsed lease ends what it holds** (redirect policy, ``registry`` rule 8): each held
   subscription ends with a redirect to its owner in the map without this relay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from fanout.cluster.registry import Registry
from fanout.cluster.registry import connect as registry_client
from fanout.cluster.responsibility import ResponsibilityMap
from fanout.cluster.settings import Cluster
from fanout.cluster.sharing import Publisher, Sharing, Writer
from fanout.cluster.splitting import Balancer, moved_subscriptions
from fanout.metrics import Sample
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.wire.messages import Unsubscribe


class Membership:
    """The registry, the balancer (if thresholds are given) and the forward policy's sharing
    (if that is the policy) of one relay."""

    def __init__(
        self,
        settings: Cluster,
        name: str,
        core: RelayCore,
        writer: Writer,
        publisher: Publisher,
        *,
        dispatch: Callable[[Iterable[Send]], None],
        wake: Callable[[], None],
    ) -> None:
        """Args:
        settings: the relay's cluster section (``registry`` set).
        name: the relay's name in the map.
        core: the relay's core.
        writer: where whole seqs go (the forward policy's assembled seqs).
        publisher: the link to the publisher.
        dispatch: sends what the core answers.
        wake: wakes the relay's pump (subscriptions ended).

        Raises:
            ConfigError: the registry's address is not ``redis://HOST:PORT``.
        """
        assert settings.registry is not None, "a membership needs a registry"
        self.name, self.core, self._dispatch, self._wake = name, core, dispatch, wake
        self.registry = Registry(
            registry_client(settings.registry),
            name,
            lease=settings.lease,
            side=settings.side,
            standby=settings.standby,
        )
        #: Split and merge on load, if thresholds are given.
        self.balancer: Balancer | None = None
        if settings.thresholds.on:
            self.balancer = Balancer(
                core,
                self.registry,
                settings.thresholds,
                command=settings.split_command,
                wait=settings.split_wait,
                forward=settings.policy == "forward",
            )
        #: The forward policy's routing of primitives to their owners (None: redirects).
        self.sharing: Sharing | None = None
        if settings.policy == "forward":
            self.sharing = Sharing(core, self.registry, writer, publisher, dispatch)
        else:
            self.registry.watchers.append(self._parts_moved)
            self.registry.lapse_watchers.append(self._lapsed)

    async def join(self, tasks: asyncio.TaskGroup, url: str) -> None:
        """Join the map as reached at ``url`` and return once in it (rule 1); the registry's
        beats and the balancer then run in ``tasks``."""
        self.registry.url = url
        in_map = asyncio.Event()
        tasks.create_task(self.registry.run(in_map.set))
        await in_map.wait()
        if self.balancer is not None:
            tasks.create_task(self.balancer.run())

    def samples(self) -> list[Sample]:
        """The registry's and the balancer's figures for ``GET /metrics``."""
        balancer = self.balancer.samples() if self.balancer is not None else []
        return [*self.registry.samples(), *balancer]

    def _parts_moved(self, before: ResponsibilityMap, after: ResponsibilityMap) -> None:
        """Rule 2, the redirect policy's half."""
        for client, redirect in moved_subscriptions(self.core, before, after, self.name):
            assert redirect.ref is not None, "a moved subscription's redirect names it"
            # The core's Unsubscribed is not sent: the redirect is what ends it for the client.
            self.core.on_unsubscribe(client, Unsubscribe(redirect.ref))
            self._dispatch([Send(client, redirect)])
        self._wake()

    def _lapsed(self, without: ResponsibilityMap) -> None:
        """Rule 3."""
        ended = [
            (held.client, self.registry.elsewhere(held.dataset, held.view, held.sub))
            for held in self.core.downstream
        ]
        for client, answer in ended:
            self.core.on_unsubscribe(client, Unsubscribe(answer.ref or 0))
            self._dispatch([Send(client, answer)])
        self._wake()
