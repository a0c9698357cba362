"""fanout.launch: a child's stdout drain is owned by the scope it was started in; a paused child
runs no thread."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from fanout import launch
from fanout.launch import Children, LaunchError
from fanout.testing.wait import eventually

# Says it is ready, then writes far more than a pipe holds before leaving a mark: the mark
# appears only if someone keeps reading its stdout.
CHATTY = """
import sys, pathlib, time
print("fanout relay ready ws://127.0.0.1:1", flush=True)
sys.stdout.write("x" * (4 << 20)); sys.stdout.flush()
pathlib.Path(sys.argv[1]).touch()
time.sleep(3600)
"""


def chatty(mark: Path) -> list[str]:
    return [sys.executable, "-c", CHATTY, str(mark)]


async def test_a_chatty_child_is_drained_and_its_drain_ends_with_it(tmp_path: Path) -> None:
    mark = tmp_path / "wrote"
    async with Children() as children:
        child = await children.spawn("relay", chatty(mark), tmp_path / "relay.log")
        assert child.url == "ws://127.0.0.1:1"
        await eventually(mark.exists, timeout=60)
        await child.stop()
        assert child.process.returncode is not None
        assert child._drain.done()


async def test_leaving_the_scope_stops_its_children_and_their_drains(tmp_path: Path) -> None:
    async with Children() as children:
        child = await children.spawn("relay", chatty(tmp_path / "wrote"), tmp_path / "relay.log")
    assert child.process.returncode is not None
    assert child._drain.done()


async def test_an_error_in_a_drain_is_raised_by_the_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(stdout: asyncio.StreamReader) -> None:
        raise OSError("the pipe broke")

    monkeypatch.setattr(launch, "_discard", broken)
    with pytest.raises(ExceptionGroup) as raised:
        async with Children() as children:
            child = await children.spawn("relay", chatty(tmp_path / "w"), tmp_path / "relay.log")
            await asyncio.sleep(3600)  # cancelled by the failed drain
    assert raised.group_contains(OSError, match="the pipe broke")
    assert child.process.returncode is not None


async def test_a_child_that_exits_before_ready_is_a_launch_error(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    command = [sys.executable, "-c", "import sys; sys.stderr.write('no config'); sys.exit(2)"]
    async with Children() as children:
        with pytest.raises(LaunchError, match="no config"):
            await children.spawn("relay", command, log)


# Says it is ready, then a thread other than the main one (as a publisher's control plane)
# writes a counter to a file without pause while the main thread sleeps.
BUSY = """
import sys, threading, time
def count():
    n = 0
    with open(sys.argv[1], "w") as out:
        while True:
            n += 1
            out.seek(0); out.write(str(n)); out.flush()
threading.Thread(target=count, daemon=True).start()
print("fanout publisher ready ws://127.0.0.1:1", flush=True)
time.sleep(3600)
"""


def states(pid: int) -> list[str]:
    """Each thread's ``State:`` line in ``/proc/PID/task/*/status`` (``T (stopped)``, ...)."""
    lines = [
        line
        for t in Path(f"/proc/{pid}/task").glob("*/status")
        for line in t.read_text().splitlines()
    ]
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("State:")]


async def test_pause_returns_once_every_thread_has_stopped(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    command = [sys.executable, "-c", BUSY, str(counter)]
    async with Children() as children:
        child = await children.spawn("publisher", command, tmp_path / "publisher.log")
        await eventually(lambda: counter.exists() and counter.read_text(), timeout=30)
        await child.pause()
        threads = states(child.pid)  # at once: the kernel stops a process's threads one by one
        assert len(threads) >= 2 and all(s.startswith("T") for s in threads), threads
        stopped_at = counter.read_text()
        await asyncio.sleep(0.2)
        assert counter.read_text() == stopped_at, "a thread ran after pause() returned"
        child.resume()
        await eventually(lambda: counter.read_text() != stopped_at, timeout=30)


async def test_a_paused_child_is_stopped_by_its_sigterm(tmp_path: Path) -> None:
    command = [sys.executable, "-c", BUSY, str(tmp_path / "counter")]
    async with Children() as children:
        child = await children.spawn("publisher", command, tmp_path / "publisher.log")
        await child.pause()
        assert await child.stop(timeout=30) == -signal.SIGTERM  # not SIGKILLed at the timeout
