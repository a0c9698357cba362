"""Polling until a condition holds, failing with what was last seen (testing/wait.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fanout.testing.wait import NotYet, eventually, eventually_sync


class Counter:
    """Counts its reads; reads as the number of reads so far."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.reads


async def test_the_first_value_that_passes_is_returned() -> None:
    counter = Counter()
    assert await eventually(counter, lambda n: n >= 3, every=0.001) == 3
    assert counter.reads == 3


async def test_without_a_check_a_true_value_passes() -> None:
    values = iter([0, "", None, "ready"])
    assert await eventually(lambda: next(values), every=0.001) == "ready"


async def test_a_coroutine_probe_is_awaited() -> None:
    counter = Counter()

    async def read() -> int:
        await asyncio.sleep(0)
        return counter()

    assert await eventually(read, lambda n: n == 2, every=0.001) == 2


async def test_a_blocking_probe_runs_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def read() -> bool:
        seen.append(threading.get_ident())
        return True

    assert await eventually(read, in_thread=True)
    assert seen and loop_thread not in seen


async def test_a_timeout_says_what_was_awaited_and_what_was_last_seen() -> None:
    counter = Counter()
    started = time.monotonic()
    with pytest.raises(NotYet) as failed:
        await eventually(counter, lambda n: n < 0, timeout=0.2, every=0.01, what="a negative")
    assert 0.2 <= time.monotonic() - started < 2.0
    message = str(failed.value)
    assert message.startswith("a negative did not hold within 0.2 s")
    assert f"last seen: {counter.reads}" in message
    assert failed.value.last == counter.reads and failed.value.probes == counter.reads > 1
    assert isinstance(failed.value, AssertionError)  # pytest reports it as a failed assertion


async def test_a_long_last_value_is_cut_in_the_message() -> None:
    with pytest.raises(NotYet, match=r"last seen: 'xxx+\.\.\.$"):
        await eventually(lambda: "x" * 5000, lambda s: False, timeout=0.05)


async def test_an_error_of_the_probe_ends_the_wait_at_once() -> None:
    def exited() -> bool:
        raise RuntimeError("the child exited")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the child exited"):
        await eventually(exited, timeout=30)
    assert time.monotonic() - started < 1.0


async def test_a_timeout_of_the_probe_itself_is_not_taken_for_ours() -> None:
    def impatient() -> bool:
        raise TimeoutError("the probe gave up")

    with pytest.raises(TimeoutError, match="the probe gave up") as failed:
        await eventually(impatient, timeout=30)
    assert not isinstance(failed.value, NotYet)


def test_the_blocking_form_polls_without_an_event_loop() -> None:
    counter = Counter()
    assert eventually_sync(counter, lambda n: n == 4, every=0.001) == 4
    with pytest.raises(NotYet, match=r"the condition did not hold within 0.05 s .* last seen: 0"):
        eventually_sync(lambda: 0, timeout=0.05, every=0.01)


def test_the_blocking_form_probes_once_more_at_the_deadline() -> None:
    started = time.monotonic()

    def late() -> bool:
        return time.monotonic() - started >= 0.1

    assert eventually_sync(late, timeout=0.1, every=10.0)


async def test_exceptions_named_as_retrying_count_as_not_yet_and_others_propagate() -> None:
    calls = iter([LookupError("not yet"), LookupError("still not"), 7])

    def probe() -> int:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert await eventually(probe, every=0.01, retrying=(LookupError,)) == 7
    with pytest.raises(NotYet, match="still failing"):
        await eventually(
            lambda: (_ for _ in ()).throw(LookupError("still failing")),
            timeout=0.1,
            every=0.01,
            retrying=(LookupError,),
        )
    with pytest.raises(ValueError):
        await eventually(lambda: int("x"), retrying=(LookupError,))
