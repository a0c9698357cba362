"""A fanout subscriber connection over picows, for benchmarks whose clients must leave the cores
to the relay they measure (``bench/boxclients.py``, ``bench/relay.py``).

picows parses WebSocket frames in compiled code and hands each to a callback: no task, queue or
future per message. :class:`Connection` opens the WebSocket, says ``Hello``, reassembles
fragmented messages and records why the connection ended; a subclass says what to do with each
message after the ``Welcome`` (:meth:`Connection.on_message`)::

    class Counting(Connection):
        def on_message(self, message, now):
            self.count += 1

    connection = Counting(url)
    await connection.open()
    connection.send(codec.encode(Subscribe(...)))
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from fanout.testing import frames
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Hello

#: Seconds a connection's opening handshake and Welcome may take: a loaded relay takes long to
#: accept thousands of connections, and a trial measures pushes, not connecting.
HANDSHAKE = 60.0
#: Offset of ``tcpi_bytes_received`` in Linux's ``struct tcp_info`` (4.1 and later).
TCPI_BYTES_RECEIVED = 128
_DATA = (WSMsgType.BINARY, WSMsgType.TEXT, WSMsgType.CONTINUATION)


class Connection(WSListener):
    """One subscriber connection; ``closed`` says why it ended (empty while it is open)."""

    def __init__(self, url: str, name: str = "bench") -> None:
        self.url, self.name = url, name
        self.closed = ""
        self.close_code: int | None = None
        self.transport: WSTransport | None = None
        self.welcomed = asyncio.get_running_loop().create_future()
        self._parts = bytearray()

    async def open(self) -> None:
        """Connect, say ``Hello`` and wait for the relay's ``Welcome``."""
        await ws_connect(
            lambda: self, self.url, max_frame_size=1 << 30, websocket_handshake_timeout=HANDSHAKE
        )
        await asyncio.wait_for(self.welcomed, HANDSHAKE)

    def on_message(self, message: bytes | memoryview, now: float) -> None:
        """A whole message after the ``Welcome``, received at ``now`` (``time.time()``); an
        ``error`` frame is the subclass's to notice (:meth:`refused`), as it decodes anyway."""
        raise NotImplementedError

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        self.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber", self.name)))

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        now = time.time()
        kind = frame.msg_type
        if kind == WSMsgType.CLOSE:
            self.close_code = frame.get_close_code().value
            self.fail(f"closed by the relay: {self.close_code} {frame.get_close_message()!r}")
            transport.send_close(frame.get_close_code())
            transport.disconnect()
        elif kind in _DATA and (self._parts or not frame.fin):  # a fragmented message
            self._parts += frame.get_payload_as_memoryview()
            if frame.fin:
                self._deliver(bytes(self._parts), now)
                self._parts.clear()
        elif kind in _DATA:
            self._deliver(frame.get_payload_as_memoryview(), now)

    def _deliver(self, message: bytes | memoryview, now: float) -> None:
        if not self.welcomed.done():
            self.welcomed.set_result(None)
        else:
            try:
                self.on_message(message, now)
            except Exception as exc:  # the connection is counted lost, and says why
                self.fail(f"{type(exc).__name__}: {exc}")

    def refused(self, message: bytes | memoryview) -> None:
        """``message`` is an ``error`` frame: the connection failed."""
        self.fail(f"error frame: {frames.whole(message)}")

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self.close_code is None:
            self.close_code = 1006
        self.fail("connection lost")

    def fail(self, why: str) -> None:
        """Record why the connection ended (the first reason)."""
        if not self.closed:
            self.closed = why
        if not self.welcomed.done():
            self.welcomed.set_exception(ConnectionError(why))

    def send(self, data: bytes) -> None:
        """Send one binary message, if the connection is open."""
        if self.transport is not None and not self.transport.is_disconnected:
            self.transport.send(WSMsgType.BINARY, data)

    def bytes_received(self) -> int:
        """Bytes this connection's socket received so far (TCP_INFO: frames with headers)."""
        if self.transport is None:
            return 0
        sock: socket.socket = self.transport.underlying_transport.get_extra_info("socket")
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        return int(struct.unpack_from("<Q", info, TCPI_BYTES_RECEIVED)[0])

    def close(self) -> None:
        """Close the connection (WebSocket close 1000)."""
        if self.transport is not None and not self.transport.is_disconnected:
            self.transport.send_close(WSCloseCode.OK)
            self.transport.disconnect()
