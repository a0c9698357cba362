"""Starting fanout's own processes (publisher, relays) and waiting until they say they are ready.

Each server prints one line, ``fanout <role> ready ws://HOST:PORT``, on stdout once it serves; the
launcher waits for that line, so callers (the demo, the integration tests, benchmarks) never race
a server's start. A child's stderr goes to a log file, which is quoted if it dies early.

Children are started in a scope, ``async with Children() as children``, which owns the task
draining each child's stdout: leaving it stops the children still running and waits for their
drains, and a drain's error is raised there, not lost (``running`` is the scope for one child).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from fanout.background import Background
from fanout.errors import FanoutError

READY = "ready "


class LaunchError(FanoutError):
    """A child process exited or stayed silent instead of becoming ready."""

    code = "launch"


@dataclass
class Child:
    """A running fanout process, started by :meth:`Children.start`.

    Attributes:
        role: ``publisher`` or ``relay``.
        url: where it serves, from its ready line.
        log: the file its stderr goes to.
    """

    role: str
    process: asyncio.subprocess.Process
    url: str
    log: Path
    _drain: asyncio.Task[None] = field(repr=False)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: the crash the fault tests need (no cleanup, no goodbye)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    async def pause(self, timeout: float = 10.0) -> None:
        """SIGSTOP, returning once every thread of the process has stopped: it answers nothing
        more but its sockets stay open.

        Linux stops one thread first and the others only when that one is next scheduled: on a
        loaded machine another thread (a publisher's control plane) ran on meanwhile and
        answered a write sent after the signal.

        Raises:
            LaunchError: some thread still runs after ``timeout`` seconds.
        """
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGSTOP)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while running := _running_threads(self.pid):
            if loop.time() > deadline:
                raise LaunchError(f"{self.role} {self.pid}: threads {running} run after SIGSTOP")
            await asyncio.sleep(0.001)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)

    async def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``; returns its status.

        Its stdout drain ends with it (an error the drain met is raised by the scope).
        """
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
                self.process.send_signal(signal.SIGCONT)  # a paused child hears it too
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self.kill()
                await self.process.wait()
        # A grandchild (Spark's JVM) may hold the pipe open after the child is gone: cancel.
        self._drain.cancel()
        await asyncio.wait([self._drain])
        assert self.process.returncode is not None
        return self.process.returncode


class Children:
    """The scope of the processes started in it: it owns their stdout drains.

    Leaving it stops every child still running (the last started first), then waits for the
    drains; a drain that failed cancels the block and its error is raised in an
    ``ExceptionGroup`` when the scope is left.
    """

    def __init__(self) -> None:
        self._background = Background()
        self._children: list[Child] = []

    async def __aenter__(self) -> Children:
        await self._background.__aenter__()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            for child in reversed(self._children):  # the last started may depend on the first
                await child.stop()
        finally:
            await self._background.__aexit__(kind, error, traceback)

    async def start(self, role: str, args: list[str], log: Path, timeout: float = 180.0) -> Child:
        """Start ``fanout <role> <args>`` and wait for its ready line.

        Raises:
            LaunchError: it exited first, or printed no ready line within ``timeout`` seconds.
        """
        command = [sys.executable, "-m", "fanout", role, *args]
        return await self.spawn(role, command, log, timeout)

    async def spawn(
        self, role: str, command: list[str], log: Path, timeout: float = 180.0
    ) -> Child:
        """Start ``command``, a program that prints ``fanout <role> ready URL``, and wait for it.

        Raises:
            LaunchError: it exited first, or printed no ready line within ``timeout`` seconds.
        """
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as stderr:
            process = await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.PIPE, stderr=stderr, start_new_session=True
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
        child = Child(role, process, url, log, self._background.start(_discard(process.stdout)))
        self._children.append(child)
        return child


@contextlib.asynccontextmanager
async def running(
    role: str, args: list[str], log: Path, timeout: float = 180.0
) -> AsyncIterator[Child]:
    """One child in a scope of its own: ``async with running("relay", [...], log) as relay``."""
    async with Children() as children:
        yield await children.start(role, args, log, timeout)


def _running_threads(pid: int) -> list[int]:
    """The threads of process ``pid`` not stopped (state ``T``) nor exited, from ``/proc``."""
    running = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited
        if stat.rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z", "X"):
            running.append(int(task.name))
    return running


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
