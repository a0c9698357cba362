"""The publisher's control plane: a WebSocket server where relays register, acquire and release
upstream primitives and receive their batches; readers ask for authoritative state.

This is the asyncio shell around ``publisher.protocol``, which decides everything a connection is
sent: the shell moves bytes, owns time (the hello timer) and runs blocking work (replays of the
log, reads, publishes) on threads. It runs its own asyncio loop on a thread beside Spark's
driver. Spark's micro-batch callback hands it finished batches (``deliver``), which it queues per
relay; a relay whose queue fills is closed as a slow consumer (it reconnects and re-acquires,
getting fresh snapshots) rather than making the pipeline wait for it. A durable write is passed
on at once to the other relays it concerns (``publisher.passing``).

An HTTP ``GET /metrics`` on the same port is answered with what was written to each relay and
the datasets' figures (``fanout.metrics``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from ssl import SSLContext
from typing import Any

from prometheus_client.registry import Collector
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from fanout import expiry, metrics
from fanout.auth import AuthConfig, Grant, Verifier
from fanout.buckets import Throttle
from fanout.connection import Outbound, refuse
from fanout.errors import FanoutError
from fanout.publisher.answers import Datasets, answer, answered
from fanout.publisher.passing import LIVE_KINDS, Choice, recipients
from fanout.publisher.protocol import (
    Action,
    Close,
    Delivery,
    Forward,
    PublisherSession,
    Replay,
    Send,
    Start,
    Welcomed,
)
from fanout.publisher.relaytable import Registry
from fanout.views.objects.store import touched
from fanout.wire import codec
from fanout.wire.messages import (
    Batch,
    DatasetState,
    Error,
    Hello,
    Publish,
    Written,
)

log = logging.getLogger(__name__)


#: Largest frame a relay may send us (acquire/release/read_state are small).
MAX_INBOUND = 1 << 20
#: Seconds a new connection may take to send its ``Hello`` before it is refused and closed.
HELLO_TIMEOUT = 10.0
#: Seconds of the event loop a second, all together, that connections which have sent a frame
#: refused as bad input may take (``fanout.buckets.Throttle``): the loop also hands Spark's
#: batches to the relays, and a crowd sending garbage must not slow that down. Connections
#: that never sent a bad frame are not counted against it.
SUSPECT_SHARE = 0.2
SUSPECT_BURST = 0.2
#: The least a suspect's frame is charged, in seconds: what the timing around the session
#: does not see (reading and unframing it in websockets, the system calls) is not free.
SUSPECT_FRAME_COST = 20e-6
#: The share of a relay's queue a write passed on at once may fill (``publisher.passing``):
#: past it the write is not passed (counted), since the micro-batch carries it anyway, and a
#: relay whose queue fills with batches is closed as a slow consumer.
WRITTEN_SHARE = 0.5
#: Error codes that are not the sender's fault (a connection answered with one stays trusted).
NOT_BAD_INPUT = frozenset({"unavailable", "log_gap", "resync", "closed"})


class ControlPlane:
    """Serves relays and readers; delivers batches handed over by the pipeline."""

    def __init__(
        self,
        datasets: Datasets,
        registry: Registry,
        queue_limit: int = 64,
        hello_timeout: float = HELLO_TIMEOUT,
        *,
        auth: AuthConfig | None = None,
        ssl: SSLContext | None = None,
        not_ready: Callable[[], str | None] = lambda: None,
        collectors: Sequence[Collector] = (),
    ) -> None:
        """Args:
        datasets, registry: what is served, and who holds which primitives.
        queue_limit: frames queued per connection before it is closed as a slow consumer.
        hello_timeout: seconds a new connection may take to send its ``Hello``.
        auth: how tokens are checked (``fanout.auth``); None: every connection is served.
        ssl: serve ``wss://`` with this TLS context; None: plain ``ws://``.
        not_ready: why the publisher cannot serve relays yet, or None (``GET /readyz``).
        collectors: more figures for ``GET /metrics`` (the driver JVM's, ``metrics.process_of``).
        """
        self.datasets = datasets
        self.registry = registry
        self.queue_limit = queue_limit
        self.hello_timeout = hello_timeout
        self._verifier = None if auth is None else Verifier(auth)
        self._ssl = ssl
        self._not_ready = not_ready
        self._collectors = collectors
        self.port: int | None = None
        #: relay id -> its connection, for the batches the pipeline hands over.
        self._relays: dict[int, _Peer] = {}
        #: Datasets whose streaming query stopped (``announce``), told to relays as they come.
        self._stopped: dict[str, DatasetState] = {}
        #: Every open connection (relays, readers, producers), and what closed ones wrote.
        self._open: set[Outbound] = set()
        self._closed_sent = (0, 0)
        self._slow_closed = 0
        self._suspects = Throttle(SUSPECT_SHARE, SUSPECT_BURST)
        self._suspect_waits = 0
        self._frames_received = 0
        self._passed = 0
        self._passed_dropped = 0
        self._choices: dict[str, Choice] = {}  # per dataset, for passing writes on
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
            process_request=metrics.route(self.samples, self._not_ready, self._collectors),
            ssl=self._ssl,
        ) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            scheme = "ws" if self._ssl is None else "wss"
            log.info("control plane listening on %s://%s:%d", scheme, host, self.port)
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
            metrics.build_info("publisher"),
            metrics.Sample("publisher_relays", "gauge", "Relays connected now.", len(self._relays)),
            metrics.Sample(
                "publisher_frames_sent",
                "counter",
                "Frames written to every connection (relays, readers, producers).",
                frames + sum(outbound.sent for outbound in self._open),
            ),
            metrics.Sample(
                "publisher_frames_received",
                "counter",
                "Frames read from every connection, well-formed or not.",
                self._frames_received,
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
            metrics.Sample(
                "publisher_writes_passed",
                "counter",
                "Durable writes passed at once to another relay, before their micro-batch.",
                self._passed,
            ),
            metrics.Sample(
                "publisher_writes_not_passed",
                "counter",
                "Writes not passed to a relay whose queue was half full (the batch carries them).",
                self._passed_dropped,
            ),
            metrics.Sample(
                "publisher_suspect_reads_delayed",
                "counter",
                "Times a connection that sent bad input waited for the loop time it may take.",
                self._suspect_waits,
            ),
        ]
        for relay, peer in self._relays.items():
            outbound = peer.outbound
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
        encoded = {relay: Delivery.of(batch) for relay, batch in batches.items()}
        self._loop.call_soon_threadsafe(self._offer_all, encoded)

    def announce(self, state: DatasetState) -> None:
        """Tell every relay, and each relay connecting while it lasts, that a dataset's
        streaming query stopped or runs again (they stay connected)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._announce, state)

    def _announce(self, state: DatasetState) -> None:
        if state.running:
            self._stopped.pop(state.dataset, None)
        else:
            self._stopped[state.dataset] = state
        data = codec.encode(state)
        for peer in self._relays.values():
            peer.outbound.offer(data)

    def _offer_all(self, deliveries: dict[int, Delivery]) -> None:
        for relay, delivery in deliveries.items():
            peer = self._relays.get(relay)
            if peer is not None:
                self._act(peer.session.offer(delivery), peer)

    # -- one connection ---------------------------------------------------------------------

    async def _handle(self, websocket: ServerConnection) -> None:
        session = PublisherSession(
            self.registry, self.datasets.check, self.datasets.infos, self._authenticate
        )
        outbound = Outbound(websocket, self.queue_limit)
        self._open.add(outbound)
        refused = False  # the session ended the connection (bad input): close it here
        expired = False  # its token expired (``fanout.expiry``): close it here
        try:
            async with outbound:  # leaving it, its last frames go out
                try:
                    # The connection owns the work its requests started (a replay, reads,
                    # publishes): when it ends, what is still running is cancelled and waited for.
                    async with asyncio.TaskGroup() as group:
                        peer = _Peer(session, outbound, _Work(group))
                        try:
                            async with asyncio.timeout(self.hello_timeout) as handshake:
                                peer.handshake = handshake
                                async for message in websocket:
                                    started = time.perf_counter()
                                    self._frames_received += 1
                                    if not self._act(session.receive(message), peer):
                                        refused = True
                                        break
                                    if peer.suspect:
                                        await self._pay(time.perf_counter() - started)
                        except TimeoutError:
                            # After the hello: its token expired.
                            if isinstance(session.grant, Grant):
                                outbound.offer(codec.encode(expiry.expired()))
                                expired = True
                            else:
                                self._act(session.hello_overdue(self.hello_timeout), peer)
                        except ConnectionClosed:
                            pass  # the peer went away; its primitives are released below
                        finally:
                            peer.work.cancel()
                finally:
                    if session.relay is not None:
                        self._relays.pop(session.relay, None)
                        log.info("relay %d disconnected", session.relay)
                    session.close()
        finally:
            self._open.discard(outbound)
            frames, sent = self._closed_sent
            self._closed_sent = (frames + outbound.sent, sent + outbound.sent_bytes)
            self._slow_closed += outbound.closed_for is not None
            if refused or expired:
                await refuse(
                    websocket, expiry.EXPIRED if expired else "refused: see the error frame"
                )

    async def _pay(self, cost: float) -> None:
        """Charge a suspect connection's frame to the shared budget; wait if it is overdrawn
        (a second at most at a time, so that a stopping publisher does not wait for it)."""
        charged = max(cost, SUSPECT_FRAME_COST)
        wait = min(self._suspects.take(time.monotonic(), charged), 1.0)
        if wait > 0:
            self._suspect_waits += 1
            await asyncio.sleep(wait)

    def _authenticate(self, hello: Hello) -> Grant | None:
        """What a ``Hello``'s token grants (None without authentication).

        Raises:
            Unauthorized: no valid token granting the ``Hello``'s role.
        """
        return None if self._verifier is None else self._verifier.verify(hello.token, hello.role)

    def _act(self, actions: list[Action], peer: _Peer) -> bool:
        """Carry out what the session decided; returns False once the connection is to end."""
        outbound = peer.outbound
        for action in actions:
            match action:
                case Send(frame=frame):
                    if isinstance(frame, Error) and frame.code not in NOT_BAD_INPUT:
                        peer.suspect = True
                    outbound.offer(codec.encode(frame))
                case Forward(data=data):
                    outbound.offer(data)
                case Welcomed(relay=relay):
                    if peer.handshake is not None:
                        peer.handshake.reschedule(expiry.deadline(peer.session.grant))
                    if relay is not None:
                        self._relays[relay] = peer
                        log.info("relay %d (%s) connected", relay, peer.session.name)
                        for state in self._stopped.values():
                            outbound.offer(codec.encode(state))
                case Replay(resume=resume):
                    peer.work.start(self._replay(peer, resume))
                case Start(request=request):
                    logged = functools.partial(self._pass_on, peer.session.relay)
                    job = functools.partial(answer, self.datasets, request, outbound, logged)
                    peer.work.start(answered(request.req, job, outbound))
                case Close(reason=None):
                    return False
                case Close(reason=str() as reason):
                    outbound.close(reason)
        return True

    def _pass_on(
        self, origin: int | None, request: Publish, upserts: dict[str, Any], first: int, last: int
    ) -> None:
        """Pass a durable write at once to the other relays it may concern
        (``publisher.passing``), each whose queue has room (``WRITTEN_SHARE``). Its writer was
        answered already: a fault here is logged, and the micro-batch carries the write."""
        try:
            self._pass(origin, request, upserts, first, last)
        except Exception:
            log.exception(
                "write %d to %s was not passed on to relays", request.req, request.dataset
            )

    def _pass(
        self, origin: int | None, request: Publish, upserts: dict[str, Any], first: int, last: int
    ) -> None:
        info = next((i for i in self.datasets.infos() if i.name == request.dataset), None)
        if info is None or info.index not in LIVE_KINDS or not self._relays:
            return
        choice = self._choices.get(request.dataset)
        if choice is None or choice.version != self.registry.version:  # relays moved
            choice = self._choices[request.dataset] = Choice(self.registry.plan(request.dataset))
        live, deleting = self.registry.live(request.dataset), request.deletes.length > 0
        index = info.index_columns
        rows = touched(upserts, index) if info.index == "objects" else upserts
        relays = recipients(choice, live, origin, rows, deletes=deleting, index=index)
        if not relays:
            return
        written = Written(request.dataset, first, last, request.upserts, request.deletes)
        data = codec.encode(written)
        for relay in relays:
            peer = self._relays.get(relay)
            if peer is None:
                continue
            if peer.outbound.pending < self.queue_limit * WRITTEN_SHARE:
                peer.outbound.offer(data)
                self._passed += 1
            else:
                self._passed_dropped += 1

    async def _replay(self, peer: _Peer, resume: dict[str, tuple[int, int]]) -> None:
        """Replay what a reconnecting relay missed, then the live batches held back meanwhile
        (``publisher.protocol``, rule 3); put one frame at a time, paced by the relay's queue."""
        session, outbound = peer.session, peer.outbound
        for dataset, (epoch, seq) in resume.items():
            try:
                batches = await asyncio.to_thread(self.datasets.replay, dataset, epoch, seq)
            except FanoutError as exc:
                error = session.replay_failed(dataset, seq, str(exc))
                if error is not None:
                    await outbound.put(codec.encode(error))
                continue
            for batch in session.replayed(batches):
                await outbound.put(codec.encode(batch))
            log.info("relay %s: replayed %d batches of %s", session.relay, len(batches), dataset)
        # No await between the session's last answer and its going live: nothing slips between.
        while (data := session.next_held_back()) is not None:
            await outbound.put(data)


@dataclass
class _Peer:
    """One connection as the shell holds it: its session, its outbound queue, its tasks."""

    session: PublisherSession
    outbound: Outbound
    work: _Work
    handshake: asyncio.Timeout | None = None
    #: It has sent a frame refused as bad input: its frames draw on the shared budget.
    suspect: bool = False


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
