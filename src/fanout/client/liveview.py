"""A view held through a relay: a window on its state (``fanout.client.viewstate``, owned by
the connection's ``ClientCore``) and an async iterator of its updates, woken by the connection
holding it (``fanout.client.subscriber``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fanout.client.viewstate import SubscriptionError, Update, ViewState
from fanout.views import View
from fanout.wire.messages import Mode, Transform
from fanout.wire.options import Resume

if TYPE_CHECKING:
    from fanout.client.subscriber import Subscriber

__all__ = ["LiveView", "SubscriptionError", "Update"]


class LiveView:
    """A subscription's materialised rows and its stream of updates.

    Attributes:
        state: the subscription's state; read it through the properties below.
        subscriber: the connection holding it (another one once its part moved).
    """

    def __init__(self, state: ViewState, subscriber: Subscriber) -> None:
        self.state = state
        self.subscriber = subscriber
        self._woken = asyncio.Event()
        self._waiting = 0  # iterations and waiters asleep: a wake with none costs nothing

    def wake(self) -> None:
        """Wake its iterations and waiters: its state changed (the connection holding it calls
        this after each event about it)."""
        if self._waiting:
            woken, self._woken = self._woken, asyncio.Event()
            woken.set()

    async def _sleep(self) -> None:
        """Until the next ``wake``."""
        self._waiting += 1
        try:
            await self._woken.wait()
        finally:
            self._waiting -= 1

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Update]:
        state = self.state
        while True:
            while state.pending:
                yield state.pending.popleft()
            if state.error is not None:
                raise state.error
            if state.ended:
                return
            await self._sleep()

    async def wait_updates(self, count: int = 1) -> None:
        """Return once ``count`` more updates have been applied to ``rows``.

        Raises:
            SubscriptionError: the subscription ended first.
        """
        state = self.state
        if state.error is not None:
            raise state.error
        target = state.updates + count
        while state.updates < target:
            if state.error is not None:
                raise state.error
            if state.ended:
                return
            await self._sleep()

    def token(self) -> Resume:
        """Where this view is: (epoch, seq, keys held), to resume an ``every`` subscription."""
        return self.state.token()

    async def change(self, view: View, rate: float | None = None) -> None:
        """Move the view; the next update is a delta against the rows held.

        An ``every`` subscription's view cannot change (the relay refuses it and ends the
        subscription): unsubscribe, and subscribe to the new view.
        """
        await self.subscriber.change(self, view, rate)

    async def close(self) -> None:
        """Unsubscribe; iteration ends once the relay confirms."""
        await self.subscriber.unsubscribe(self)

    @property
    def effective_transform(self) -> Transform:
        """The transform the relay applies: the one asked for, as the capabilities allow."""
        return (self.transform or Transform()).negotiate(self.subscriber.capabilities)

    # -- the state, read-only -----------------------------------------------------------------

    @property
    def sub(self) -> int:
        """The subscription's id on its connection."""
        return self.state.sub

    @property
    def dataset(self) -> str:
        """The dataset held."""
        return self.state.asked.dataset

    @property
    def view(self) -> View:
        """The view held."""
        return self.state.asked.view

    @property
    def rate(self) -> float:
        """Pushes per second asked for."""
        return self.state.asked.rate

    @property
    def priority(self) -> int:
        """The priority asked for."""
        return self.state.asked.priority

    @property
    def transform(self) -> Transform | None:
        """The transform asked for."""
        return self.state.asked.transform

    @property
    def mode(self) -> Mode:
        """``latest`` or ``every``."""
        return self.state.asked.mode

    @property
    def key(self) -> str:
        """The key column of the rows."""
        return self.state.key

    @property
    def columns(self) -> list[str]:
        """The columns of the rows."""
        return self.state.columns

    @property
    def rows(self) -> dict[Any, dict[str, Any]]:
        """The materialised rows by key, exact whether or not the program iterates."""
        return self.state.rows

    @property
    def epoch(self) -> int:
        """The stream the rows are at (-1 before the first push)."""
        return self.state.epoch

    @property
    def seq(self) -> int:
        """The publisher micro-batch the rows are at (-1 before the first push)."""
        return self.state.seq

    @property
    def tick(self) -> int:
        """The publisher tick the rows are at (-1 before the first push)."""
        return self.state.tick

    @property
    def updates(self) -> int:
        """Pushes and no-updates applied so far."""
        return self.state.updates

    @property
    def dropped(self) -> int:
        """Updates dropped from the iteration buffer (mode ``latest``; the rows have them)."""
        return self.state.dropped

    @property
    def buffer(self) -> int:
        """Updates not yet yielded kept at most (mode ``latest``)."""
        return self.state.buffer

    @property
    def resyncs(self) -> int:
        """Resumes the relay could not continue (a full push followed)."""
        return self.state.resyncs

    @property
    def gaps(self) -> int:
        """Breaks in the seqs of an ``every`` view (a relay that broke its promise)."""
        return self.state.gaps

    @property
    def moves(self) -> int:
        """Times its part moved to another relay and the view with it."""
        return self.state.moves

    @property
    def error(self) -> SubscriptionError | None:
        """Why the subscription ended, if it ended with an error."""
        return self.state.error

    @property
    def closed(self) -> bool:
        """Whether the subscription ended."""
        return self.state.ended

    # tests/integration/test_split.py reads ``_closed`` (the attribute's earlier name).
    _closed = closed
