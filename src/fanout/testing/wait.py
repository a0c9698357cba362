"""Waiting for what gives no event to wait on: poll it until it holds, or fail saying what was
last seen::

    await eventually(lambda: relay.core.stats()["subscriptions"], lambda n: n == 201)
    await eventually(lambda: "ready" in log.read_text(), timeout=60, in_thread=True)
    eventually_sync(lambda: counter.counts.get("files_malformed"), lambda n: n == 4)

1. The probe runs at once, then every ``every`` seconds until ``check`` holds for what it
   returned (by default: until it is true); that value is returned.
2. After ``timeout`` seconds :class:`NotYet` is raised, naming what was awaited and the probe's
   last value, so a failing test says what it saw.
3. An exception from the probe or the check ends the wait at once (a child that exited will
   not become ready).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")

#: Characters of the last seen value quoted in a failure.
SHOWN = 1000


class NotYet(AssertionError):
    """What was awaited did not happen in time.

    Attributes:
        last: the probe's last value (None if it never returned).
        probes: how many times the probe ran.
    """

    def __init__(self, message: str, last: object, probes: int) -> None:
        super().__init__(message)
        self.last = last
        self.probes = probes


def _holds(check: Callable[[Any], object] | None, value: object) -> bool:
    return bool(value) if check is None else bool(check(value))


def _failure(what: str, timeout: float, last: object, probes: int) -> NotYet:
    shown = repr(last)
    if len(shown) > SHOWN:
        shown = shown[:SHOWN] + "..."
    message = f"{what or 'the condition'} did not hold within {timeout:g} s"
    return NotYet(f"{message} ({probes} probes); last seen: {shown}", last, probes)


async def eventually(
    probe: Callable[[], T | Awaitable[T]],
    check: Callable[[T], object] | None = None,
    *,
    timeout: float = 10.0,
    every: float = 0.05,
    what: str = "",
    in_thread: bool = False,
    retrying: tuple[type[Exception], ...] = (),
) -> T:
    """Poll ``probe()`` until ``check`` holds for its value (in an event loop).

    Args:
        probe: returns what to look at; may be a coroutine function.
        check: whether that value is what is awaited (default: the value is true).
        timeout: seconds to wait in all.
        every: seconds between two probes.
        what: what is awaited, for the failure's message.
        in_thread: run ``probe`` in a worker thread (it blocks: reads a file, a pipe).
        retrying: exceptions the probe may raise while the awaited state is not there yet
            (e.g. a read before the publisher's first micro-batch): each counts as a probe
            that did not pass, and the last one is shown if the wait runs out.

    Returns:
        The probe's first value that passed the check.

    Raises:
        NotYet: it did not pass within ``timeout`` seconds.
    """
    last: object = None
    probes = 0
    try:
        async with asyncio.timeout(timeout) as deadline:
            while True:
                try:
                    value = await asyncio.to_thread(probe) if in_thread else probe()
                    if inspect.isawaitable(value):
                        value = await value
                except retrying as exc:
                    probes += 1
                    last = exc
                    await asyncio.sleep(every)
                    continue
                probes += 1
                last = value
                if _holds(check, value):
                    return cast(T, value)
                await asyncio.sleep(every)
    except TimeoutError:
        if not deadline.expired():
            raise  # the probe's own timeout, not ours
        raise _failure(what, timeout, last, probes) from None


def eventually_sync(
    probe: Callable[[], T],
    check: Callable[[T], object] | None = None,
    *,
    timeout: float = 10.0,
    every: float = 0.05,
    what: str = "",
) -> T:
    """Poll ``probe()`` until ``check`` holds for its value, sleeping in between (no event loop).

    Args and Returns: as :func:`eventually`; the probe runs one last time at the deadline.

    Raises:
        NotYet: it did not pass within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    probes = 0
    while True:
        value = probe()
        probes += 1
        if _holds(check, value):
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failure(what, timeout, value, probes)
        time.sleep(min(every, left))
