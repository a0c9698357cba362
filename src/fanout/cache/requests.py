"""A snoopy cache's requests to the connector (``cache.client`` rule 1): ``LOAD`` and label
queries, sent again every ``LOAD_RETRY`` seconds until answered or ``load_wait`` passed.

Replies are not read here: they arrive as messages the cache snoops on the objects' subjects,
and the cache tells this module of each one (``note``) and of every message (``wake``), so a
request waits on what the cache took, in whatever order it came.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Awaitable, Callable

import msgspec
import nats
from nats.aio.client import Client

from fanout.cache.catalog import LoadTimeout, UnknownType
from fanout.cache.core import Ref
from fanout.wire.bus import LoadRequest, QueryReply, QueryRequest, load_subject, query_subject

#: Seconds between sending a ``LOAD`` again that got no reply.
LOAD_RETRY = 1.0


class Requests:
    """The ``LOAD``s and queries of one cache in flight, by request id."""

    def __init__(self, nc: Client, domain: str, load_wait: float, sent: Callable[[], None]) -> None:
        self.nc = nc
        self.domain = domain
        self.load_wait = load_wait
        self._sent = sent
        #: request id -> refs whose reply has not come yet (own loads).
        self._answers: dict[str, set[Ref]] = {}
        #: query request id -> replies seen.
        self._queried: dict[str, int] = {}
        self._arrived = asyncio.Event()
        self._ids = itertools.count()
        self._prefix = f"{os.getpid()}.{id(self):x}"

    def note(self, request: str, ref: Ref, kind: str) -> bool:
        """A message about ``ref`` answering ``request`` was taken: whether it is this cache's."""
        if request in self._queried and kind == "LOADREPLY":
            self._queried[request] += 1
        waiting = self._answers.get(request)
        if waiting is None:
            return False
        waiting.discard(ref)
        return True

    def wake(self) -> None:
        """A message arrived (taken or not): the requests waiting look again."""
        self._arrived.set()

    async def load(self, refs: list[Ref], listening: Callable[[Ref], Awaitable[None]]) -> None:
        """Send ``LOAD`` for ``refs`` (each once ``listening(ref)`` returned: its subject is
        subscribed, so the reply is not missed) and wait until each has its reply.

        Raises:
            LoadTimeout: some were not answered in ``load_wait`` seconds.
        """
        request = self._request_id()
        waiting = self._answers[request] = set(refs)
        deadline = asyncio.get_running_loop().time() + self.load_wait
        try:
            while waiting:
                for ref in list(waiting):
                    await listening(ref)
                    payload = msgspec.msgpack.encode(LoadRequest(request))
                    await self.nc.publish(load_subject(ref[0], ref[1], self.domain), payload)
                    self._sent()
                await self._until(lambda: not waiting, deadline, LOAD_RETRY)
                if waiting and asyncio.get_running_loop().time() >= deadline:
                    raise LoadTimeout(
                        f"no LOADREPLY for {sorted(map(str, waiting))[:5]} in {self.load_wait:g} s"
                        f" (is a publisher with [bus] domain {self.domain!r} running?)"
                    )
        finally:
            del self._answers[request]

    async def query(self, type_name: str, pattern: str) -> None:
        """Ask the connector for the objects of ``type_name`` ``pattern`` selects; wait until
        all of them came.

        Raises:
            LoadTimeout: not answered, or not all objects came, in ``load_wait`` seconds.
            UnknownType: the connector refused the query.
        """
        request = self._request_id()
        self._queried[request] = 0
        payload = msgspec.msgpack.encode(QueryRequest(request, pattern))
        subject = query_subject(type_name, self.domain)
        deadline = asyncio.get_running_loop().time() + self.load_wait
        try:
            count = (await self._ask(subject, payload, deadline)).count
            await self._until(lambda: self._queried[request] >= count, deadline, None)
            if self._queried[request] < count:
                raise LoadTimeout(
                    f"query {subject}: {self._queried[request]} of {count} objects came"
                )
        finally:
            del self._queried[request]

    async def _ask(self, subject: str, payload: bytes, deadline: float) -> QueryReply:
        """Send a query until the connector answers it.

        Raises:
            LoadTimeout: not answered by ``deadline``. UnknownType: refused (an unknown type).
        """
        while True:
            try:
                answer = await self.nc.request(subject, payload, timeout=LOAD_RETRY * 2)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
                if asyncio.get_running_loop().time() >= deadline:
                    raise LoadTimeout(f"query {subject} not answered: {exc}") from None
                await asyncio.sleep(LOAD_RETRY)
                continue
            reply = msgspec.msgpack.decode(answer.data, type=QueryReply)
            if reply.error:
                raise UnknownType(reply.error)
            return reply

    async def _until(self, done: Callable[[], bool], deadline: float, every: float | None) -> None:
        """Wait until ``done()`` (checked whenever a message arrives), ``every`` seconds at most
        (None: until ``deadline``)."""
        loop = asyncio.get_running_loop()
        stop = deadline if every is None else min(deadline, loop.time() + every)
        while not done():
            left = stop - loop.time()
            if left <= 0:
                return
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    def _request_id(self) -> str:
        return f"{self._prefix}.{next(self._ids)}"
