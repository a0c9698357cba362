"""The writer: batches written on a thread, in order, each swapped in as soon as it is written."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest

from fanout.errors import ProtocolError
from fanout.relay.core.relaycore import RelayCore
from fanout.relay.core.sends import Send
from fanout.relay.data.intake import Intake
from fanout.relay.shell.writer import RECORDED, Writer
from fanout.testing import batches
from fanout.testing.catalog import AGENTS
from fanout.wire.messages import Batch, Catalog


def batch(
    seq: int, rows: int = 1000, dataset: str = "agents", bad: bool = False, tick_time: float = 0.0
) -> Batch:
    ids = np.arange(rows, dtype=np.int64)
    columns = {"id": ids, "x": ids * 1.0 + seq}
    if not bad:
        columns["y"] = ids * 2.0
    return batches.batch(seq, columns, dataset=dataset, tick_time=tick_time)


class Pump:
    """Stands in for the relay's pump: advances the writer whenever it is woken.

    Writes on the writer thread wait for ``gate`` (open unless a test closes it), so that a
    test can hold batches queued behind a write however fast the machine writes them.
    """

    def __init__(self, decoded: Callable[[Intake], list[Send]] | None = None) -> None:
        self.core = RelayCore()
        self.core.on_catalog(Catalog([AGENTS]))
        self.gate = threading.Event()
        self.gate.set()
        admit = self.core.admit

        def gated(batch: Batch) -> Intake | None:
            intake = admit(batch)
            if intake is not None:
                write = intake.write

                def waiting(*told: Callable[[Intake], None]) -> None:
                    assert self.gate.wait(10), "the test never opened the gate"
                    write(*told)

                intake.write = waiting  # type: ignore[method-assign]
            return intake

        self.core.admit = gated  # type: ignore[method-assign]
        self.swapped: list[int] = []  # seqs swapped in, in order
        self.failures: list[BaseException] = []
        self.sent: list[Send] = []
        self.woken = asyncio.Event()
        end_epoch = self.core.end_epoch

        def recorded() -> list[Send]:
            before = self.core.datasets["agents"].buffer.generation
            sends = end_epoch()
            buffer = self.core.datasets["agents"].buffer
            if buffer.generation != before and buffer.stamp is not None:
                self.swapped.append(buffer.stamp.seq)
            return sends

        self.core.end_epoch = recorded  # type: ignore[method-assign]
        self.writer = Writer(
            self.core, self.sent.extend, self.woken.set, self.failures.append, decoded
        )

    async def run(self) -> None:
        while True:
            await self.woken.wait()
            self.woken.clear()
            self.writer.advance()


@contextlib.asynccontextmanager
async def pumping(
    advancing: bool = True, decoded: Callable[[Intake], list[Send]] | None = None
) -> AsyncIterator[Pump]:
    """A pump, advancing the writer when woken (``advancing``) or only when the test does."""
    pump = Pump(decoded)
    task = asyncio.create_task(pump.run()) if advancing else None
    try:
        yield pump
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await pump.writer.stop()
        pump.writer.shutdown()


async def test_batches_are_swapped_in_one_by_one_in_order() -> None:
    async with pumping() as pump:
        pump.gate.clear()
        for seq in range(5):
            pump.writer.put(batch(seq, rows=20_000))
        assert pump.writer.queued == 4  # one is being written
        pump.gate.set()
        await asyncio.wait_for(pump.writer.drain(), 10)
        assert pump.swapped == [0, 1, 2, 3, 4]  # every tick was swapped in: none skipped
        state = pump.core.datasets["agents"]
        assert state.seq == 4 and not state.busy
        assert state.table.column("x")[:3].tolist() == [4.0, 5.0, 6.0]


async def test_a_written_batch_is_swapped_in_by_advance_not_before() -> None:
    async with pumping(advancing=False) as pump:  # nobody advances it but the test
        pump.writer.put(batch(0))
        assert pump.core.datasets["agents"].busy
        await asyncio.wait_for(pump.woken.wait(), 10)
        assert pump.writer.written()
        assert pump.swapped == []  # written to the inert buffer, not visible yet
        pump.writer.advance()
        assert pump.swapped == [0] and not pump.writer.written()
        assert not pump.core.datasets["agents"].busy


async def test_room_holds_the_reader_back_until_the_queue_shrinks() -> None:
    async with pumping() as pump:
        pump.gate.clear()
        for seq in range(4):
            pump.writer.put(batch(seq, rows=50_000))
        assert pump.writer.queued == 3
        pump.gate.set()
        await asyncio.wait_for(pump.writer.room(1), 10)
        assert pump.writer.queued <= 1
        assert pump.swapped[:2] == [0, 1]


async def test_a_malformed_batch_fails_drops_what_follows_and_is_raised() -> None:
    async with pumping() as pump:
        pump.writer.put(batch(0))
        pump.writer.put(batch(1, bad=True))  # a column missing: refused before any write
        pump.writer.put(batch(2))
        with pytest.raises(ProtocolError, match="upsert columns"):
            await asyncio.wait_for(pump.writer.drain(), 10)
        assert pump.swapped == [0]  # batch 2 was dropped, not written
        assert len(pump.failures) == 1 and isinstance(pump.failures[0], ProtocolError)
        state = pump.core.datasets["agents"]
        assert state.seq == 0 and not state.busy
        with pytest.raises(ProtocolError):
            pump.writer.put(batch(2))  # nothing more is taken until the link starts over
        await pump.writer.stop()
        assert pump.writer.failure is None
        pump.writer.put(batch(1))  # the reconnected link resumes after seq 0
        await asyncio.wait_for(pump.writer.drain(), 10)
        assert pump.swapped == [0, 1]


async def test_a_batch_for_an_unknown_dataset_fails_without_a_write() -> None:
    async with pumping() as pump:
        pump.writer.put(batch(0, dataset="nope"))
        with pytest.raises(ProtocolError, match="unknown dataset 'nope'"):
            await asyncio.wait_for(pump.writer.room(0), 10)
        assert pump.failures and pump.swapped == []


async def test_a_replayed_batch_is_skipped() -> None:
    async with pumping() as pump:
        pump.writer.put(batch(0))
        pump.writer.put(batch(1))
        await asyncio.wait_for(pump.writer.drain(), 10)
        pump.writer.put(batch(0))  # Spark re-ran a micro-batch
        await asyncio.wait_for(pump.writer.drain(), 10)
        assert pump.swapped == [0, 1]
        assert pump.core.datasets["agents"].seq == 1


async def test_stop_waits_for_the_write_in_flight_and_drops_the_queue() -> None:
    async with pumping(advancing=False) as pump:
        pump.gate.clear()
        pump.writer.put(batch(0, rows=200_000))
        pump.writer.put(batch(1))
        pump.gate.set()
        await pump.writer.stop()  # the thread owns the buffer until its write ends
        state = pump.core.datasets["agents"]
        assert not state.busy and state.seq == 0
        assert pump.swapped == [0] and pump.writer.queued == 0


async def test_stop_while_the_pump_swaps_the_write_in_flight_in_does_not_swap_it_twice() -> None:
    # The upstream link stops the writer when its connection ends; while stop waits for the
    # write in flight, the pump may swap that write in itself (it used to crash the relay).
    async with pumping(advancing=True) as pump:
        pump.gate.clear()
        pump.writer.put(batch(0, rows=20_000))
        stopping = asyncio.create_task(pump.writer.stop())
        await asyncio.sleep(0.05)  # stop waits for the write
        pump.gate.set()
        await asyncio.wait_for(stopping, 10)
        assert pump.swapped == [0] and not pump.core.datasets["agents"].busy


async def test_each_batch_s_write_wait_and_tick_age_are_measured() -> None:
    async with pumping() as pump:
        pump.gate.clear()
        ticked = time.time() - 2.0
        for seq in range(3):
            pump.writer.put(batch(seq, tick_time=ticked))
        await asyncio.sleep(0.05)  # the first write waits at the gate meanwhile
        pump.gate.set()
        await asyncio.wait_for(pump.writer.drain(), 10)
        write, waited, aged = pump.writer.histograms
        assert (write.count, waited.count, aged.count) == (3, 3, 3)
        # waiting includes writing, and the first batch waited at the gate
        assert waited.total >= write.total and waited.total >= 0.05
        assert 3 * 2.0 <= aged.total < 3 * 60.0  # ticks 2 s old (the publisher's clock)


async def test_the_last_batches_wall_clock_times_are_kept_in_order() -> None:
    async with pumping() as pump:
        pump.gate.clear()
        before = time.time()
        for seq in range(3):
            pump.writer.put(batch(seq, tick_time=before - 2.0))
        await asyncio.sleep(0.05)  # the first write waits at the gate meanwhile
        pump.gate.set()
        await asyncio.wait_for(pump.writer.drain(), 10)
        timings = list(pump.writer.timings)
        assert [(t.dataset, t.seq, t.tick, t.tick_time) for t in timings] == [
            ("agents", seq, seq, before - 2.0) for seq in range(3)
        ]
        for timing in timings:
            assert before <= timing.read <= timing.written <= timing.swapped <= time.time()
        assert timings[0].written - timings[0].read >= 0.05  # it waited at the gate
        # Each batch is written only after the one before it is swapped in (rule 1).
        assert timings[0].swapped <= timings[1].written <= timings[1].swapped <= timings[2].written
        for seq in range(3, 3 + RECORDED):
            pump.writer.put(batch(seq, rows=1))
        await asyncio.wait_for(pump.writer.drain(), 30)
        assert len(pump.writer.timings) == RECORDED and pump.writer.timings[-1].seq == RECORDED + 2


async def test_each_batch_is_told_decoded_once_on_the_loop_in_order_and_its_sends_go() -> None:
    """``decoded`` (the relays below's early forwarding) hears of each batch once it is decoded,
    on the event loop, in order, with its rows; what it returns is dispatched."""
    loop_thread = threading.current_thread()
    told: list[tuple[int, int, bool]] = []

    def decoded(intake: Intake) -> list[Send]:
        rows = len(intake.upserts["id"])
        told.append((intake.batch.seq, rows, threading.current_thread() is loop_thread))
        return [Send(intake.batch.seq, intake.batch)]

    async with pumping(decoded=decoded) as pump:
        for seq in range(4):
            pump.writer.put(batch(seq, rows=5_000))
        await asyncio.wait_for(pump.writer.drain(), 10)
        assert told == [(seq, 5_000, True) for seq in range(4)]
        assert [send.to for send in pump.sent] == [0, 1, 2, 3]
        assert pump.swapped == [0, 1, 2, 3]
