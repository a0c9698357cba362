"""The keyed kinds at the relay (topic, object path, objects, SQL): rows by key, views in a
language of their own, primitives acquired as residuals.

One class, :class:`KeyedKind`, serves them all, composed of two parts each kind picks: its
:class:`Language` (which views it takes, what they need held upstream, what a relay below may
acquire here) and its :class:`Rows` (how pushes and ``every`` steps are cut: rows selected by
position, ``relay.kinds.selected``, or a query's result, ``relay.kinds.sql``). What they share
is here: acquire the residual of each need against what is held (``fanout.views.residual``;
CA 3197003 steps 830-840), servable when ready primitives cover every need, release what no
need keeps (``relay.core.release``) and prune the rows only it held; a relay below's primitive
holds the rows the publisher would match (``relay.data.keyedstate.selected``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Protocol

import numpy as np

from fanout.relay.core import release
from fanout.relay.core.changesets import ChangeSet, Step, Steps
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.planner import Velocity
from fanout.relay.core.sends import Send
from fanout.relay.core.transforms import Shape
from fanout.relay.core.upstream import Primitive, release_spare
from fanout.relay.data.buffers import Array, Keys, Mask, Table
from fanout.relay.data.keyedstate import KeyedState, Reach
from fanout.relay.data.pushes import Body
from fanout.relay.kinds.base import PRUNE_WINDOW, Accepted, Cut, Parts
from fanout.relay.kinds.lens import RowLens
from fanout.views import View, covers, residual
from fanout.wire.messages import Subscribe


class Language(Protocol):
    """A keyed kind's view language, for one dataset."""

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """As ``DatasetKind.accept``."""
        ...

    def check_every(self, view: View, shape: Shape) -> None:
        """As ``DatasetKind.check_every``."""
        ...

    def needs(self, view: View) -> list[tuple[str, View]]:
        """(dataset, primitive) pairs the view needs held (several for a SQL join)."""
        ...

    def widened(self, piece: View) -> View:
        """A residual piece as acquired upstream."""
        ...

    def primitive(self, view: View) -> View:
        """As ``DatasetKind.primitive``."""
        ...


class Rows(Protocol):
    """How a keyed kind cuts its pushes, for one dataset."""

    @property
    def metered(self) -> bool:
        """As ``DatasetKind.metered``."""
        ...

    def cut(self, subscription: Subscription) -> Cut | None:
        """As ``DatasetKind.cut`` (a keyed view is where it is)."""
        ...

    def full_view(self, subscription: Subscription) -> Body:
        """As ``DatasetKind.full_view``."""
        ...

    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """As ``DatasetKind.step``."""
        ...

    def query_seconds(self) -> float:
        """As ``DatasetKind.query_seconds``."""
        ...

    def ticking(self, view: View) -> float | None:
        """As ``DatasetKind.ticking``."""
        ...

    def lens(self, subscription: Subscription) -> RowLens | None:
        """As ``DatasetKind.lens``."""
        ...

    def forget(self) -> None:
        """Drop what was kept for views no longer subscribed (at housekeeping)."""
        ...

    def stats(self) -> dict[str, float]:
        """As ``DatasetKind.stats``."""
        ...


