"""Starting fanout's own processes (publisher, relays) and waiting until they say they are ready.

Each server prints one line, ``fanout <role> ready ws://HOST:PORT``, on stdout once it serves; the
launcher waits for that line, so callers (the demo, the integration tests, benchmarks) never race
a server's start. A child's stderr goes to a log file, which is quoted if it dies early.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fanout.errors import FanoutError

READY = "ready "


class LaunchError(FanoutError):
    """A child process exited or stayed silent instead of becoming ready."""

    code = "launch"


@dataclass
class Child:
    """A running fanout process.

    Attributes:
        role: ``publisher`` or ``relay``.
        url: where it serves, from its ready line.
        log: the file its stderr goes to.
    """

    role: str
    process: asyncio.subprocess.Process
    url: str
    log: Path
    _drain: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: the crash the fault tests need (no cleanup, no goodbye)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def pause(self) -> None:
        """SIGSTOP: the process stops answering but its sockets stay open."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)

    async def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``; returns its status."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self.kill()
                await self.process.wait()
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
        assert self.process.returncode is not None
        return self.process.returncode


async def start(role: str, args: list[str], log: Path, timeout: float = 180.0) -> Child:
    """Start ``fanout <role> <args>`` and wait for its ready line.

    Raises:
        LaunchError: it exited first, or printed no ready line within ``timeout`` seconds.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fanout",
            role,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    assert process.stdout is not None
    try:
        url = await asyncio.wait_for(_ready_line(role, process.stdout), timeout)
    except (TimeoutError, LaunchError) as exc:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        text = await asyncio.to_thread(log.read_text, errors="replace")
        tail = text[-3000:]
        raise LaunchError(
            f"{role} did not become ready ({exc or 'timeout'}); its log {log}:\n{tail}"
        ) from exc
    child = Child(role, process, url, log)
    # Not in a TaskGroup: a Child is started and stopped by hand (``Child.stop``, which cancels
    # and awaits this task), by callers that hold it across blocks of their own.
    child._drain = asyncio.create_task(_discard(process.stdout))
    return child


async def _ready_line(role: str, stdout: asyncio.StreamReader) -> str:
    prefix = f"fanout {role} {READY}"
    while True:
        line = (await stdout.readline()).decode(errors="replace")
        if not line:
            raise LaunchError("exited")
        if line.startswith(prefix):
            return line[len(prefix) :].strip()


async def _discard(stdout: asyncio.StreamReader) -> None:
    # Keep reading so a chatty child never blocks on a full pipe.
    while await stdout.read(65536):
        pass
