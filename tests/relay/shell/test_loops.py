"""The relay on either event loop (``relay.shell.loops``): the same subscriber served through its
real port, a push written and read, on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio

import pytest
from tests.relay.shell.deployments import next_update, running

from fanout.client import connect
from fanout.errors import ConfigError
from fanout.relay.config import EventLoop, Process
from fanout.relay.shell import loops
from fanout.views import Box


async def _served() -> tuple[str, dict[int, dict[str, object]]]:
    """Run a publisher, a relay and a subscriber in this loop; the loop's module and the rows."""
    async with running() as (publisher, _, url), connect(url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (10, 10)))
        acquire = await publisher.next_acquire()
        await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
        await next_update(view)
        await publisher.send({"id": [1, 2], "x": [2.0, 3.0], "y": [2.0, 3.0]}, tick=2)
        await next_update(view)
        return type(asyncio.get_running_loop()).__module__, dict(view.rows)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_subscriber_is_served_on_either_loop(loop: EventLoop) -> None:
    # Run as the relay's process runs (``loops.run``), not on the test's own loop: uvloop's
    # transports are not asyncio.Transport subclasses, which the port once asserted.
    module, rows = loops.run(_served(), loop)
    assert module.startswith(loop)
    assert rows == {1: {"id": 1, "x": 2.0, "y": 2.0}, 2: {"id": 2, "x": 3.0, "y": 3.0}}


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(ConfigError, match="loop: 'trio' is not one of uvloop, asyncio"):
        Process(loop="trio")  # type: ignore[arg-type]