class KeyedKind:
    """A keyed dataset at the relay (``relay.kinds.base.DatasetKind``), of the language and
    rows given."""

    def __init__(
        self,
        state: KeyedState,
        parts: Parts,
        language: Language,
        rows: Rows,
        reach: Reach | None = None,
    ) -> None:
        self.state = state
        self._reach = reach
        self.name = state.info.name
        self.language = language
        self.rows = rows
        self._parts = parts
        #: (what ``unneeded`` was last asked, its answer's primitive ids)
        self._unneeded: tuple[Hashable, frozenset[int]] | None = None

    @property
    def metered(self) -> bool:
        """Whether its pushes count against the connection's SQL time."""
        return self.rows.metered

    # -- subscribing ------------------------------------------------------------------

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """A view of the language (``Language.accept``)."""
        return self.language.accept(request, capabilities)

    def check_every(self, view: View, shape: Shape) -> None:
        """As the language says."""
        self.language.check_every(view, shape)

    def reads(self, view: View) -> tuple[str, ...]:
        """The datasets the view reads."""
        return tuple(sorted({name for name, _ in self.needs(view)}))

    def needs(self, view: View) -> list[tuple[str, View]]:
        """(dataset, primitive) pairs the view needs held."""
        return self.language.needs(view)

    def acquire(self, view: View, moving: Velocity | None, subscribing: bool) -> list[Primitive]:
        """The residual of each need against what is held, widened, added upstream."""
        upstream = self._parts.upstream
        return [upstream.add(name, piece) for name, piece in self.plan(view)]

    def plan(self, view: View) -> list[tuple[str, View]]:
        """The residual of each need against what is held, widened (not added)."""
        upstream = self._parts.upstream
        planned: list[tuple[str, View]] = []
        for name, need in self.needs(view):
            held = upstream.views(name)
            for piece in residual(held, need):
                widened = self.language.widened(piece)
                if widened not in held:
                    planned.append((name, widened))
                    held.append(widened)
        return planned

    # -- coverage ---------------------------------------------------------------------

    def locate(self, subscription: Subscription) -> Hashable | None:
        """The view itself: it does not move."""
        return subscription.view

    def covered(self, located: Hashable, ready_only: bool = True) -> bool:
        """Whether held primitives cover every need of the view."""
        assert isinstance(located, View)
        upstream = self._parts.upstream
        for name, need in self.needs(located):
            held = upstream.views(name, ready_only=ready_only)
            if not held or not covers(held, need):
                return False
        return True

    def follows(self, view: View) -> bool:
        """Keyed views do not move."""
        return False

    # -- pushing ----------------------------------------------------------------------

    def batched(self, subscription: Subscription, located: Hashable) -> bool:
        """Cut one at a time."""
        return False

    def cut(self, subscription: Subscription, located: Hashable) -> Cut | None:
        """The push from the active state (``Rows.cut``)."""
        return self.rows.cut(subscription)

    def cut_together(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[Cut | None]:
        """``cut``, one by one."""
        return [self.rows.cut(subscription) for subscription, _ in due]

    def quiet(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[bool]:
        """None is known quiet: each is cut."""
        return [False] * len(due)

    def query_seconds(self) -> float:
        """Seconds its queries have run."""
        return self.rows.query_seconds()

    def ticking(self, view: View) -> float | None:
        """As its rows say."""
        return self.rows.ticking(view)

    def lens(self, subscription: Subscription) -> RowLens | None:
        """As its rows say."""
        return self.rows.lens(subscription)

    # -- every mode -------------------------------------------------------------------

    def full_view(self, subscription: Subscription) -> Body:
        """The whole view from the active state."""
        return self.rows.full_view(subscription)

    def complete_after(self, view: View, seq: int) -> int:
        """When the last ready primitive of the dataset became ready (a safe bound)."""
        ready = [p.ready_seq for p in self._parts.upstream.of(self.name) if p.ready]
        return max(ready, default=seq)

    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """One seq's push for an ``every`` subscription (``Rows.step``)."""
        return self.rows.step(subscription, change, held, steps)

    # -- epochs and housekeeping ------------------------------------------------------

    def after_swap(self, readers: Sequence[Subscription]) -> list[Primitive]:
        """Keyed views do not move: nothing more to acquire."""
        return []

    def housekeeping(self, now: float) -> list[Send]:
        """Release primitives no subscription's needs keep; prune the rows only they held."""
        self.rows.forget()
        parts, state = self._parts, self.state
        prims = parts.upstream.of(self.name)
        needs = self.needed_by(parts.downstream.of_reader(self.name))
        needs += parts.downstream.pinned.get(self.name, {})  # held for relays below
        spare = {p.prim for p in self.unneeded(prims, needs)}
        released, sends = release_spare(parts.upstream, prims, spare, now, parts.policy.grace)
        state.dropped.extend((prim.view, now) for prim in released)
        state.prune(now, PRUNE_WINDOW, parts.upstream.views(self.name))
        return sends

    def needed_by(self, subscriptions: Iterable[Subscription]) -> list[View]:
        """The primitives of this dataset the subscriptions that read it need held (a SQL
        join of another dataset reads this one: views that read a keyed dataset are of keyed
        datasets)."""
        found: list[View] = []
        for subscription in subscriptions:
            kind = self._parts.kinds.get(subscription.dataset)
            if isinstance(kind, KeyedKind):
                needs = kind.needs(subscription.view)
                found += [need for held_in, need in needs if held_in == self.name]
        return found

    def unneeded(self, prims: Sequence[Primitive], needs: Sequence[View]) -> list[Primitive]:
        """Primitives that can go, oldest first: every need stays covered by the other ready
        ones (``relay.core.release``). Answered anew only when the primitives, their readiness or
        the needs have changed since the last housekeeping."""
        asked = (tuple(sorted((p.prim, p.ready) for p in prims)), tuple(needs))
        known = self._unneeded
        if known is None or known[0] != asked:
            known = (asked, frozenset(p.prim for p in release.unneeded(prims, needs)))
            self._unneeded = known
        return [p for p in sorted(prims, key=lambda p: p.prim) if p.prim in known[1]]

    def stats(self) -> dict[str, float]:
        """Its rows' counters."""
        return self.rows.stats()

    # -- relays below -----------------------------------------------------------------

    def primitive(self, view: View) -> View:
        """As the language says (``Language.primitive``)."""
        return self.language.primitive(view)

    def reach(self, rows: Mapping[str, Array]) -> Mapping[str, Array]:
        """The rows a write of ``rows`` may change: as its kind says, or ``rows``."""
        return rows if self._reach is None else self._reach(rows, self.state.info.index_columns)

    def holds(self, prims: Sequence[View], rows: Mapping[str, Array]) -> Mask:
        """The rows the publisher would match to any of the primitives (``KeyedState.picks``)."""
        return self.state.picks(prims, rows, self.state.info)

    def holder(self, rows: Mapping[str, Array]) -> Callable[[Sequence[View]], Mask]:
        """``holds`` of ``rows``, for several sets of primitives (nothing to share here)."""
        return lambda prims: self.holds(prims, rows)

    def contents(self, prims: Sequence[View], table: Table | None = None) -> dict[str, Array]:
        """The rows of ``table`` (the active state) any of the primitives holds."""
        rows = self.state.buffer.active if table is None else table
        return rows.take(np.flatnonzero(self.holds(prims, rows.columns)))
