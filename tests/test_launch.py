"""fanout.launch: a child's stdout drain is owned by the scope it was started in."""

from __future__ import annotations

import asyncio
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
