"""The relay's downstream store: the subscriptions it serves (CA 3197003's publisher data store).

A subscription is what its subscriber asked (``Asked``: immutable, replaced on a change) and its
progress, which only ``relay.core.lifecycle`` moves. Its progress remembers what the subscriber
already holds (``held``: the keys, view, state and reference position of its last push), so every
push is a delta: entered, updated and left rows (``relay.data.pushes``). Subscriptions are indexed
by connection and by dataset, so a disconnect or a new state touches only the subscriptions
concerned."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator
from typing import TypeVar

import msgspec

from fanout.relay.core.changesets import Cursor
from fanout.relay.core.lifecycle import Phase
from fanout.relay.core.transforms import Shape, coarser
from fanout.relay.data.pushes import Held
from fanout.views import View
from fanout.wire.messages import Mode
from fanout.wire.options import Relevance

SubKey = tuple[int, int]  # (client, subscription id chosen by that client)
Group = TypeVar("Group", int, str)


class Asked(msgspec.Struct, frozen=True, gc=False):
    """What a subscriber asked, as the relay accepted it: never changed, replaced whole when the
    subscriber changes its subscription (a ``Subscribe`` with the same id).

    Attributes:
        dataset, view, rate, priority, mode: as its ``Subscribe`` gives them.
        shape: its transform, resolved for the dataset and the subscriber's capabilities.
        reads: the datasets its view reads (its own; several for a SQL join).
        relevance: rate tiers and a derived priority (``relay.core.tiering``), or None.
        confirmed: only confirmed rows (``Subscribe.confirmed``; ``relay.core.livepath``).
    """

    dataset: str
    view: View
    rate: float
    shape: Shape
    priority: int = 0
    mode: Mode = "latest"
    reads: tuple[str, ...] = ()
    relevance: Relevance | None = None
    confirmed: bool = False


class Subscription:
    """One subscription: whose it is, what was asked (``asked``), and its progress.

    ``asked``'s fields read through (``subscription.view``). Every other attribute is progress,
    written only by ``relay.core.lifecycle`` (its rules; ``test_ownership`` checks it); other
    modules read it and ask the lifecycle to move.

    Attributes:
        client, sub, key: the connection, the id the subscriber chose, and both.
        asked: what was asked (``Asked``).
        phase: where it is in its lifecycle (``relay.core.lifecycle``).
        held: what the subscriber holds (None: nothing yet; the next push is ``full``).
        cursor: where an ``every`` subscription is (None: the next push is ``full``).
        owed: why its next push is a ``resync`` restart (None: it is not).
        servable: whether ready primitives cover the view, as last computed.
        coverage_seen: (view, shrink version, growth version) ``servable`` was computed at.
        last_push: monotonic time of the last push.
        pushes: pushes and no-updates sent; sent_bytes: their bytes; rows: the rows they
            carried (entered, updated, left): per-subscriber accounting (``relay.shell.admin``).
        coalesced: publisher ticks folded into a later push instead of pushed on their own
            (latest-value coalescing: the subscriber was busy or its rate did not allow more).
        deferred: times a due push waited for the connection to finish writing.
        moved_at: monotonic time of the last change of view (None: not dated).
        velocity: how fast the view moved at its last change (None: unknown or not moving).
        coarse: its pushes go at coarser detail than asked, fitted to its link
            (``relay.core.links``; ``transforms.coarser``).
    """

    __slots__ = (
        "asked",
        "client",
        "coalesced",
        "coarse",
        "coverage_seen",
        "cursor",
        "deferred",
        "held",
        "key",
        "last_push",
        "moved_at",
        "owed",
        "phase",
        "pushes",
        "rows",
        "sent_bytes",
        "servable",
        "sub",
        "velocity",
    )

    def __init__(self, client: int, sub: int, asked: Asked, cursor: Cursor | None = None) -> None:
        """A subscription accepted, before its first push (``cursor``: where an ``every``
        subscription resumes)."""
        self.client = client
        self.sub = sub
        self.key: SubKey = (client, sub)
        self.asked = asked
        self.phase = Phase.PENDING
        self.held: Held | None = None
        self.cursor = cursor
        self.owed: str | None = None
        self.servable = False
        self.coverage_seen: tuple[Hashable, int, int] = (None, -1, -1)
        self.last_push = -math.inf
        self.pushes = 0
        self.sent_bytes = 0
        self.rows = 0
        self.coalesced = 0
        self.deferred = 0
        self.moved_at: float | None = None
        self.velocity: tuple[float, ...] | None = None
        self.coarse = False

    def __repr__(self) -> str:
        return f"Subscription({self.client}, {self.sub}, {self.asked!r}, {self.phase})"

    @property
    def dataset(self) -> str:
        """The dataset viewed."""
        return self.asked.dataset

    @property
    def view(self) -> View:
        """The current view."""
        return self.asked.view

    @property
    def rate(self) -> float:
        """Pushes per second at most."""
        return self.asked.rate

    @property
    def shape(self) -> Shape:
        """The resolved transform its rows are sent in (coarser while its link is fitted)."""
        return coarser(self.asked.shape) if self.coarse else self.asked.shape

    @property
    def priority(self) -> int:
        """The subscriber's priority (higher first; aging lifts waiting ones)."""
        return self.asked.priority

    @property
    def mode(self) -> Mode:
        """``latest`` (a consistent cut per push, ticks may be skipped) or ``every``."""
        return self.asked.mode

    @property
    def reads(self) -> tuple[str, ...]:
        """The datasets its view reads."""
        return self.asked.reads


class Downstream:
    """Subscriptions by (client, sub), indexed by client and by dataset."""

    def __init__(self) -> None:
        self._subs: dict[SubKey, Subscription] = {}
        self._by_client: dict[int, dict[SubKey, Subscription]] = {}
        self._by_dataset: dict[str, dict[SubKey, Subscription]] = {}
        #: dataset -> subscriptions of other datasets whose views read it too (SQL joins)
        self._by_join: dict[str, dict[SubKey, Subscription]] = {}
        #: subscriptions whose priority derives from their rows (``relay.core.tiering``)
        self.derived: dict[SubKey, Subscription] = {}
        #: dataset -> how many of its subscriptions are in ``every`` mode (asked per batch:
        #: counted, not looked for among them all)
        self._every: dict[str, int] = {}
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
        relevance = subscription.asked.relevance
        if relevance is not None and relevance.priority_from != "given":
            self.derived[key] = subscription
        if subscription.mode == "every":
            self._every[subscription.dataset] = self._every.get(subscription.dataset, 0) + 1

    def remove(self, key: SubKey) -> Subscription | None:
        """Drop a subscription; returns it if it existed."""
        subscription = self._subs.pop(key, None)
        if subscription is not None:
            self.derived.pop(key, None)
            if subscription.mode == "every":
                left = self._every[subscription.dataset] - 1
                if left:
                    self._every[subscription.dataset] = left
                else:
                    del self._every[subscription.dataset]
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

    def any_every(self, dataset: str) -> bool:
        """Whether some subscription of ``dataset`` is in ``every`` mode."""
        return dataset in self._every

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
