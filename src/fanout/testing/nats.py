"""A throwaway NATS server: for the tests and benchmarks of the subject bus (``docs/caches.md``).

The server is this machine's ``nats-server`` (Debian: ``apt-get install nats-server``), on a free
loopback port, without persistence. ``restart`` kills it (SIGKILL: no goodbye to its clients)
and starts it again on the same port, which is how the tests take the bus away mid-stream::

    with throwaway_nats() as server:
        await nats.connect(server.url)
        server.restart()
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from fanout.testing.binaries import ProgramMissing, find
from fanout.testing.ports import LOOPBACK, free_port

MISSING = str(ProgramMissing("nats-server"))
#: Seconds to wait for the server to listen.
START_WAIT = 20.0


class NatsMissing(ProgramMissing):
    """This machine has no ``nats-server`` (a test skips on it: fanout.testing.needs)."""


class NatsServer:
    """A ``nats-server`` process on loopback.

    Attributes:
        port: where it listens (the same across restarts).
        url: ``nats://127.0.0.1:PORT``.
        log: the file its output goes to.
    """

    def __init__(self, binary: str, folder: Path) -> None:
        self.binary = binary
        self.port = free_port()
        self.url = f"nats://{LOOPBACK}:{self.port}"
        self.log = folder / "nats-server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it and wait until it listens.

        Raises:
            RuntimeError: it exited or did not listen in ``START_WAIT`` seconds (its log quoted).
        """
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                [self.binary, "-a", LOOPBACK, "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, self.port), 1):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not start:\n{self.log.read_text(errors='replace')}")

    def kill(self) -> None:
        """SIGKILL it: clients see the connection drop."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 5 s)."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def restart(self, down_for: float = 0.0) -> None:
        """Kill it, wait ``down_for`` seconds, and start it again on the same port."""
        self.kill()
        time.sleep(down_for)
        self.start()


@contextlib.contextmanager
def throwaway_nats() -> Iterator[NatsServer]:
    """Start a NATS server on a free loopback port; stop it afterwards.

    Raises:
        NatsMissing: ``nats-server`` is not installed.
        RuntimeError: it did not start.
    """
    binary = find("nats-server")
    if binary is None:
        raise NatsMissing("nats-server")
    folder = Path(tempfile.mkdtemp(prefix="fanout-nats-"))
    server = NatsServer(binary, folder)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
