"""An HTTP stream client for tests and benchmarks: ``GET /v1/subscribe`` read as NDJSON and
followed across moves as docs/http.md tells a client to ("When the view's part moves"): on a
``moved`` event, the same request at its ``location``, with ``Last-Event-ID`` set to the last
token (mode ``every``). Every event is kept, in order, and every URL a response came from::

    stream = Following("http://127.0.0.1:7701/v1/subscribe?dataset=agents&view=...&mode=every")
    async with httpx.AsyncClient(timeout=60) as client, asyncio.TaskGroup() as tasks:
        stream.task = tasks.create_task(stream.run(client))
        ...
        await stream.stop()
    report = audit(stream.updates(), view, key="id", index=("x", "y"), log=log, dataset="agents")
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from fanout.client.subscriber import Update
from fanout.testing.audit import http_update


class StreamRefused(Exception):
    """A request of the stream was answered with an error status (its body says why)."""


class Following:
    """One HTTP stream, followed across moves.

    Attributes:
        url: the first request.
        events: every event received, in order, as JSON read.
        served_at: the URL each response came from (after redirects).
        task: the task running :meth:`run`, if the caller keeps it here.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.events: list[dict[str, Any]] = []
        self.served_at: list[str] = []
        self.task: asyncio.Task[None] | None = None

    async def run(self, client: httpx.AsyncClient) -> None:
        """Read the stream, and make its request again where each ``moved`` event says, until
        a response ends otherwise (or the task is cancelled).

        Raises:
            StreamRefused: a request was answered with another status than 200.
        """
        url: str | None = self.url
        token: str | None = None
        while url is not None:
            headers = {"Last-Event-ID": token} if token else {}
            async with client.stream("GET", url, headers=headers, follow_redirects=True) as r:
                if r.status_code != 200:
                    raise StreamRefused(f"{url}: {r.status_code} {(await r.aread())[:500]!r}")
                self.served_at.append(str(r.url))
                url = None
                async for line in r.aiter_lines():
                    event = json.loads(line)
                    self.events.append(event)
                    token = event.get("token") or token
                    if event["type"] == "moved":
                        url = event["location"]

    def checked(self) -> list[dict[str, Any]]:
        """The events so far.

        Raises:
            Exception: what :meth:`run` failed with, if its task failed (said at once rather
                than after a wait for events that will not come).
        """
        if self.task is not None and self.task.done() and not self.task.cancelled():
            failure = self.task.exception()
            if failure is not None:
                raise failure
        return self.events

    def updates(self) -> list[Update]:
        """The pushes and no-updates received, as ``fanout.testing.audit`` replays them."""
        return updates_of(self.events)

    async def stop(self) -> None:
        """Cancel the task running :meth:`run` and wait for it to end."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


def updates_of(events: list[dict[str, Any]]) -> list[Update]:
    """The ``push`` and ``no_update`` events among ``events``, as updates (``http_update``)."""
    return [http_update(event) for event in events if event["type"] in ("push", "no_update")]
