"""The mount's connections (``fanout.mount``, rule 5): a relay connection for reads, and for
writes the relay's (which forwards them) or a publisher's, each made anew when lost, all on one
asyncio loop on a thread of its own that the FUSE threads hand their network steps to."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from fanout.client.objects import Objects
from fanout.client.publisher import open_producer
from fanout.client.subscriber import connect
from fanout.errors import FanoutError

T = TypeVar("T")

#: Seconds a network step may take before the operation fails with EIO.
STEP_TIMEOUT = 30.0


class Unreachable(FanoutError):
    """The relay or the publisher cannot be reached now (the mount answers EIO)."""


class Link:
    """The mount's connections, on an asyncio loop of their own (rule 5).

    Args:
        relay: the relay's URL (reads).
        publisher: the publisher's URL (writes), or None to write through the relay.
        dataset: the objects dataset.
    """

    def __init__(self, relay: str, publisher: str | None, dataset: str) -> None:
        self.relay = relay
        self.publisher = publisher
        self.dataset = dataset
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="mount-link", daemon=True
        )
        self._thread.start()
        self._reads: contextlib.AsyncExitStack | None = None
        self._writes: contextlib.AsyncExitStack | None = None
        self._objects: Objects | None = None
        self._writer: Objects | None = None
        #: bumped at every reconnection to the relay: files of older ones resubscribe
        self.generation = 0

    def call(self, step: Coroutine[Any, Any, T], timeout: float = STEP_TIMEOUT) -> T:
        """Run ``step`` on the loop and wait for it (from a FUSE thread)."""
        return asyncio.run_coroutine_threadsafe(step, self.loop).result(timeout)

    async def reader(self) -> Objects:
        """The relay connection, made anew if it was lost.

        Raises:
            Unreachable: the relay cannot be reached now.
        """
        objects = self._objects
        subscriber = None if objects is None else objects.subscriber
        if objects is not None and subscriber is not None and subscriber.failure is None:
            return objects
        await self._close_reads()
        stack = contextlib.AsyncExitStack()
        try:
            subscriber = await asyncio.wait_for(
                stack.enter_async_context(connect(self.relay, name="fanout-mount")), 10
            )
        except (OSError, TimeoutError, FanoutError) as error:
            await stack.aclose()
            raise Unreachable(f"relay {self.relay}: {error}") from error
        self._reads, self.generation = stack, self.generation + 1
        self._objects = Objects(subscriber, None, self.dataset)
        return self._objects

    async def writer(self) -> Objects:
        """Where writes go: the publisher connection, made anew if it was lost, or without a
        publisher URL the relay's, which forwards each write to the publisher.

        Raises:
            Unreachable: the publisher (or the relay) cannot be reached now.
        """
        if self.publisher is None:
            return await self.reader()
        writer = self._writer
        producer = None if writer is None else writer.producer
        if writer is not None and producer is not None and producer.failure is None:
            return writer
        if self._writes is not None:
            await self._writes.aclose()
        stack = contextlib.AsyncExitStack()
        try:
            producer = await asyncio.wait_for(
                stack.enter_async_context(open_producer(self.publisher)), 10
            )
        except (OSError, TimeoutError, FanoutError) as error:
            await stack.aclose()
            raise Unreachable(f"publisher {self.publisher}: {error}") from error
        self._writes = stack
        self._writer = Objects(None, producer, self.dataset)
        return self._writer

    async def _close_reads(self) -> None:
        if self._reads is not None:
            with contextlib.suppress(Exception):
                await self._reads.aclose()
        self._reads, self._objects = None, None

    def close(self) -> None:
        """Close both connections and stop the loop."""

        async def close() -> None:
            await self._close_reads()
            if self._writes is not None:
                with contextlib.suppress(Exception):
                    await self._writes.aclose()

        with contextlib.suppress(Exception):
            self.call(close(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
