"""The parts of keyed kinds whose views select some of their rows (topic filters, object paths):
a plain language, and pushes cut by the selected rows' positions.

:class:`PlainLanguage` takes views of one class (or any of several, an effective view under
rules), a transform without coordinates to move, each view needing itself held (widened as the
kind says). :class:`SelectedRows` cuts a push from the active buffer by the positions its
:class:`Selector` finds (``relay.data.pushes.cut_positions``), bodies shared by equal
subscriptions, each seq's step by ``relay.core.changesets.shared_step``. :func:`selecting` makes
a kind's ``serve`` of the two (``relay.kinds.base.RelaySide``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fanout.errors import InvalidView
from fanout.relay.core.changesets import ChangeSet, Step, Steps, shared_step
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.transforms import InvalidTransform, Shape, resolve
from fanout.relay.data.buffers import DoubleBuffer, Keys, Positions
from fanout.relay.data.keyedstate import KeyedState, Picks, Reach
from fanout.relay.data.pushes import Body, Held, cut_positions
from fanout.relay.kinds.base import Accepted, Cut, Parts
from fanout.relay.kinds.keyed import KeyedKind, Language
from fanout.relay.kinds.lens import RowLens, Selects
from fanout.views import View
from fanout.views.anyof import AnyOf
from fanout.views.members import Selecting
from fanout.wire.messages import DatasetInfo, Subscribe, Transform

#: Accepts a subscription of a language's views for a dataset (the view's class checked).
Accepting = Callable[[KeyedState, Subscribe, Sequence[str]], Accepted]
#: Makes a subscription's lens from its dataset's buffer and index columns.
Lenses = Callable[[Subscription, DoubleBuffer, tuple[str, ...]], RowLens]


@dataclass(frozen=True)
class Views:
    """A language's view class, and how errors name its views."""

    of: type
    described: str

    def check(
        self, dataset: str, view: View, transform: Transform | None, capabilities: Sequence[str]
    ) -> Transform:
        """The transform as negotiated, once the view is known to be of the language.

        Raises:
            InvalidView: the view is of another language.
            InvalidTransform: the transform asks for coordinates relative to an entity.
        """
        if isinstance(view, AnyOf) and isinstance(view.views[0], self.of):
            pass  # a union of the language's views (an effective view under rules)
        else:
            self.only(dataset, view)
        effective = (transform or Transform()).negotiate(capabilities)
        if effective.relative_to is not None:
            raise InvalidTransform(f"dataset {dataset!r} has no coordinates to make relative")
        return effective

    def only(self, dataset: str, view: View) -> None:
        """Refuse a view of another language.

        Raises:
            InvalidView: naming the language the dataset takes.
        """
        if not isinstance(view, self.of):
            name = type(view).__name__
            raise InvalidView(f"dataset {dataset!r} takes {self.described}, not {name}")


def accept_plain(
    views: Views, state: KeyedState, request: Subscribe, capabilities: Sequence[str]
) -> Accepted:
    """A view of the language; its rows with the transform's columns."""
    views.check(state.info.name, request.view, request.transform, capabilities)
    shape = resolve(request.transform, state.info, capabilities)
    return Accepted(shape, state.info.key, list(shape.columns))


class PlainLanguage:
    """A language of views that each need themselves held (``keyed.Language``)."""

    def __init__(
        self,
        state: KeyedState,
        views: Views,
        widened: Callable[[View], View] = lambda piece: piece,
        accept: Accepting | None = None,
    ) -> None:
        self.state = state
        self.views = views
        self._widened = widened
        self._accept = accept

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """A view of the language (as the kind narrows it, if it does)."""
        if self._accept is None:
            return accept_plain(self.views, self.state, request, capabilities)
        self.views.check(self.state.info.name, request.view, request.transform, capabilities)
        return self._accept(self.state, request, capabilities)

    def check_every(self, view: View, shape: Shape) -> None:
        """Every view of the language is served in mode ``every``."""
        return

    def needs(self, view: View) -> list[tuple[str, View]]:
        """The view itself (each member of an ``AnyOf``), of this dataset."""
        name = self.state.info.name
        if isinstance(view, AnyOf):
            return [(name, member) for member in view.views]
        return [(name, view)]

    def widened(self, piece: View) -> View:
        """As the kind widens it."""
        return self._widened(piece)

    def primitive(self, view: View) -> View:
        """A view of the language, as this relay acquires its own (``widened``).

        Raises:
            InvalidView: the view is of another language.
        """
        self.views.only(self.state.info.name, view)
        return self._widened(view)


