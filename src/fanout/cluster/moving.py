"""What a relay's held subscriptions do when the map of responsibility moves their parts or its
lease lapses (the redirect policy; ``membership`` rules 2-4). In one process the relay's
``Membership`` drives it from its registry; in a relay with workers each worker drives its own
from the map its leader tells it (``mapcopy``): the subscriptions are the worker's. Rules:

1. **Moved parts take their subscriptions**: each held subscription whose part left this relay
   ends with a redirect to the part's new relay (``redirects.moved``), a part handed over by a
   split only once its member holds it warm (``handover.served``).
2. **``every`` subscriptions move just after a seq** (``handover`` rule 5): served first, ended
   once sent the last seq here, or ``handover.ALIGN`` s after their part moved.
3. **A lapsed lease** ends every held subscription (``redirects.elsewhere``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fanout.cluster import handover
from fanout.cluster.responsibility import ResponsibilityMap
from fanout.cluster.splitting import moved_subscriptions
from fanout.relay.core.downstream import SubKey, Subscription
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.views import View
from fanout.wire.messages import Error, Unsubscribe


class HeldMoves:
    """The held subscriptions of one relay process as the map moves their parts."""

    def __init__(
        self,
        core: RelayCore,
        name: str,
        *,
        dispatch: Callable[[Iterable[Send]], None],
        wake: Callable[[], None],
        elsewhere: Callable[[str, View, int], Error],
    ) -> None:
        """Args:
        core: the process's core (its subscriptions).
        name: the relay's name in the map.
        dispatch: sends what ends a subscription.
        wake: wakes the process's pump (subscriptions ended).
        elsewhere: the answer ending a subscription (dataset, view, sub) while the lease is
            lapsed (rule 3).
        """
        self.core, self.name = core, name
        self._dispatch, self._wake, self._elsewhere = dispatch, wake, elsewhere
        #: The map held subscriptions are ended by, and the parts this relay handed over that
        #: wait for their member (part -> since when).
        self.served = ResponsibilityMap()
        self.waiting: dict[str, float] = {}
        #: Held subscriptions whose part moved, waiting to be sent the last seq (rule 2):
        #: key -> (the subscription, its redirect, when its part moved).
        self.moving: dict[SubKey, tuple[Subscription, Error, float]] = {}

    def settle(self, table: ResponsibilityMap, now: float) -> None:
        """The map is ``table`` (as read now): end the held subscriptions whose part moved
        (rule 1)."""
        before = self.served
        self.served, self.waiting = handover.served(table, before, self.name, now, self.waiting)
        moving: list[Subscription] = []
        for client, redirect in moved_subscriptions(self.core, before, self.served, self.name):
            assert redirect.ref is not None, "a moved subscription's redirect names it"
            held = self.core.downstream.get((client, redirect.ref))
            if held is not None and held.key not in self.moving:
                self.moving[held.key] = (held, redirect, now)
                moving.append(held)
        self.end_moving(now)
        for held in moving:  # those not due yet are sent the giver's last seq first (rule 2)
            if held.key in self.moving and held.key in self.core.scheduler:
                self.core.scheduler.reprioritise(held.key, held.priority + handover.FIRST)

    def look(self, table: ResponsibilityMap, now: float) -> None:
        """A look at ``table`` every ``membership.LOOK`` s: parts waiting are settled again,
        else the moving subscriptions ended once due."""
        if self.waiting:
            self.settle(table, now)
        elif self.moving:
            self.end_moving(now)

    def end_moving(self, now: float) -> None:
        """End each moving subscription that is due (rule 2); forget those that ended
        otherwise meanwhile (unsubscribed, or a lapsed lease)."""
        ended = False
        for key, (held, redirect, since) in list(self.moving.items()):
            if self.core.downstream.get(key) is not held:
                del self.moving[key]
                continue
            state = self.core.datasets.get(held.dataset)
            last = None if state is None or state.seq < 0 else (state.epoch, state.seq)
            sent = None if held.cursor is None else (held.cursor.epoch, held.cursor.seq)
            if not handover.due(sent, last, now - since):
                continue
            del self.moving[key]
            # The core's Unsubscribed is not sent: the redirect is what ends it for the client.
            self.core.on_unsubscribe(held.client, Unsubscribe(held.sub))
            self._dispatch([Send(held.client, redirect)])
            ended = True
        if ended:
            self._wake()

    def lapsed(self) -> None:
        """Rule 3: every held subscription ends, redirected to its owner without this relay."""
        ended = [
            (held.client, self._elsewhere(held.dataset, held.view, held.sub))
            for held in self.core.downstream
        ]
        for client, answer in ended:
            self.core.on_unsubscribe(client, Unsubscribe(answer.ref or 0))
            self._dispatch([Send(client, answer)])
        self._wake()
