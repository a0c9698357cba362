"""Warm handovers, the member's side: a relay handed parts by a split acquires what each
assignment says to warm before the giver ends its subscriptions there, and says so in the map
once ready primitives cover it (``cluster.handover`` rules 2 and 3; ``registry`` rule 6).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from fanout.cluster.handover import HOLD
from fanout.cluster.registry import REDIS_FAILURES, Registry
from fanout.errors import InvalidView
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.relay.core.sends import UPSTREAM
from fanout.views import View, parse_region
from fanout.wire.messages import Acquire

log = logging.getLogger(__name__)


class Warming:
    """The parts handed to one relay that it warms, and the warm views it holds pinned."""

    def __init__(
        self, core: RelayCore, registry: Registry, dispatch: Callable[[Iterable[Send]], None]
    ) -> None:
        self._core, self._registry, self._dispatch = core, registry, dispatch
        #: part -> (dataset, view) pinned and not yet said ready (None: nothing this relay can
        #: warm, ready as it is).
        self.warming: dict[str, tuple[str, View | None]] = {}
        #: part -> (dataset, view, when it was ready) pinned, said ready.
        self.held: dict[str, tuple[str, View | None, float]] = {}

    @property
    def busy(self) -> bool:
        """Whether a part is warming (its readiness is looked for often)."""
        return bool(self.warming)

    def start(self) -> None:
        """Pin and acquire what each part newly handed here and waiting says to warm (rule 2);
        a part whose warm view is unknown here is said ready as it is (``settle``)."""
        table, me = self._registry.map, self._registry.name
        for part in table.received(me):
            held = table.assigned[part]
            if held.ready or part in self.warming or part in self.held:
                continue
            dataset = part.rsplit("/", 1)[0]
            kind = self._core.parts.kinds.get(dataset)
            try:
                view = None if kind is None else kind.primitive(parse_region(held.warm))
            except InvalidView as error:
                log.warning("split: %s cannot warm %s (%s): ready as it is", me, part, error)
                view = None
            if kind is None or view is None:
                self.warming[part] = (dataset, None)
                continue
            self._core.downstream.pin(dataset, view)
            added = kind.acquire(view, None, True)
            self._dispatch([Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in added])
            self.warming[part] = (dataset, view)

    async def settle(self, now: float) -> None:
        """Say which warming parts ready primitives now cover (rule 6 of the registry); unpin
        what was held ``HOLD`` s, or whose part is not this relay's any more (rule 3). Redis
        away, the parts stay warming and are said ready at a later call."""
        received = set(self._registry.map.received(self._registry.name))
        for part in [p for p in self.warming if p not in received]:
            self._unpin(*self.warming.pop(part))
        for part, (dataset, view, since) in list(self.held.items()):
            if part not in received or now - since >= HOLD:
                del self.held[part]
                self._unpin(dataset, view)
        ready = [
            part for part, (dataset, view) in self.warming.items() if self._ready(dataset, view)
        ]
        if not ready:
            return
        try:
            await self._registry.warmed(ready)
        except REDIS_FAILURES as error:
            log.warning(
                "split: saying %d parts are warm failed, trying again: %s", len(ready), error
            )
            return
        for part in ready:
            dataset, view = self.warming.pop(part)
            self.held[part] = (dataset, view, now)
        log.info("split: %s holds warm %d parts handed to it", self._registry.name, len(ready))

    def _ready(self, dataset: str, view: View | None) -> bool:
        """Whether ready primitives cover ``view`` and the window holds a seq after they
        became ready (rule 2 of ``handover``): a moved ``every`` view, whose giver may be a
        seq behind, then resumes from the window rather than from the publisher's log."""
        kind = self._core.parts.kinds.get(dataset)
        if view is None or kind is None:
            return True
        stamp = kind.state.buffer.stamp
        if stamp is None or not kind.covered(view, ready_only=True):
            return False
        return kind.complete_after(view, stamp.seq) < stamp.seq

    def _unpin(self, dataset: str, view: View | None) -> None:
        if view is not None:
            self._core.downstream.unpin(dataset, view)
