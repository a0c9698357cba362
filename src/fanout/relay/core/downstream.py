"""The relay's downstream store: the subscriptions it serves (CA 3197003's publisher data store).

Each subscription remembers what its subscriber already holds (``held``: the keys, view, state and
reference position of its last push), so every push is a delta: entered, updated and left rows
(``relay.data.pushes``). Subscriptions are indexed by connection and by dataset, so a disconnect or
a new state touches only the subscriptions concerned.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from fanout.relay.core.changesets import Cursor
from fanout.relay.core.lifecycle import Phase
from fanout.relay.core.transforms import Shape
from fanout.relay.data.pushes import Held
from fanout.views import View
from fanout.wire.messages import Mode

SubKey = tuple[int, int]  # (client, subscription id chosen by that client)
Group = TypeVar("Group", int, str)


@dataclass
class Subscription:
    """One subscriber's view, how it is served, and what it has received.

    Attributes:
        client: the connection.
        sub: the id the subscriber chose.
        dataset: the dataset viewed.
        view: the current view.
        rate: pushes per second at most.
        shape: the resolved transform its rows are sent in.
        priority: the subscriber's priority (higher first; aging lifts waiting ones).
        mode: ``latest`` (a consistent cut per push, ticks may be skipped) or ``every``.
        held: what the subscriber holds (None: nothing yet; the next push is ``full``).
        cursor: where an ``every`` subscription is (None: the next push is ``full``).
        servable: whether ready primitives cover the view, as last computed.
        coverage_seen: (view, shrink version, growth version) ``servable`` was computed at.
        last_push: monotonic time of the last push.
        pushes: pushes and no-updates sent.
        coalesced: publisher ticks folded into a later push instead of pushed on their own
            (latest-value coalescing: the subscriber was busy or its rate did not allow more).
        deferred: times a due push waited for the connection to finish writing.
        moved_at: monotonic time of the last change of view (None: not dated).
        velocity: how fast the view moved at its last change (None: unknown or not moving).
        reads: the datasets its view reads (its own; several for a SQL join).
        phase: where it is in its lifecycle (``relay.core.lifecycle``).
        owed: why its next push is a ``resync`` restart (None: it is not).
    """

    client: int
    sub: int
    dataset: str
    view: View
    rate: float
    shape: Shape
    priority: int = 0
    mode: Mode = "latest"
    held: Held | None = None
    cursor: Cursor | None = None
    servable: bool = False
    coverage_seen: tuple[Hashable, int, int] = (None, -1, -1)
    last_push: float = -math.inf
    pushes: int = 0
    coalesced: int = 0
    deferred: int = 0
    moved_at: float | None = None
    velocity: tuple[float, ...] | None = None
    reads: tuple[str, ...] = ()
    phase: Phase = Phase.PENDING
    owed: str | None = None

    @property
    def key(self) -> SubKey:
        """(client, sub)."""
        return (self.client, self.sub)


class Downstream:
    """Subscriptions by (client, sub), indexed by client and by dataset."""

    def __init__(self) -> None:
        self._subs: dict[SubKey, Subscription] = {}
        self._by_client: dict[int, dict[SubKey, Subscription]] = {}
        self._by_dataset: dict[str, dict[SubKey, Subscription]] = {}
        #: dataset -> subscriptions of other datasets whose views read it too (SQL joins)
        self._by_join: dict[str, dict[SubKey, Subscription]] = {}
        #: dataset -> views held for relays below this one (``tiers``), counted: the
        #: coverage they need is kept like a subscription's.
        self.pinned: dict[str, dict[View, int]] = {}

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._subs.values()))

    def __len__(self) -> int:
        return len(self._subs)

    def get(self, key: SubKey) -> Subscription | None:
        """The subscription, if any."""
        return self._subs.get(key)

    def put(self, subscription: Subscription) -> None:
        """Add a subscription, or re-index one whose dataset or reads changed."""
        key = subscription.key
        self.remove(key)
        self._subs[key] = subscription
        self._by_client.setdefault(subscription.client, {})[key] = subscription
        self._by_dataset.setdefault(subscription.dataset, {})[key] = subscription
        if len(subscription.reads) > 1:  # a join: indexed under the other datasets it reads
            for name in subscription.reads:
                if name != subscription.dataset:
                    self._by_join.setdefault(name, {})[key] = subscription

    def remove(self, key: SubKey) -> Subscription | None:
        """Drop a subscription; returns it if it existed."""
        subscription = self._subs.pop(key, None)
        if subscription is not None:
            _discard(self._by_client, subscription.client, key)
            _discard(self._by_dataset, subscription.dataset, key)
            if len(subscription.reads) > 1:
                for name in subscription.reads:
                    if name != subscription.dataset:
                        _discard(self._by_join, name, key)
        return subscription

    def count(self, client: int) -> int:
        """How many subscriptions ``client`` holds."""
        return len(self._by_client.get(client, ()))

    def of_client(self, client: int) -> list[Subscription]:
        """Every subscription of one connection."""
        return list(self._by_client.get(client, {}).values())

    def of_dataset(self, dataset: str) -> list[Subscription]:
        """Every subscription of one dataset."""
        return list(self._by_dataset.get(dataset, {}).values())

    def of_reader(self, dataset: str) -> list[Subscription]:
        """Every subscription whose view reads ``dataset`` (its own, or joined)."""
        own = list(self._by_dataset.get(dataset, {}).values())
        joined = self._by_join.get(dataset)
        return own if joined is None else own + list(joined.values())

    def views(self, dataset: str) -> list[View]:
        """Every subscription view of ``dataset``, and the views pinned for relays below."""
        own = [s.view for s in self._by_dataset.get(dataset, {}).values()]
        pinned = self.pinned.get(dataset)
        return own if not pinned else own + list(pinned)

    def pin(self, dataset: str, view: View) -> None:
        """Keep the coverage of ``view`` as if a subscription held it (until ``unpin``)."""
        counts = self.pinned.setdefault(dataset, {})
        counts[view] = counts.get(view, 0) + 1

    def unpin(self, dataset: str, view: View) -> None:
        """Undo one ``pin`` of ``view``."""
        counts = self.pinned.get(dataset, {})
        left = counts.get(view, 0) - 1
        if left > 0:
            counts[view] = left
        else:
            counts.pop(view, None)


def _discard(index: dict[Group, dict[SubKey, Subscription]], group: Group, key: SubKey) -> None:
    members = index.get(group)
    if members is not None:
        members.pop(key, None)
        if not members:
            del index[group]
