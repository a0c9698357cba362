"""A view's rows written to a dataset as they change (client/republish.py): what changed since
the last write, once for the updates at hand, rows gone deleted."""

from __future__ import annotations

import asyncio
from collections import deque
from types import SimpleNamespace
from typing import Any

from fanout.client.republish import republish


class Writer:
    def __init__(self) -> None:
        self.writes: list[tuple[str, list[dict[str, Any]], list[Any], str]] = []

    async def publish(
        self, dataset: str, rows: list, deletes: list, *, key: str
    ) -> tuple[int, int]:
        self.writes.append((dataset, rows, deletes, key))
        return 0, 0


class View:
    """What ``republish`` reads of a ``LiveView``: updates, then the rows after each."""

    def __init__(self, steps: list[tuple[int, dict[Any, dict[str, Any]]]]) -> None:
        self.key = "cell"
        self.subscriber = Writer()
        self.state = SimpleNamespace(pending=deque())
        self._steps = steps
        self.rows: dict[Any, dict[str, Any]] = {}

    def __aiter__(self) -> View:
        return self

    async def __anext__(self) -> object:
        if not self._steps:
            raise StopAsyncIteration
        more, self.rows = self._steps.pop(0)
        self.state.pending = deque(range(more))  # updates still at hand after this one
        return object()


def test_only_what_changed_is_written_once_for_the_updates_at_hand() -> None:
    view = View(
        [
            (0, {0: {"cell": 0, "n": 2}, 1: {"cell": 1, "n": 1}}),
            (1, {0: {"cell": 0, "n": 9}}),  # another update at hand: not written yet
            (0, {0: {"cell": 0, "n": 3}, 1: {"cell": 1, "n": 1}}),
            (0, {0: {"cell": 0, "n": 3}}),
            (0, {0: {"cell": 0, "n": 3}}),  # nothing changed: no write
        ]
    )
    asyncio.run(republish(view, "cells"))  # type: ignore[arg-type]
    assert view.subscriber.writes == [
        ("cells", [{"cell": 0, "n": 2}, {"cell": 1, "n": 1}], [], "cell"),
        ("cells", [{"cell": 0, "n": 3}], [], "cell"),
        ("cells", [], [1], "cell"),
    ]