class Selector(Protocol):
    """Which active rows a view selects, for one dataset."""

    def positions(self, view: View) -> Positions:
        """Sorted positions of the active rows the view (any of an ``AnyOf``) selects."""
        ...

    def stats(self) -> dict[str, float]:
        """Counters of its own work."""
        ...


class SelectedRows:
    """Pushes cut by the positions of the rows a view selects (``keyed.Rows``)."""

    metered = False

    def __init__(
        self, state: KeyedState, parts: Parts, selector: Selector, lenses: Lenses | None = None
    ) -> None:
        self.state = state
        self.selector = selector
        self.lenses = lenses
        self._parts = parts

    def cut(self, subscription: Subscription) -> Cut | None:
        """The rows the view selects, as a delta (None: nothing new since the last push)."""
        held, view = subscription.held, subscription.view
        buffer, name = self.state.buffer, self.state.info.name
        if held is not None and held.view == view and held.generation == buffer.generation:
            return None
        stamp = buffer.stamp
        assert stamp is not None
        encodings = self._parts.encodings
        key = (view, subscription.shape, None if held is None else held.signature())
        body = encodings.get(name, buffer.generation, key)
        if body is None:
            positions = self.selector.positions(view)
            body = cut_positions(positions, subscription.shape, held, buffer)
            encodings.put(name, key, body)
        return body, Held(view, buffer.generation, stamp.epoch, stamp.seq, body.keys)

    def full_view(self, subscription: Subscription) -> Body:
        """Every row the view selects, from the active buffer."""
        positions = self.selector.positions(subscription.view)
        return cut_positions(positions, subscription.shape, None, self.state.buffer)

    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """The rows of the change the view selects (``relay.core.changesets.step``)."""
        selecting: Selecting = subscription.view  # type: ignore[assignment]  # a selecting view
        info = self.state.info
        return shared_step(steps, change, selecting, subscription.shape, held, info=info)

    def query_seconds(self) -> float:
        """No queries run."""
        return 0.0

    def lens(self, subscription: Subscription) -> RowLens | None:
        """Its view of single rows, if the kind has lenses."""
        if self.lenses is None:
            return None
        index = tuple(self.state.info.index_columns)
        return self.lenses(subscription, self.state.buffer, index)

    def ticking(self, view: View) -> float | None:
        """Its views change only with its rows."""
        return None

    def forget(self) -> None:
        """Nothing is kept per view."""
        return

    def stats(self) -> dict[str, float]:
        """The selector's counters."""
        return self.selector.stats()


def selecting(
    language: Callable[[KeyedState], Language],
    selector: Callable[[KeyedState, Parts], Selector],
    picks: Picks | None = None,
    selects: Selects | None = None,
    lenses: Lenses | None = None,
    *,
    reach: Reach | None = None,
) -> Callable[[DatasetInfo, Parts], KeyedKind]:
    """A selecting kind's ``serve``: a keyed dataset of ``language`` whose rows ``selector``
    picks for views, ``picks`` for primitives (None: as its language's views pick them,
    ``relay.data.keyedstate.selected``); ``selects``: which rows a view selects, each by that
    row alone (a ``RowLens`` each), or ``lenses`` that make a subscription's lens (neither:
    writes are not shown before they are confirmed); ``reach``: the rows a write may change
    beyond those it names (``KeyedKind.reach``).

    Raises (the function made):
        ProtocolError: the relay cannot hold the dataset (``DatasetState.of``).
    """

    made = lenses
    if made is None and selects is not None:
        made = functools.partial(RowLens, selects=selects)

    def serve(info: DatasetInfo, parts: Parts) -> KeyedKind:
        state = KeyedState.of(info)
        if picks is not None:
            state.picks = picks
        rows = SelectedRows(state, parts, selector(state, parts), made)
        return KeyedKind(state, parts, language(state), rows, reach)

    return serve
