"""Hostile peers for fuzzing and crowd tests: mutated frames, and crowds of idle and misbehaving
connections run in a process of their own (so the process that measures, say a test's
publisher and its good subscriber, keeps its event loop to itself).

What counts as a correct answer to bad input (``Tally``): an ``Error`` frame with a code, or a
clean close (1000 normal, 1008 policy: too many bad frames in a row, 1009 a frame over the size
limit). A close with any other code — 1011 above all, a handler that crashed — is a violation.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import msgspec
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from fanout.testing.frames import head
from fanout.views import Box, Sphere
from fanout.views.objects import parse as path
from fanout.views.sql import parse as sql
from fanout.views.topic import parse as topic
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Curious,
    Hello,
    Publish,
    ReadState,
    Release,
    Subscribe,
    Transform,
    Unsubscribe,
)

#: Valid frames of every direction, the seeds that mutations start from.
VALID = [
    codec.encode(frame)
    for frame in (
        Hello(version=PROTOCOL_VERSION, role="subscriber", name="fuzz"),
        Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=5.0, priority=2),
        Subscribe(2, "agents", Sphere((1, 2, 3), 4.0), transform=Transform(precision="float32")),
        Subscribe(3, "orders", sql("SELECT id, amount FROM orders WHERE amount > 10")),
        Subscribe(4, "sensors", topic("a/+/c"), mode="every"),
        Subscribe(5, "objects", path("/cars/.all?f=rpm>4000")),
        Unsubscribe(3),
        Acquire(7, "agents", Box((0, 0), (1, 1))),
        Release(7),
        Curious(9, "agents", 1, 2, 5),
        ReadState(11, "agents", Box((0, 0), (1, 1))),
        Publish(12, "sensors", encode_columns({"topic": np.array(["a"], dtype=object)})),
        Batch(
            "agents",
            1,
            2,
            3,
            0.5,
            encode_columns({"id": np.arange(3), "x": np.ones(3), "y": np.zeros(3)}),
            encode_columns({"id": np.arange(2)}),
            [1],
        ),
    )
]
HELLO = VALID[0]
#: Close codes that answer bad input correctly.
CLEAN_CLOSES = frozenset({1000, 1008, 1009})


def mutated(rng: random.Random) -> bytes | str:
    """A hostile message: a valid frame with a few bytes edited, raw bytes, or text."""
    roll = rng.random()
    if roll < 0.1:
        return "".join(rng.choice("{}[]\"':,abc\x00é") for _ in range(rng.randint(0, 40)))
    if roll < 0.25:
        return rng.randbytes(rng.randint(0, 300))
    data = bytearray(rng.choice(VALID))
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data))
        match rng.randrange(3):
            case 0:
                data[at] = rng.getrandbits(8)
            case 1:
                del data[at]
            case _:
                data.insert(at, rng.getrandbits(8))
    return bytes(data)


@dataclass
class Tally:
    """What hostile connections sent and were answered.

    Attributes:
        frames: messages sent.
        connections: connections opened (each ``Hello``-ed or not).
        refused_to_connect: connections the server did not take (timeout, refused handshake).
        errors: ``Error`` frames received, by code.
        closes: connections closed by the server, by close code.
        violations: what is not a correct answer, described (at most 20 kept).
        violation_count: how many there were.
    """

    frames: int = 0
    connections: int = 0
    refused_to_connect: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    closes: Counter[int] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0

    def violation(self, what: str) -> None:
        self.violation_count += 1
        if len(self.violations) < 20:
            self.violations.append(what)

    def closed(self, closed: ConnectionClosed) -> None:
        frame = closed.rcvd or closed.sent
        code = frame.code if frame is not None else 1006
        self.closes[code] += 1
        if frame is not None and code not in CLEAN_CLOSES:
            self.violation(f"closed with {code} {frame.reason!r}")

    def answer(self, data: bytes | str) -> None:
        if isinstance(data, str):
            self.violation(f"a text frame from the server: {data[:80]!r}")
            return
        try:
            frame = head(data)  # any frame of either direction: a publisher's too
        except msgspec.DecodeError as exc:  # the server's frames must decode: a finding
            self.violation(f"an undecodable answer ({exc})")
            return
        if frame.type == "error":
            if not frame.code:
                self.violation(f"an error without a code: {frame.message!r}")
            self.errors[frame.code] += 1

    def merge(self, other: Tally) -> None:
        self.frames += other.frames
        self.connections += other.connections
        self.refused_to_connect += other.refused_to_connect
        self.errors.update(other.errors)
        self.closes.update(other.closes)
        self.violation_count += other.violation_count
        self.violations = (self.violations + other.violations)[:20]


async def _open(url: str, greet: bool | bytes, tally: Tally) -> ClientConnection | None:
    """A connection to ``url``, greeted with ``HELLO`` (or the ``Hello`` frame given), or
    None if the server did not take it."""
    try:
        websocket = await connect(url, max_size=None, open_timeout=60, ping_interval=None)
        if greet:
            await websocket.send(HELLO if greet is True else greet)
            tally.answer(await asyncio.wait_for(websocket.recv(), 60))  # Welcome
    except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed):
        tally.refused_to_connect += 1
        return None
    tally.connections += 1
    return websocket


async def _drain(websocket: ClientConnection, tally: Tally) -> None:
    """Take every answer as it comes (a hostile peer that reads is not a slow consumer)."""
    with contextlib.suppress(ConnectionClosed):
        async for data in websocket:
            tally.answer(data)


async def fuzz(url: str, seed: int, frames: int, greet: bool | bytes, tally: Tally) -> None:
    """Send ``frames`` mutated messages over one connection after another (a new one each
    time the server closes one), counting answers and closes in ``tally``.

    Args:
        greet: False to send no ``Hello`` first, True for a subscriber's, or the ``Hello``
            frame to send (another role's).
    """
    rng = random.Random(seed)
    left = frames
    while left > 0:
        websocket = await _open(url, greet, tally)
        if websocket is None:
            await asyncio.sleep(0.1)
            continue
        async with asyncio.TaskGroup() as reading:  # left once the answers end too
            reading.create_task(_drain(websocket, tally))
            try:
                while left > 0:
                    await websocket.send(mutated(rng))
                    tally.frames += 1
                    left -= 1
                    if left % 8 == 0:
                        await asyncio.sleep(0)  # let the answers in
                await websocket.close()
            except ConnectionClosed as closed:
                tally.closed(closed)


async def misbehave(websocket: ClientConnection, kind: int, until: float, tally: Tally) -> None:
    """One misbehaving connection's conduct until loop time ``until`` or its close.

    Kinds: 0 bad frames in a row; 1 one frame over the relay's size limit; 2 a flood of view
    changes; 3 a flood of subscriptions past the connection's limit.
    """
    async with asyncio.TaskGroup() as reading:  # left once the answers end too
        reading.create_task(_drain(websocket, tally))
        await _conduct(websocket, kind, until, tally)


async def _conduct(websocket: ClientConnection, kind: int, until: float, tally: Tally) -> None:
    """What ``misbehave`` sends, while its answers are read beside it."""
    loop = asyncio.get_running_loop()
    step = 0
    try:
        while loop.time() < until:
            step += 1
            match kind:
                case 0:  # four a step: the relay closes after 16 in a row, within a second
                    for _ in range(4):
                        await websocket.send(b"\xc1not msgpack")
                case 1:
                    await websocket.send(bytes((1 << 20) + 1))
                case 2:
                    for shift in range(6):
                        box = Box((shift, 0), (shift + 5, 5))
                        await websocket.send(codec.encode(Subscribe(1, "agents", box)))
                case _:
                    await websocket.send(
                        codec.encode(Subscribe(step, "agents", Box((0, 0), (1, 1))))
                    )
            tally.frames += 1
            await asyncio.sleep(0.25)
        if kind == 0:
            # The relay closes it after 16 bad frames in a row; a busy relay may read the last
            # of them after ``until``: wait for its close rather than close first.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(websocket.wait_closed(), 30)
            if websocket.protocol.close_rcvd is not None:  # closed by the relay: as it said
                raise websocket.protocol.close_exc
        await websocket.close()
    except ConnectionClosed as closed:
        tally.closed(closed)


@dataclass(frozen=True)
class CrowdPlan:
    """A crowd: ``idle`` connections (half greeted) and ``misbehaving`` ones (greeted, of the
    ``kinds`` of ``misbehave`` in turn), acting for ``seconds`` once all are connected."""

    url: str
    idle: int
    misbehaving: int
    seconds: float
    kinds: tuple[int, ...] = (0, 1, 2, 3)


async def _crowd(plan: CrowdPlan, pipe: Connection) -> Tally:
    tally = Tally()
    total = plan.idle + plan.misbehaving
    crowd: list[ClientConnection] = []
    for start in range(0, total, 100):  # in waves of 100
        wave = range(start, min(start + 100, total))
        made = await asyncio.gather(
            *(_open(plan.url, n >= plan.idle or n % 2 == 1, tally) for n in wave)
        )
        crowd += [websocket for websocket in made if websocket is not None]
    idle = crowd[: min(plan.idle, len(crowd))]
    pipe.send(("connected", len(crowd)))
    until = asyncio.get_running_loop().time() + plan.seconds
    await asyncio.gather(
        *(
            misbehave(ws, plan.kinds[n % len(plan.kinds)], until, tally)
            for n, ws in enumerate(crowd[len(idle) :])
        )
    )
    for websocket in idle:
        await websocket.close()
    return tally


@dataclass(frozen=True)
class FuzzPlan:
    """Fuzzing from one process: ``connections`` at once, each sending ``frames`` messages,
    the n-th to ``targets[n % len(targets)]``, a (url, greeting) pair (see ``fuzz``)."""

    targets: tuple[tuple[str, bool | bytes], ...]
    connections: int
    frames: int
    seed: int


async def _fuzz(plan: FuzzPlan, pipe: Connection) -> Tally:
    tally = Tally()
    jobs = []
    for n in range(plan.connections):
        url, greet = plan.targets[n % len(plan.targets)]
        jobs.append(fuzz(url, plan.seed * 100_003 + n, plan.frames, greet, tally))
    await asyncio.gather(*jobs)
    return tally


def _main(plan: CrowdPlan | FuzzPlan, pipe: Connection, nice: int) -> None:
    os.nice(nice)
    try:
        if isinstance(plan, CrowdPlan):
            tally = asyncio.run(_crowd(plan, pipe))
        else:
            tally = asyncio.run(_fuzz(plan, pipe))
    except BaseException as exc:
        pipe.send(("failed", repr(exc)))
        raise
    pipe.send(("done", tally))


class HostileProcess:
    """A crowd (``CrowdPlan``) or a fuzzer (``FuzzPlan``) in a process of its own.

    Args:
        plan: what it does.
        nice: added to its scheduling niceness (``os.nice``): 19 lets the servers under attack
            have the CPU first, as they would if the attackers ran on machines of their own;
            the servers' own work on the attack (reading, refusing, closing) is still theirs.
    """

    def __init__(self, plan: CrowdPlan | FuzzPlan, nice: int = 0) -> None:
        context = mp.get_context("spawn")
        self._pipe, theirs = context.Pipe()
        self.process = context.Process(target=_main, args=(plan, theirs, nice), name="hostile")
        self.process.start()
        theirs.close()

    def _next(self, timeout: float) -> tuple[str, object]:
        if not self._pipe.poll(timeout):
            raise TimeoutError(f"the hostile process said nothing within {timeout:g} s")
        kind, value = self._pipe.recv()
        if kind == "failed":
            raise RuntimeError(f"the hostile process failed: {value}")
        return kind, value

    def connected(self, timeout: float = 180.0) -> int:
        """Wait until a crowd is connected; the connections it holds."""
        kind, value = self._next(timeout)
        assert kind == "connected" and isinstance(value, int), (kind, value)
        return value

    def done(self, timeout: float = 180.0) -> Tally:
        """Wait until it has acted and closed; what it sent and was answered."""
        kind, tally = self._next(timeout)
        assert kind == "done" and isinstance(tally, Tally), (kind, tally)
        self.process.join(30)
        return tally

    def stop(self) -> None:
        """Kill the process if it still runs."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self._pipe.close()
