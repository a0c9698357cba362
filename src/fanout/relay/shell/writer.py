"""Batches written on the writer thread and swapped in as soon as they are written (CA 3197003
[0147]-[0151]; why a thread: docs/architecture.md, "The writer thread").

The upstream link hands each batch to ``Writer.put`` as soon as it is read. One thread writes
batches to inert buffers; the pump calls ``advance`` between its rounds, which swaps a written
batch in (ending the epoch) and starts writing the next. Rules:

1. **Order.** A batch is written only after the one before it is swapped in, so no tick is
   skipped; frames other than batches wait for ``drain``.
2. **Failure.** A batch that fails to write (nothing of it written) drops those queued after
   it, is raised to the link by its next call and handed to ``on_failure``: the link drops.
3. **Timing.** Each batch's write, read-to-swap wait and tick age go to ``GET /metrics``,
   the last ``RECORDED`` batches' times to ``GET /v1/admin/batches``.
4. **Decoded.** ``decoded`` is told of each batch decoded, before its write (relays below);
   a worker's batch naming its leader's state in shared memory is installed from there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from fanout import metrics
from fanout.relay.core.sends import Send
from fanout.relay.data.intake import Intake, SharedReader
from fanout.wire.messages import Batch

log = logging.getLogger(__name__)

#: Batches whose ``Timing`` the writer keeps (the latest).
RECORDED = 1000


@dataclass(frozen=True, slots=True)
class Timing:
    """One batch's way through the writer, wall clock (``time.time``, comparable across the
    processes of one host): ``read`` off the upstream connection, ``written`` to the inert
    buffer (on the writer thread), ``swapped`` in, its pushes and the frames to the relays
    below handed to their connections (``tiers.below``)."""

    dataset: str
    seq: int
    tick: int
    tick_time: float
    read: float
    written: float
    swapped: float


class Core(Protocol):
    """What the writer needs of ``RelayCore``."""

    def admit(self, batch: Batch) -> Intake | None: ...

    def finish(self, intake: Intake) -> list[Send]: ...

    def end_epoch(self) -> list[Send]: ...


class Writer:
    """Writes batches on one thread; the loop swaps each in as soon as it is written.

    Attributes:
        failure: the error of the write that failed, until ``stop``; meanwhile nothing more is
            written and ``put``, ``room`` and ``drain`` raise it.
    """

    def __init__(
        self,
        core: Core,
        dispatch: Callable[[Iterable[Send]], None],
        wake: Callable[[], None],
        on_failure: Callable[[BaseException], None] = lambda exc: None,
        decoded: Callable[[Intake], list[Send]] | None = None,
        *,
        shared: SharedReader | None = None,
    ) -> None:
        """Args:
        core: the relay's core (admits, finishes and swaps in batches).
        dispatch: sends the frames the core returns.
        wake: wakes the pump; called (on the loop) when a write is done.
        on_failure: called (on the loop) with a write's error.
        decoded: called (on the loop) with a batch decoded on the writer thread, before it
            is written (rule 4); its sends are dispatched.
        shared: reads the leader's state a batch names in shared memory (a worker's).
        """
        self._decoded = decoded
        self._shared = shared
        self._core = core
        self._dispatch = dispatch
        self._wake = wake
        self._on_failure = on_failure
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "relay-writer")
        #: Each batch queued with the times it was read (``time.perf_counter``, ``time.time``).
        self._queue: deque[tuple[Batch, float, float]] = deque()
        #: The intake being written and its job, whose result is when it was written.
        self._writing: tuple[Intake, concurrent.futures.Future[float]] | None = None
        self._read_at = 0.0
        self._read_wall = 0.0
        self._last_done: concurrent.futures.Future[float] | None = None
        #: The last ``RECORDED`` batches swapped in, oldest first.
        self.timings: deque[Timing] = deque(maxlen=RECORDED)
        self._progress = asyncio.Event()
        self.failure: BaseException | None = None
        self.write_seconds = metrics.Histogram(
            "relay_batch_write_seconds",
            "Seconds the writer thread took to write a batch to the inert buffer.",
        )
        self.read_to_swap = metrics.Histogram(
            "relay_batch_read_to_swap_seconds",
            "Seconds from a batch being read off the publisher's connection to its state being"
            " swapped in.",
        )
        self.tick_to_swap = metrics.Histogram(
            "relay_tick_to_swap_seconds",
            "Seconds from a tick (the publisher's clock) to the relay swapping its state in.",
        )

    @property
    def histograms(self) -> list[metrics.Histogram]:
        """The writer's histograms, for ``GET /metrics``."""
        return [self.write_seconds, self.read_to_swap, self.tick_to_swap]

    def put(self, batch: Batch) -> None:
        """Queue ``batch`` to be written after those before it.

        Raises:
            Exception: the error of a write that failed (``failure``).
        """
        self._check()
        self._queue.append((batch, time.perf_counter(), time.time()))
        self.advance()

    @property
    def queued(self) -> int:
        """Batches waiting to be written (not counting the one being written)."""
        return len(self._queue)

    def written(self) -> bool:
        """Whether a write is done and waits for ``advance`` to swap it in (cheap: the pump
        asks between any two pushes)."""
        return self._writing is not None and self._writing[1] is self._last_done

    def _done(self, loop: asyncio.AbstractEventLoop, job: concurrent.futures.Future[float]) -> None:
        # On the writer thread. One assignment: no lock needed to read it on the loop.
        self._last_done = job
        loop.call_soon_threadsafe(self._wake)

    def advance(self) -> None:
        """Swap in a batch that is written; start writing the next one if none is being
        written. Call on the event loop, between pushes."""
        if self._writing is not None:
            if not self._writing[1].done():
                return
            self._swap_in()
        while self._queue and self._writing is None and self.failure is None:
            batch, self._read_at, self._read_wall = self._queue.popleft()
            try:
                intake = self._core.admit(batch)
            except Exception as exc:  # a batch for an unknown dataset
                self._fail(exc)
                return
            if intake is not None:  # else a replay: applied already
                loop = asyncio.get_running_loop()
                job = self._thread.submit(self._write, intake, loop)
                job.add_done_callback(functools.partial(self._done, loop))
                self._writing = (intake, job)
        self._progress.set()

    def _write(self, intake: Intake, loop: asyncio.AbstractEventLoop) -> float:
        # On the writer thread; the histogram is observed there, read on the loop (a torn read
        # of a scrape is one observation off, never wrong twice). Returns when it was written.
        began = time.perf_counter()
        if intake.batch.shared is not None:  # the leader's whole state, not rows
            intake.install(self._shared)
        elif self._decoded is None:
            intake.write()
        else:

            def decoded(done: Intake) -> None:
                loop.call_soon_threadsafe(self._on_decoded, done)

            intake.write(decoded)
        self.write_seconds.observe(time.perf_counter() - began)
        return time.time()

    def _on_decoded(self, intake: Intake) -> None:
        # On the loop: before the write is swapped in, or after (the pump saw it written
        # first); ``decoded`` tells which by the intake.
        assert self._decoded is not None
        self._dispatch(self._decoded(intake))

    def _swap_in(self, failing: bool = True) -> None:
        assert self._writing is not None
        (intake, job), self._writing = self._writing, None
        error = job.exception()
        if error is None:
            self._dispatch(self._core.finish(intake))
            self._dispatch(self._core.end_epoch())  # swapped in now, not at the next round
            self.read_to_swap.observe(time.perf_counter() - self._read_at)
            batch, swapped = intake.batch, time.time()
            if batch.tick_time:
                self.tick_to_swap.observe(max(0.0, swapped - batch.tick_time))
            self.timings.append(
                Timing(
                    batch.dataset,
                    batch.seq,
                    batch.tick,
                    batch.tick_time,
                    self._read_wall,
                    job.result(),
                    swapped,
                )
            )
        else:
            intake.state.busy = False  # nothing of it was written (``Intake.write``)
            if failing:
                self._fail(error)
            else:  # stopping: the upstream is gone, and the seq comes again on reconnection
                log.warning(
                    "writer: seq %d failed as the upstream closed: %s", intake.batch.seq, error
                )

    def _fail(self, error: BaseException) -> None:
        self.failure = error
        self._queue.clear()
        self._progress.set()
        self._on_failure(error)

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    async def room(self, queued: int) -> None:
        """Wait until at most ``queued`` batches wait to be written.

        Raises:
            Exception: the error of a write that failed (``failure``).
        """
        await self._until(lambda: len(self._queue) <= queued)

    async def drain(self) -> None:
        """Wait until every batch put so far is swapped in (frames after them wait for this).

        Raises:
            Exception: the error of a write that failed (``failure``).
        """
        await self._until(lambda: not self._queue and self._writing is None)

    async def _until(self, done: Callable[[], bool]) -> None:
        while True:
            self._check()
            if done():
                return
            self._progress.clear()
            await self._progress.wait()

    async def stop(self) -> None:
        """Drop the queued batches and wait for the one being written (the thread owns its
        buffer until then), which is swapped in if it was written whole; forget ``failure``."""
        self._queue.clear()
        if self._writing is not None:
            job = self._writing[1]
            with contextlib.suppress(Exception):  # its error is the job's, read by _swap_in
                await asyncio.shield(asyncio.wrap_future(job))
            # Meanwhile the pump may have swapped it in (``advance``) itself.
            if self._writing is not None and self._writing[1] is job:
                self._swap_in(failing=False)
        self.failure = None

    def shutdown(self) -> None:
        """Stop the thread (after ``stop``)."""
        self._thread.shutdown(wait=True)
