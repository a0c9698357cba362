"""``cancelling``: a cancel a library swallowed is raised again at the next check."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from fanout import cancelling

pytestmark = pytest.mark.asyncio


async def test_a_swallowed_cancel_is_raised_again_at_the_next_check() -> None:
    rounds = []

    async def loop() -> None:
        while True:
            cancelling.check()
            rounds.append(1)
            with contextlib.suppress(asyncio.CancelledError):  # as a library swallowing it
                await asyncio.sleep(10)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert rounds == [1]  # ended at the check after the swallowed cancel, not a round later


async def test_a_task_not_cancelled_runs_on() -> None:
    async def once() -> str:
        cancelling.check()
        return "ran"

    assert await asyncio.create_task(once()) == "ran"
