"""The relay's event loop: asyncio's own, or uvloop (``Process.loop``, ``--loop``).

The relay's code is the same on either: only the loop under it changes, so that what a compiled
loop saves a push can be measured on the relay itself (docs/benchmarks/relay.md, "Where a push's
time goes": nothing measurable, and handshakes answered late beside the writer thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvloop

from fanout.relay.config import EventLoop

T = TypeVar("T")

#: Makes a new event loop of each kind.
FACTORIES: dict[EventLoop, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


def run(main: Coroutine[Any, Any, T], loop: EventLoop) -> T:
    """Run ``main`` to its end on a new event loop of kind ``loop``, as ``asyncio.run`` does."""
    with asyncio.Runner(loop_factory=FACTORIES[loop]) as runner:
        return runner.run(main)
