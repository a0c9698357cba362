"""Tasks serving one object while it is open, each owned by an ``asyncio.TaskGroup``.

``async with Background() as background:`` opens the group; ``background.start(coroutine)``
runs a task in it. Leaving the block normally waits for the tasks still running (``cancel()``
first to stop them rather than wait); leaving it by an error or a cancel cancels them. As in
any TaskGroup, a task that fails cancels the others and the block, and its error is raised in
an ``ExceptionGroup``. Unlike a bare TaskGroup held across a ``yield`` (a connection's reader
beside its user's code), the block's own error is raised as it is, not wrapped: it is the
caller's, not one of the tasks'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")


class Background:
    """A TaskGroup for an object's tasks, entered and left with the object."""

    def __init__(self) -> None:
        self._group = asyncio.TaskGroup()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> Background:
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is not None:
            self.cancel()
        # The block's error is not handed to the group: it stays the caller's, unwrapped.
        await self._group.__aexit__(None, None, None)

    def start(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coroutine`` as a task of the group.

        Raises:
            RuntimeError: the group is not open (entered and not left).
        """
        task = self._group.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def running(self) -> frozenset[asyncio.Task[Any]]:
        """The tasks not done yet."""
        return frozenset(self._tasks)

    def cancel(self) -> None:
        """Cancel every task still running (leaving the block then waits for them to end)."""
        for task in self._tasks:
            task.cancel()
