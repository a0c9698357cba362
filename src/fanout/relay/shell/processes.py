"""A relay's worker processes, as its leader (``relay.shell.workers``) starts and stops them:
each started as ``fanout relay --worker`` with its number, configuration and ``Told`` on its
stdin, serving once it prints ``READY`` and its own address, connected to its leader once it
prints ``CONNECTED`` (``relay.shell.worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pickle
import urllib.request
from collections.abc import Callable

from fanout.relay.config import RelayConfig

#: Seconds a worker may take to say it serves.
START_TIMEOUT = 60.0
#: What a worker prints once it serves, then its own loopback address (``relay.shell.worker``).
READY = "fanout worker ready "
#: What a worker prints once connected to its leader (its catalog came).
CONNECTED = "fanout worker connected"


class WorkerError(Exception):
    """A worker exited, or said nothing, instead of serving."""


@dataclasses.dataclass
class Worker:
    """A running worker process and its own loopback address."""

    process: asyncio.subprocess.Process
    address: str
    drain: asyncio.Task[None]

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait()), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        self.drain.cancel()


@dataclasses.dataclass(frozen=True)
class Told:
    """What a worker is told on its stdin besides its number and configuration."""

    #: Carry MQTT over WebSockets on the relay's port to the leader's (``relay.shell.carry``).
    carry: bool = False
    #: The relay is in a map of responsibility and redirects: the leader tells the worker its map.
    in_map: bool = False
    #: The relay splits and merges on load: the worker tells the leader its load every second,
    #: by part of the map's grid of ``side`` (the forward policy's weights if ``forward``).
    balancing: bool = False
    side: float = 0.0
    forward: bool = False


async def start(
    command: list[str],
    index: int,
    config: RelayConfig,
    told: Told,
    connected: Callable[[], None],
) -> Worker:
    """Start worker ``index`` running ``command`` with ``config`` and ``told`` on its stdin;
    returns it once it listens, and calls ``connected`` once it says it is connected to the
    leader.

    Its stderr is the leader's (one log); its stdout is read for its ready line, then drained.

    Raises:
        WorkerError: it exited first, or said nothing within ``START_TIMEOUT``.
    """
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,  # a terminal's ^C reaches the leader, which stops them
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(pickle.dumps((index, config, told)))
    process.stdin.close()
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while not (line := (await process.stdout.readline()).decode()).startswith(READY):
                if not line:
                    raise WorkerError(f"it exited ({await process.wait()})")
    except (TimeoutError, WorkerError) as exc:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise WorkerError(str(exc) or f"no ready line within {START_TIMEOUT:g} s") from exc
    drain = asyncio.create_task(_drain(process, connected))
    return Worker(process, line[len(READY) :].strip(), drain)


async def _drain(process: asyncio.subprocess.Process, connected: Callable[[], None]) -> None:
    """Read the worker's stdout to its end, calling ``connected`` at its ``CONNECTED`` line."""
    assert process.stdout is not None
    while line := await process.stdout.readline():
        if line.decode().startswith(CONNECTED):
            connected()


def read_text(url: str) -> bytes:
    """The body at ``url`` (blocking, within 5 s)."""
    with urllib.request.urlopen(url, timeout=5.0) as answer:
        return bytes(answer.read())
