"""The publisher's control plane: a WebSocket server where relays register, acquire and release
upstream primitives and receive their batches; readers ask for authoritative state.

It runs its own asyncio loop on a thread beside Spark's driver. Spark's micro-batch callback hands
it finished batches (``deliver``), which it queues per relay; a relay whose queue fills is closed
as a slow consumer (it reconnects and re-acquires, getting fresh snapshots) rather than making the
pipeline wait for it.

An HTTP ``GET /metrics`` on the same port is answered with what was written to each relay and
the datasets' figures (``fanout.metrics``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from fanout import metrics
from fanout.connection import Outbound
from fanout.errors import FanoutError, InvalidView
from fanout.publisher.log import LogGap
from fanout.publisher.registry import Registry
from fanout.views import View
from fanout.wire import codec
from fanout.wire.columns import decode_columns, encode_columns, key_column
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    Curious,
    DatasetInfo,
    Error,
    Frame,
    Hello,
    Horizon,
    Knowledge,
    Publish,
    Published,
    ReadState,
    Release,
    StateRows,
    Welcome,
)
from fanout.wire.session import AcceptingSession

log = logging.getLogger(__name__)


class Datasets(Protocol):
    """What the control plane needs of the publisher's datasets (``service.DatasetService``)."""

    def infos(self) -> list[DatasetInfo]:
        """The catalog."""

    def check(self, name: str, view: View) -> View:
        """The primitive to hold for ``view`` (raises InvalidView)."""

    def read(self, name: str, view: View, tick: int) -> tuple[int, pa.Table]:
        """The authoritative rows in ``view`` at ``tick`` (blocking)."""

    def replay(self, name: str, epoch: int, after: int) -> list[Batch]:
        """Logged batches after seq ``after`` for a resuming relay (blocking; raises LogGap)."""

    def publish(
        self, name: str, upserts: dict[str, np.ndarray], deletes: np.ndarray
    ) -> tuple[int, int]:
        """Append a producer's events durably (blocking)."""

    def knowledge(self, name: str, epoch: int, req: int, first: int, last: int) -> list[Knowledge]:
        """Logged micro-batches for a curious relay (blocking; raises BadRequest/LogGap)."""

    def samples(self) -> list[metrics.Sample]:
        """The datasets' figures for ``GET /metrics``."""


#: Live batches held back for one relay while it is replayed to, before it is cut off.
HELD_BACK_LIMIT = 1024
#: Largest frame a relay may send us (acquire/release/read_state are small).
MAX_INBOUND = 1 << 20
#: Seconds a new connection may take to send its ``Hello`` before it is refused and closed.
HELLO_TIMEOUT = 10.0


