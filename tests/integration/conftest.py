"""Real processes on loopback: a Spark publisher and relays, started like a user would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.launch import Child, Children


@pytest.fixture(scope="module")
def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory per module: its processes' state and logs."""
    return tmp_path_factory.mktemp("deployment")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def children() -> AsyncIterator[Children]:
    """The scope of the module's processes: it owns their stdout drains and stops them last."""
    async with Children() as scope:
        yield scope


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(children: Children, tmp_path: Path) -> AsyncIterator[Child]:
    """``fanout publisher`` on a free port: 2,000 agents at 10 ticks/s, Spark local[*]."""
    child = await children.start(
        "publisher",
        [
            "--port",
            "0",
            "--state-dir",
            str(tmp_path / "publisher"),
            "--agents",
            "2000",
            "--log-level",
            "info",
        ],
        tmp_path / "publisher.log",
    )
    try:
        yield child
    finally:
        await child.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def relay(children: Children, publisher: Child, tmp_path: Path) -> AsyncIterator[Child]:
    """``fanout relay`` connected to the publisher."""
    child = await children.start(
        "relay",
        ["--publisher", publisher.url, "--port", "0", "--log-level", "info"],
        tmp_path / "relay.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def settle(view, updates: int = 2, timeout: float = 60.0) -> None:
    """Wait until ``view`` has received ``updates`` more updates."""
    await asyncio.wait_for(view.wait_updates(updates), timeout)
