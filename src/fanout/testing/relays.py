"""Real relays on loopback, for tests and benchmarks: in this event loop
(:func:`running_relay`), or in a process of their own (:class:`RelayProcess`), whose CPU time
and counters a benchmark samples without sharing its cores with the relay.

For the ``fanout relay`` command itself, as a user starts it, see ``fanout.launch.Children``.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import logging
import multiprocessing as mp
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from fanout.background import Background
from fanout.relay.config import Listening, RelayConfig, Upstream
from fanout.relay.shell import loops
from fanout.relay.shell.server import RelayServer
from fanout.testing import cpu
from fanout.testing.ports import LOOPBACK

#: Makes a report function for a relay process, given its server before it runs (to wrap its
#: methods, say); the report's dict goes with every sample. A top-level function: it is pickled.
Instrument = Callable[[RelayServer], Callable[[], dict[str, Any]]]


def relay_url(relay: RelayServer) -> str:
    """Where ``relay`` serves subscribers (once it runs)."""
    return f"ws://{relay.config.listening.host}:{relay.port}"


@contextlib.asynccontextmanager
async def running_relay(
    upstream: str | Upstream, *, timeout: float = 10.0, **sections: Any
) -> AsyncIterator[tuple[RelayServer, str]]:
    """Run a real relay in this event loop, on a free loopback port, until the block ends.

    Args:
        upstream: the publisher's URL, or the upstream section whole.
        timeout: seconds it may take to serve and connect upstream.
        sections: ``RelayConfig`` fields other than ``upstream`` (``name="a"``,
            ``limits=Limits(stall_timeout=1.0)``, ...); ``listening`` defaults to loopback.

    Yields:
        The relay, once it serves and is connected upstream, and its URL.

    Raises:
        TimeoutError: it was not ready within ``timeout`` seconds.
        Exception: what stopped it from starting (a port in use, say), as it was raised.
    """
    sections = {"listening": Listening(host=LOOPBACK), **sections}
    if isinstance(upstream, str):
        upstream = Upstream(upstream)
    relay = RelayServer(RelayConfig(upstream, **sections))
    ready = asyncio.Event()
    async with Background() as background:
        running = background.start(_run(relay, ready))
        try:
            async with asyncio.timeout(timeout):
                await ready.wait()
        except TimeoutError:
            raise TimeoutError(f"the relay was not ready within {timeout:g} s") from None
        if running.done():
            raise running.result() or RuntimeError("the relay stopped before it was ready")
        yield relay, relay_url(relay)
        running.cancel()
    if (failure := _failure(running)) is not None:
        raise failure  # it failed while the block ran


async def _run(relay: RelayServer, ready: asyncio.Event) -> Exception | None:
    """Run ``relay``, setting ``ready`` once it serves or once it stops.

    Returns:
        What stopped it, for the caller to raise as it was (raised here, a TaskGroup would
        wrap it in an ExceptionGroup and cancel the caller's block).
    """
    try:
        await relay.run(lambda _: ready.set())
    except Exception as failure:
        return failure
    finally:
        ready.set()
    return None


def _failure(running: asyncio.Task[Exception | None]) -> Exception | None:
    """What stopped a relay run by ``_run``; None if it was cancelled (stopped on purpose)."""
    return None if running.cancelled() else running.result()


def _on_loopback(config: RelayConfig) -> RelayConfig:
    return replace(config, listening=replace(config.listening, host=LOOPBACK))


@dataclass(frozen=True)
class RelaySample:
    """A relay process at one moment.

    Attributes:
        cpu: the process's CPU time so far, and when.
        stats: ``RelayCore.stats()`` then.
        report: what the process's instrument reported then (empty without one).
    """

    cpu: cpu.CpuSample
    stats: dict[str, float]
    report: dict[str, Any] = field(default_factory=dict)


class RelayProcess:
    """A real relay (``RelayServer``) in a process of its own, started by a benchmark.

    The process serves until :meth:`stop`; :meth:`sample` asks it for its CPU time and counters
    over a pipe. Start several, then wait for each to be :meth:`ready`.
    """

    def __init__(
        self,
        config: RelayConfig,
        *,
        log: Path | None = None,
        level: int = logging.WARNING,
        instrument: Instrument | None = None,
        profile: Path | None = None,
    ) -> None:
        """Start the process.

        Args:
            config: the relay's configuration (its ``port`` 0: a free one).
            log: where the relay's log goes (none without).
            level: the lowest level logged.
            instrument: see :data:`Instrument`.
            profile: run the process under cProfile and dump its stats to this file.
        """
        context = mp.get_context("spawn")
        self._pipe, theirs = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(theirs, _Job(_on_loopback(config), log, level, instrument, profile)),
            name=f"relay-{config.name}",
        )
        self.process.start()
        theirs.close()
        self._url: str | None = None

    def ready(self, timeout: float = 120.0) -> str:
        """Wait until the relay serves and is connected upstream; return its URL.

        Raises:
            RuntimeError: the process failed or ended first, or said nothing within
                ``timeout`` seconds.
        """
        if self._url is None:
            if not self._pipe.poll(timeout):
                raise RuntimeError(f"the relay process was not ready within {timeout:g} s")
            try:
                kind, value = self._pipe.recv()
            except EOFError:
                raise RuntimeError(f"the relay process ended ({self.process.exitcode})") from None
            if kind != "ready":
                raise RuntimeError(f"the relay process failed: {value}")
            self._url = str(value)
        return self._url

    def sample(self) -> RelaySample:
        """The relay's CPU time, counters and instrument's report now (after :meth:`ready`)."""
        self.ready()
        self._pipe.send("sample")
        sampled: RelaySample = self._pipe.recv()
        return sampled

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the relay; kill the process if it has not ended within ``timeout`` seconds."""
        with contextlib.suppress(OSError):
            self._pipe.send("stop")
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._pipe.close()


@dataclass(frozen=True)
class _Job:
    """What a relay process is to run (see ``RelayProcess``)."""

    config: RelayConfig
    log: Path | None
    level: int
    instrument: Instrument | None
    profile: Path | None


def _serve(pipe: Connection, job: _Job) -> None:
    """The relay process: serve, answer ``sample`` requests, end on ``stop``."""
    if job.log is not None:
        logging.basicConfig(filename=job.log, level=job.level)
    main, loop = _relay_main(pipe, job.config, job.instrument), job.config.process.loop
    if job.profile is None:
        loops.run(main, loop)
        return
    profiler = cProfile.Profile()
    try:
        profiler.runcall(loops.run, main, loop)
    finally:
        profiler.dump_stats(job.profile)


async def _relay_main(pipe: Connection, config: RelayConfig, instrument: Instrument | None) -> None:
    server = RelayServer(config)
    report = instrument(server) if instrument is not None else dict
    ready = asyncio.Event()
    async with Background() as background:
        running = background.start(_run(server, ready))
        await ready.wait()
        if running.done():
            pipe.send(("failed", repr(running.result())))
            return
        pipe.send(("ready", relay_url(server)))
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, _request, pipe) == "sample":
            pipe.send(RelaySample(cpu.this_process(), server.core.stats(), report()))
        running.cancel()
    if (failure := _failure(running)) is not None:
        raise failure  # it failed while serving


def _request(pipe: Connection) -> str:
    """The next request; ``stop`` if the benchmark's end of the pipe is gone."""
    try:
        return str(pipe.recv())
    except EOFError:
        return "stop"