class ControlPlane:
    """Serves relays and readers; delivers batches handed over by the pipeline."""

    def __init__(
        self,
        datasets: Datasets,
        registry: Registry,
        queue_limit: int = 64,
        hello_timeout: float = HELLO_TIMEOUT,
    ) -> None:
        self.datasets = datasets
        self.registry = registry
        self.queue_limit = queue_limit
        self.hello_timeout = hello_timeout
        self.port: int | None = None
        self._relays: dict[int, Outbound] = {}
        #: Every open connection (relays, readers, producers), and what closed ones wrote.
        self._open: set[Outbound] = set()
        self._closed_sent = (0, 0)
        self._slow_closed = 0
        #: Live batches for relays still being replayed to, sent once the replay is done.
        self._held_back: dict[int, list[tuple[str, int, bytes]]] = {}
        #: relay -> dataset -> the last seq it had applied when it (re)connected, or replayed.
        self._applied: dict[int, dict[str, int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    # -- running -----------------------------------------------------------------------------

    async def serve(self, host: str, port: int, ready: Callable[[int], None] | None = None) -> None:
        """Serve until ``stop()``; calls ``ready(port)`` once listening."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve(
            self._handle,
            host,
            port,
            max_size=MAX_INBOUND,
            compression=None,
            write_limit=1 << 20,
            process_request=metrics.route(self.samples),
        ) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            log.info("control plane listening on ws://%s:%d", host, self.port)
            if ready is not None:
                ready(self.port)
            await self._stop.wait()

    def start_in_thread(self, host: str, port: int) -> int:
        """Run ``serve`` on a daemon thread; returns the bound port once listening."""
        bound = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self.serve(host, port, ready=lambda _: bound.set()))
            except BaseException as exc:  # reported to the starting thread below
                failure.append(exc)
                bound.set()

        self._thread = threading.Thread(target=run, name="fanout-control", daemon=True)
        self._thread.start()
        bound.wait()
        if failure:
            raise failure[0]
        assert self.port is not None
        return self.port

    def stop(self) -> None:
        """Stop serving (thread-safe)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- metrics -----------------------------------------------------------------------------

    def samples(self) -> list[metrics.Sample]:
        """What ``GET /metrics`` on the control plane's port answers."""
        frames, sent = self._closed_sent
        held = self.registry.held()
        out = [
            metrics.Sample("publisher_relays", "gauge", "Relays connected now.", len(self._relays)),
            metrics.Sample(
                "publisher_frames_sent",
                "counter",
                "Frames written to every connection (relays, readers, producers).",
                frames + sum(outbound.sent for outbound in self._open),
            ),
            metrics.Sample(
                "publisher_bytes_sent",
                "counter",
                "Bytes of frames written to every connection (WebSocket framing not counted).",
                sent + sum(outbound.sent_bytes for outbound in self._open),
            ),
            metrics.Sample(
                "publisher_slow_consumers_closed",
                "counter",
                "Connections closed as slow consumers.",
                self._slow_closed + sum(o.closed_for is not None for o in self._open),
            ),
        ]
        for relay, outbound in self._relays.items():
            name, primitives = held.get(relay, ("", 0))
            labels = {"relay": str(relay), "name": name}
            out += [
                metrics.Sample(
                    "publisher_relay_frames_sent",
                    "counter",
                    "Frames written to one relay (batches, replies).",
                    outbound.sent,
                    labels,
                ),
                metrics.Sample(
                    "publisher_relay_bytes_sent",
                    "counter",
                    "Bytes of frames written to one relay.",
                    outbound.sent_bytes,
                    labels,
                ),
                metrics.Sample(
                    "publisher_relay_primitives",
                    "gauge",
                    "Primitives one relay holds now.",
                    primitives,
                    labels,
                ),
            ]
        return out + self.datasets.samples()

    # -- delivery (called from Spark's thread) ----------------------------------------------

    def deliver(self, batches: dict[int, Batch]) -> None:
        """Queue each relay's batch for sending; relays gone meanwhile are skipped."""
        if self._loop is None:
            return
        encoded = {
            relay: (batch.dataset, batch.seq, bool(batch.snapshots), codec.encode(batch))
            for relay, batch in batches.items()
        }
        self._loop.call_soon_threadsafe(self._offer_all, encoded)

    def _offer_all(self, encoded: dict[int, tuple[str, int, bool, bytes]]) -> None:
        for relay, (dataset, seq, snapshots, data) in encoded.items():
            outbound = self._relays.get(relay)
            if outbound is None or self._already_applied(relay, dataset, seq, snapshots):
                continue
            held = self._held_back.get(relay)
            if held is None:
                outbound.offer(data)
            elif len(held) < HELD_BACK_LIMIT:
                held.append((dataset, seq, data))
            else:
                outbound.close(f"slow consumer: {len(held)} batches waiting behind a replay")

    def _already_applied(self, relay: int, dataset: str, seq: int, snapshots: bool) -> bool:
        # A micro-batch Spark re-ran after a restart, which the resuming relay already applied.
        # A batch re-stamped with the applied seq still goes if it carries snapshots (a quiet
        # dataset's snapshots travel that way).
        applied = self._applied.get(relay, {}).get(dataset)
        return applied is not None and (seq < applied or (seq == applied and not snapshots))

    # -- one connection ---------------------------------------------------------------------

    async def _handle(self, websocket: ServerConnection) -> None:
        session = AcceptingSession(
            codec.to_publisher(), "fanout-publisher", frozenset({"relay", "reader", "producer"})
        )
        outbound = Outbound(websocket, self.queue_limit)
        relay: int | None = None
        self._open.add(outbound)
        outbound.start()
        try:
            # The connection owns the work its requests started (a replay, reads, publishes):
            # when it ends, what is still running is cancelled and waited for.
            async with asyncio.TaskGroup() as group:
                work = _Work(group)
                try:
                    async with asyncio.timeout(self.hello_timeout) as handshake:
                        async for message in websocket:
                            outcome = session.receive(message)
                            if outcome.reply is not None:
                                outbound.offer(codec.encode(outcome.reply))
                            if isinstance(outcome.reply, Welcome) and session.hello is not None:
                                handshake.reschedule(None)
                                relay = self._welcomed(session.hello, outbound, work)
                            if outcome.close:
                                break
                            if outcome.deliver is not None:
                                self._dispatch(outcome.deliver, relay, outbound, work)
                except TimeoutError:
                    late = f"no hello within {self.hello_timeout:g} s; closing"
                    outbound.offer(codec.encode(Error(code="handshake", message=late)))
                except ConnectionClosed:
                    pass  # the peer went away; its primitives are released below
                finally:
                    work.cancel()
        finally:
            if relay is not None:
                self._held_back.pop(relay, None)
                self._applied.pop(relay, None)
                self._relays.pop(relay, None)
                self.registry.drop_relay(relay)
                log.info("relay %d disconnected", relay)
            await outbound.finish()
            self._open.discard(outbound)
            frames, sent = self._closed_sent
            self._closed_sent = (frames + outbound.sent, sent + outbound.sent_bytes)
            self._slow_closed += outbound.closed_for is not None

    def _welcomed(self, hello: Hello, outbound: Outbound, work: _Work) -> int | None:
        """A peer was welcomed: send it the catalog; a relay that resumes is replayed to."""
        relay = self._welcome(hello.role, hello.name, outbound)
        if relay is not None and hello.resume:
            # hold live batches back from now on, before any can be offered
            self._held_back[relay] = []
            self._applied[relay] = {d: s for d, (_, s) in hello.resume.items()}
            work.start(self._resume(relay, hello.resume, outbound))
        return relay

    def _welcome(self, role: str, name: str, outbound: Outbound) -> int | None:
        catalog = Catalog(datasets=self.datasets.infos())
        outbound.offer(codec.encode(catalog))
        if role != "relay":
            return None
        relay = self.registry.add_relay(name)
        self._relays[relay] = outbound
        log.info("relay %d (%s) connected", relay, name or "unnamed")
        return relay

    async def _resume(
        self, relay: int, resume: dict[str, tuple[int, int]], outbound: Outbound
    ) -> None:
        """Replay what a reconnecting relay missed, then let its live batches through.

        Live batches are held back from the moment the relay is welcomed; every seq not held
        back is in the log (batches are logged before they are sent), so replaying the log up to
        its end and then the held-back batches (skipping seqs already replayed) leaves no gap.
        """
        replayed = self._applied[relay]
        for dataset, (epoch, seq) in resume.items():
            try:
                batches = await asyncio.to_thread(self.datasets.replay, dataset, epoch, seq)
            except FanoutError as exc:
                replayed.pop(dataset, None)  # its seqs say nothing about this stream's
                message = f"cannot replay {dataset} after seq {seq}: {exc}; resync from snapshots"
                await outbound.put(codec.encode(Error("resync", message)))
                continue
            for batch in batches:
                await outbound.put(codec.encode(batch))
            replayed[dataset] = batches[-1].seq if batches else seq
            log.info("relay %d: replayed %d batches of %s", relay, len(batches), dataset)
        held = self._held_back[relay]
        while held:
            dataset, seq, data = held.pop(0)
            if seq > replayed.get(dataset, -1):
                await outbound.put(data)
        del self._held_back[relay]  # no await since the last check: nothing slips in between

    def _dispatch(self, frame: Frame, relay: int | None, outbound: Outbound, work: _Work) -> None:
        match frame:
            case Acquire(prim=prim, dataset=dataset, view=view) if relay is not None:
                self._reply_on_error(outbound, prim, self._acquire, relay, prim, dataset, view)
            case Release(prim=prim) if relay is not None:
                self._reply_on_error(outbound, prim, self.registry.release, relay, prim)
            case Acquire() | Release():
                outbound.offer(codec.encode(Error("role", "only relays hold primitives")))
            case ReadState():
                work.start(_answered(frame.req, self._read_state(frame, outbound), outbound))
            case Publish():
                work.start(_answered(frame.req, self._publish(frame, outbound), outbound))
            case Curious() if relay is not None:
                work.start(_answered(frame.req, self._curious(frame, outbound), outbound))
            case Horizon(dataset=dataset, epoch=epoch, seq=seq) if relay is not None:
                self.registry.hold(relay, dataset, epoch, seq)
            case _:
                message = f"{type(frame).__name__.lower()} is not accepted by the publisher"
                outbound.offer(codec.encode(Error("protocol", message)))

    def _reply_on_error(
        self, outbound: Outbound, ref: int, action: Callable[..., None], *args: object
    ) -> None:
        try:
            action(*args)
        except FanoutError as exc:
            outbound.offer(codec.encode(Error(exc.code, str(exc), ref=ref)))

    def _acquire(self, relay: int, prim: int, dataset: str, view: View) -> None:
        self.registry.acquire(relay, prim, dataset, self.datasets.check(dataset, view))

    async def _curious(self, request: Curious, outbound: Outbound) -> None:
        try:
            answers = await asyncio.to_thread(
                self.datasets.knowledge,
                request.dataset,
                request.epoch,
                request.req,
                request.first,
                request.last,
            )
        except FanoutError as exc:
            code = "lost" if isinstance(exc, LogGap) else exc.code
            outbound.offer(codec.encode(Error(code, str(exc), ref=request.req)))
            return
        for answer in answers:
            await outbound.put(codec.encode(answer))

    async def _publish(self, request: Publish, outbound: Outbound) -> None:
        # Acknowledged only once durable: the append returns after the fsync.
        try:
            upserts = decode_columns(request.upserts)
            deletes = key_column(
                request.deletes, self._key_of(request.dataset), f"publish {request.req} deletes"
            )
            first, last = await asyncio.to_thread(
                self.datasets.publish, request.dataset, upserts, deletes
            )
        except FanoutError as exc:
            outbound.offer(codec.encode(Error(exc.code, str(exc), ref=request.req)))
            return
        outbound.offer(codec.encode(Published(request.req, first, last)))

    def _key_of(self, dataset: str) -> str:
        """The key column of ``dataset`` (raises InvalidView: no such dataset)."""
        keys = {info.name: info.key for info in self.datasets.infos()}
        if dataset not in keys:
            raise InvalidView(f"unknown dataset {dataset!r} (serving: {', '.join(keys) or 'none'})")
        return keys[dataset]

    async def _read_state(self, request: ReadState, outbound: Outbound) -> None:
        try:
            tick, table = await asyncio.to_thread(
                self.datasets.read, request.dataset, request.view, request.tick
            )
        except (FanoutError, TimeoutError) as exc:
            code = exc.code if isinstance(exc, FanoutError) else "timeout"
            outbound.offer(codec.encode(Error(code, str(exc), ref=request.req)))
            return
        arrays = {
            name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names
        }
        rows = encode_columns(arrays)
        reply = StateRows(req=request.req, dataset=request.dataset, tick=tick, rows=rows)
        outbound.offer(codec.encode(reply))


class _Work:
    """The tasks one connection started, in its ``TaskGroup``, and a way to cancel them."""

    def __init__(self, group: asyncio.TaskGroup) -> None:
        self._group = group
        self._running: set[asyncio.Task[None]] = set()

    def start(self, job: Coroutine[Any, Any, None]) -> None:
        task = self._group.create_task(job)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def cancel(self) -> None:
        for task in self._running:
            task.cancel()


async def _answered(req: int, job: Coroutine[Any, Any, None], outbound: Outbound) -> None:
    """Run a request's ``job``; a fault of ours in it is logged and told to the requester
    (``Error{code: "internal"}``), so that no request waits forever and the connection lives."""
    try:
        await job
    except Exception as exc:
        log.exception("request %d failed", req)
        message = f"request {req} failed in the publisher: {type(exc).__name__}: {exc}"
        outbound.offer(codec.encode(Error("internal", message, ref=req)))
