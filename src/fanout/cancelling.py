"""A task's cancellation that a library swallowed, raised again.

A cancel landing while the asyncio Redis client runs a command can be consumed inside it (seen
with redis-py 8.1's cluster client: about one stop in three of
``tests/cluster/test_registry.py`` hung before this): the task then stays *cancelling*
but runs on, and a loop that renews a lease or follows a table every few seconds runs for ever;
whoever awaits the task after cancelling it (a relay stopping) waits for ever too. Each such
loop calls :func:`check` once a round.
"""

from __future__ import annotations

import asyncio


def check() -> None:
    """Raise ``CancelledError`` if the current task has a cancel request pending.

    Raises:
        asyncio.CancelledError: it has (the cancel was swallowed on the way).
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
