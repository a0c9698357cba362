"""The listener's writes: what the broker sends a connection in one turn of the event loop goes
out as one write (a burst's full reads each as they are read), in the broker's order, before a
close; a connection too slow to take it is closed. Links here are in memory (the unit is the
listener's buffering; ``test_listener`` has real clients on real sockets).

The oracle for order is the broker itself: the same bytes fed to a bare ``Broker`` give each
connection's packets in order, which the listener's links must have received whole, however
the chunks fall into turns.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.mqtt import packets as p
from fanout.mqtt.actions import Send
from fanout.mqtt.broker import Broker
from fanout.mqtt.encoding import encode
from fanout.mqtt.listener import READ_SIZE, Listener

TOPICS = ("a", "b", "c/d")


class MemoryLink:
    """A ``Link`` keeping its writes, and when it was finished or aborted; ``buffered`` bytes
    not sent until it is aborted (then, as a TCP link, it takes no more)."""

    def __init__(self, buffered: int = 0) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.pending = buffered
        self.aborted = False

    def write(self, data: bytes) -> None:
        if not self.aborted:
            self.writes.append(data)
            self.events.append("write")

    def buffered(self) -> int:
        return 0 if self.aborted else self.pending

    def finish(self) -> None:
        self.events.append("finish")

    def abort(self) -> None:
        self.aborted = True
        self.events.append("abort")

    def address(self) -> str:
        return "memory"


class Fed:
    """A connection's chunks, handed to ``Listener.serve`` one turn of the loop at a time
    (``None``: wait a turn); it stays open until ``stop``."""

    def __init__(self, chunks: list[bytes | None]) -> None:
        self.chunks = chunks
        self.fed = asyncio.Event()
        self.stop = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            if chunk is None:
                await asyncio.sleep(0)
            else:
                yield chunk
        self.fed.set()
        await self.stop.wait()


def subscriber(client_id: str, filters: tuple[str, ...], version: int = p.V311) -> bytes:
    connect = encode(p.Connect(client_id, version), version)
    return connect + encode(p.Subscribe(1, tuple((f, 0) for f in filters)), version)


async def serve(listener: Listener, feeds: list[tuple[MemoryLink, Fed]]) -> None:
    """Serve every feed in order of connection, then let the listener write, then close them."""
    tasks = []
    for link, fed in feeds:
        tasks.append(asyncio.create_task(listener.serve(link, aiter(fed))))
        await asyncio.sleep(0)
    for _, fed in feeds:
        await fed.fed.wait()
    for _ in range(3):
        await asyncio.sleep(0)
    for _, fed in feeds:
        fed.stop.set()
    await asyncio.gather(*tasks)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(TOPICS), min_size=1, max_size=30),
    st.lists(st.integers(1, 60), min_size=1, max_size=8),
    st.lists(st.booleans(), min_size=1, max_size=8),
)
def test_each_connection_gets_the_brokers_packets_in_order(
    topics: list[str], cuts: list[int], turns: list[bool]
) -> None:
    filters = [("a",), ("a", "b"), ("#",), ("c/+",)]
    subscribers = [subscriber(f"s{i}", f) for i, f in enumerate(filters)]
    stream = encode(p.Connect("pub", p.V311), p.V311) + b"".join(
        encode(p.Publish(t, t.encode() * i), p.V311) for i, t in enumerate(topics)
    )
    chunks: list[bytes | None] = []
    at = 0
    for i in range(len(stream)):  # cut the stream where the draws say, a turn between some
        if at >= len(stream):
            break
        size = cuts[i % len(cuts)]
        chunks.append(stream[at : at + size])
        if turns[i % len(turns)]:
            chunks.append(None)
        at += size

    expected: dict[int, bytes] = defaultdict(bytes)  # the oracle: a bare broker
    broker = Broker()
    for connection, data in enumerate([*subscribers, stream], 1):
        broker.opened(connection, 0.0)
        for action in broker.receive(connection, data, 0.0):
            if isinstance(action, Send):
                expected[action.connection] += action.data

    listener = Listener(Broker(), "127.0.0.1", 0, read_rate=0)
    links = [MemoryLink() for _ in range(len(subscribers) + 1)]
    feeds = [Fed([data]) for data in subscribers] + [Fed(chunks)]
    asyncio.run(serve(listener, list(zip(links, feeds, strict=True))))
    for connection, link in enumerate(links, 1):
        assert b"".join(link.writes) == expected[connection]
    sent = sum(len(data) for data in expected.values())
    assert listener.traffic.bytes_sent == sent


async def test_what_one_turn_sends_a_connection_is_one_write() -> None:
    listener = Listener(Broker(), "127.0.0.1", 0, read_rate=0)
    reader, publisher = MemoryLink(), MemoryLink()
    messages = b"".join(encode(p.Publish("a", bytes([i])), p.V311) for i in range(3))
    feeds = [
        (reader, Fed([subscriber("r", ("a",))])),
        (publisher, Fed([encode(p.Connect("pub", p.V311), p.V311), None, messages])),
    ]
    await serve(listener, feeds)
    assert len(reader.writes) == 2  # CONNACK and SUBACK; then the three messages
    assert reader.writes[1] == messages
    assert listener.traffic.messages_sent == 3
    assert listener.traffic.packets_sent == 2 + 3 + 1  # and the publisher's CONNACK


async def test_a_close_comes_after_what_was_sent_before_it() -> None:
    listener = Listener(Broker(), "127.0.0.1", 0, read_rate=0)
    link = MemoryLink()
    connect = encode(p.Connect("c", p.V5), p.V5)
    ping = encode(p.PingReq(), p.V5)
    await serve(listener, [(link, Fed([connect, None, ping + b"\x00\x00"]))])  # a bad packet
    assert link.events[:3] == ["write", "write", "finish"]
    pong, refusal = encode(p.PingResp(), p.V5), link.writes[1][2:]
    assert link.writes[1][:2] == pong
    assert refusal[0] >> 4 == 14  # a DISCONNECT saying why, then the close


async def test_a_connection_too_slow_is_closed_and_the_others_served() -> None:
    listener = Listener(Broker(), "127.0.0.1", 0, read_rate=0, max_buffered=1000)
    slow, quick, publisher = MemoryLink(buffered=1001), MemoryLink(), MemoryLink()
    message = encode(p.Publish("a", b"x"), p.V311)
    feeds = [
        (slow, Fed([subscriber("slow", ("a",))])),
        (quick, Fed([subscriber("quick", ("a",))])),
        (publisher, Fed([encode(p.Connect("pub", p.V311), p.V311), None, message])),
    ]
    await serve(listener, feeds)
    assert slow.events == ["write", "abort"]  # past max_buffered at its first write
    assert listener.slow_closed == 1
    assert quick.writes[-1] == message


async def test_a_burst_goes_out_as_it_is_read() -> None:
    """A publisher's reads that fill ``READ_SIZE`` follow one another with no turn of the loop
    between them: what each delivered is written before the next is read, not all of it at
    the burst's end; the last, smaller read goes out at the turn's end."""
    listener = Listener(Broker(), "127.0.0.1", 0, read_rate=0)
    reader, publisher = MemoryLink(), MemoryLink()
    message = encode(p.Publish("a", bytes(300)), p.V311)
    burst = message * (2 * READ_SIZE // len(message) + 1)
    written: list[bytes] = []  # to the reader before each read of the burst

    class Burst(Fed):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield encode(p.Connect("pub", p.V311), p.V311)
            await asyncio.sleep(0)
            for at in range(0, len(burst), READ_SIZE):
                written.append(b"".join(reader.writes[1:]))  # after CONNACK and SUBACK
                yield burst[at : at + READ_SIZE]
            self.fed.set()
            await self.stop.wait()

    await serve(listener, [(reader, Fed([subscriber("r", ("a",))])), (publisher, Burst([]))])
    whole = READ_SIZE // len(message)  # the messages the first read holds whole
    assert written == [b"", message * whole, message * (2 * READ_SIZE // len(message))]
    assert b"".join(reader.writes[1:]) == burst
