"""Tasks owned by a TaskGroup for an object's lifetime; the block's own error stays unwrapped."""

from __future__ import annotations

import asyncio

import pytest

from fanout.background import Background


async def test_leaving_the_block_waits_for_the_tasks() -> None:
    done: list[int] = []

    async def work() -> None:
        await asyncio.sleep(0.01)
        done.append(1)

    async with Background() as background:
        background.start(work())
        assert len(background.running) == 1
    assert done == [1]
    assert background.running == frozenset()


async def test_cancel_stops_the_tasks_instead() -> None:
    async with Background() as background:
        task = background.start(asyncio.sleep(60))
        background.cancel()
    assert task.cancelled()


async def test_the_blocks_error_is_raised_as_it_is_and_cancels_the_tasks() -> None:
    with pytest.raises(KeyError, match="mine"):
        async with Background() as background:
            task = background.start(asyncio.sleep(60))
            raise KeyError("mine")
    assert task.cancelled()


async def test_a_failing_task_ends_the_block_with_its_error() -> None:
    async def fail() -> None:
        raise ValueError("task")

    with pytest.raises(ExceptionGroup) as raised:
        async with Background() as background:
            background.start(fail())
            await asyncio.sleep(60)  # cancelled by the task's failure
    assert [type(e) for e in raised.value.exceptions] == [ValueError]


async def test_nothing_starts_once_the_block_is_left() -> None:
    async with Background() as background:
        pass
    coroutine = asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        background.start(coroutine)
    coroutine.close()
