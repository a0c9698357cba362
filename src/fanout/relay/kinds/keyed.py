"""What the keyed kinds (topic, object path, SQL) share at the relay: rows by key, views in a
language of their own, primitives acquired as residuals.

* **acquire** (CA 3197003 steps 830-840): for each dataset the view reads (several for a SQL
  join), the residual of what the relay holds there (``fanout.views.residual``), widened so that
  it serves other views too (``widened``);
* **covered**: ready primitives cover every part of the view (``fanout.views.covers``);
* **cut** (steps 890-894): the push, a delta against what the subscriber holds, cut from the
  active buffer by the rows' positions (each kind says which rows its view selects);
* **housekeeping**: primitives whose every need stays covered by the other ready ones are
  released (``relay.core.release``), and the rows only they held pruned by key; the primitives
  relays below hold here (pinned) are needs too;
* **relays below**: a primitive of the language, acquired as this relay acquires its own
  (``widened``); the rows it holds are those the publisher would match
  (``relay.data.keyedstate.selected``).
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Iterable, Mapping, Sequence

import numpy as np

from fanout.errors import InvalidView
from fanout.relay.core import release
from fanout.relay.core.changesets import ChangeSet, Step, Steps, shared_step
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.planner import Velocity
from fanout.relay.core.sends import Send
from fanout.relay.core.transforms import InvalidTransform, Shape, resolve
from fanout.relay.core.upstream import Primitive, release_spare
from fanout.relay.data.buffers import Array, Keys, Mask, Positions, Table
from fanout.relay.data.keyedstate import KeyedState, selected
from fanout.relay.data.pushes import Body, Held, cut_positions
from fanout.relay.kinds.base import PRUNE_WINDOW, Accepted, Cut, Parts
from fanout.views import View, covers, residual
from fanout.views.anyof import AnyOf
from fanout.views.members import Selecting
from fanout.wire.messages import DatasetInfo, Subscribe, Transform


class KeyedKind(abc.ABC):
    """A dataset whose views are in a language of their own (topic filters, object paths, SQL):
    checking, residual acquisition, coverage and housekeeping. Subclasses name the language and
    cut the pushes (``SelectingKind`` for views that select rows by position).

    Attributes:
        language: the view class the dataset takes, and how errors name it.
    """

    metered = False
    language: tuple[type, str]

    def __init__(self, info: DatasetInfo, parts: Parts) -> None:
        """
        Raises:
            ProtocolError: the relay cannot hold the dataset (``DatasetState.of``).
        """
        self.state = KeyedState.of(info)
        self.name = info.name
        self._parts = parts
        #: (what ``unneeded`` was last asked, its answer's primitive ids)
        self._unneeded: tuple[Hashable, frozenset[int]] | None = None

    # -- subscribing ------------------------------------------------------------------

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """A view of the dataset's language; a transform without coordinates to move.

        Raises:
            InvalidView: the view is of another language.
            InvalidTransform: the transform asks for coordinates relative to an entity.
        """
        self._check_language(request.view, request.transform, capabilities)
        shape = resolve(request.transform, self.state.info, capabilities)
        return Accepted(shape, self.state.info.key, list(shape.columns))

    def _check_language(
        self, view: View, transform: Transform | None, capabilities: Sequence[str]
    ) -> Transform:
        """The transform as negotiated, once the view is known to be of the language.

        Raises:
            InvalidView: the view is of another language.
            InvalidTransform: the transform asks for coordinates relative to an entity.
        """
        wanted, language = self.language
        if isinstance(view, AnyOf) and isinstance(view.views[0], wanted):
            pass  # a union of the language's views (an effective view under rules)
        elif not isinstance(view, wanted):
            raise InvalidView(f"dataset {self.name!r} takes {language}, not {type(view).__name__}")
        effective = (transform or Transform()).negotiate(capabilities)
        if effective.relative_to is not None:
            raise InvalidTransform(f"dataset {self.name!r} has no coordinates to make relative")
        return effective

    def check_every(self, view: View, shape: Shape) -> None:
        """Every view of the language is served in mode ``every`` (SQL narrows this)."""
        return

    def reads(self, view: View) -> tuple[str, ...]:
        """The datasets the view reads."""
        return tuple(sorted({name for name, _ in self.needs(view)}))

    def needs(self, view: View) -> list[tuple[str, View]]:
        """(dataset, primitive) pairs the view needs held (each member of an ``AnyOf``)."""
        if isinstance(view, AnyOf):
            return [(self.name, member) for member in view.views]
        return [(self.name, view)]

    def acquire(self, view: View, moving: Velocity | None, subscribing: bool) -> list[Primitive]:
        """The residual of each need against what is held, widened, added upstream."""
        upstream = self._parts.upstream
        added: list[Primitive] = []
        for name, need in self.needs(view):
            held = upstream.views(name)
            for piece in residual(held, need):
                widened = self.widened(piece)
                if widened not in held:
                    added.append(upstream.add(name, widened))
                    held.append(widened)
        return added

    def widened(self, piece: View) -> View:
        """A residual piece as acquired upstream (as it is, unless a kind says otherwise)."""
        return piece

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

    @abc.abstractmethod
    def cut(self, subscription: Subscription, located: Hashable) -> Cut | None:
        """The push from the active state (None: nothing new since the last push).

        Raises:
            InvalidView: a SQL view's query failed on the relay's rows.
        """

    @abc.abstractmethod
    def full_view(self, subscription: Subscription) -> Body:
        """The whole view from the active state (an ``every`` subscription's first push)."""

    @abc.abstractmethod
    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """One seq's push for an ``every`` subscription holding ``held`` (shared: ``steps``)."""

    def cut_together(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[Cut | None]:
        """``cut``, one by one."""
        return [self.cut(subscription, located) for subscription, located in due]

    def query_seconds(self) -> float:
        """No queries run."""
        return 0.0

    def ticking(self, view: View) -> float | None:
        """Its views change only with its rows."""
        return None

    # -- every mode -------------------------------------------------------------------

    def complete_after(self, view: View, seq: int) -> int:
        """When the last ready primitive of the dataset became ready (a safe bound)."""
        ready = [p.ready_seq for p in self._parts.upstream.of(self.name) if p.ready]
        return max(ready, default=seq)

    # -- epochs and housekeeping ------------------------------------------------------

    def after_swap(self, readers: Sequence[Subscription]) -> list[Primitive]:
        """Keyed views do not move: nothing more to acquire."""
        return []

    def housekeeping(self, now: float) -> list[Send]:
        """Release primitives no subscription's needs keep; prune the rows only they held."""
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
        """No counters of its own."""
        return {}

    # -- relays below -----------------------------------------------------------------

    def primitive(self, view: View) -> View:
        """A view of the language, as this relay acquires its own (``widened``).

        Raises:
            InvalidView: the view is of another language.
        """
        wanted, language = self.language
        if not isinstance(view, wanted):
            raise InvalidView(f"dataset {self.name!r} takes {language}, not {type(view).__name__}")
        return self.widened(view)

    def holds(self, prims: Sequence[View], rows: Mapping[str, Array]) -> Mask:
        """The rows the publisher would match to any of the primitives."""
        return selected(prims, rows, self.state.info)

    def contents(self, prims: Sequence[View], table: Table | None = None) -> dict[str, Array]:
        """The rows of ``table`` (the active state) any of the primitives holds."""
        rows = self.state.buffer.active if table is None else table
        return rows.take(np.flatnonzero(self.holds(prims, rows.columns)))


class SelectingKind(KeyedKind):
    """A keyed dataset whose views select some of its rows (topic filters, object paths): the
    push is cut from the active buffer by the selected rows' positions
    (``relay.data.pushes.cut_positions``), each seq's step by ``relay.core.changesets.step``."""

    @abc.abstractmethod
    def positions(self, view: View) -> Positions:
        """Sorted positions of the active rows the view selects."""

    def cut(self, subscription: Subscription, located: Hashable) -> Cut | None:
        """The rows the view selects, as a delta (None: nothing new since the last push)."""
        held, view = subscription.held, subscription.view
        buffer = self.state.buffer
        if held is not None and held.view == view and held.generation == buffer.generation:
            return None
        stamp = buffer.stamp
        assert stamp is not None
        encodings = self._parts.encodings
        key = (view, subscription.shape, None if held is None else held.signature())
        body = encodings.get(self.name, buffer.generation, key)
        if body is None:
            body = cut_positions(self.positions(view), subscription.shape, held, buffer)
            encodings.put(self.name, key, body)
        return body, Held(view, buffer.generation, stamp.epoch, stamp.seq, body.keys)

    def full_view(self, subscription: Subscription) -> Body:
        """Every row the view selects, from the active buffer."""
        positions = self.positions(subscription.view)
        return cut_positions(positions, subscription.shape, None, self.state.buffer)

    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """The rows of the change the view selects (``relay.core.changesets.step``)."""
        view = subscription.view
        assert isinstance(view, (AnyOf, self.language[0]))
        selecting: Selecting = view  # type: ignore[assignment]  # topic filters or object paths
        return shared_step(steps, change, selecting, subscription.shape, held, info=self.state.info)
