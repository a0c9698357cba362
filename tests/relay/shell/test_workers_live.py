"""A write through one worker of ``fanout relay --workers 2`` shown at once to a subscriber of
the other worker, as on one process (issue 39): provisional before the publisher answers, then
confirmed by its tick once logged, or withdrawn if refused. A real relay as a user starts it;
the publisher is the scripted one, which answers a write only when the test says."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from fanout.client import SubscriptionError, connect
from fanout.launch import running
from fanout.metrics import scrape
from fanout.testing.catalog import catalog, sensors
from fanout.testing.ports import free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.wait import eventually
from fanout.views.topic import parse as topic
from fanout.wire.messages import Acquire, Error, Frame, Publish, Published

from .deployments import next_update

pytestmark = [pytest.mark.integration, pytest.mark.no_spark_publisher]

#: The leader's count of subscribers' connections on each worker (label ``worker``).
BY_WORKER = "fanout_relay_connections_by_worker{"
#: Connections opened at most until one lands on the other worker (the kernel picks).
TRIES = 40


def _by_worker(url: str) -> dict[str, float]:
    """The subscribers' connections on each worker (the relay's ``/metrics``, summed now)."""
    return {k: v for k, v in scrape(url).items() if k.startswith(BY_WORKER)}


async def _on_two_workers(stack: contextlib.AsyncExitStack, url: str) -> tuple[Any, Any]:
    """Two subscribers' connections on different workers: (the first, one on the other)."""
    workers = []
    for _ in range(TRIES):
        before = await asyncio.to_thread(_by_worker, url)
        subscriber = await stack.enter_async_context(connect(url))
        now = await asyncio.to_thread(_by_worker, url)
        (worker,) = [k for k, v in now.items() if v > before.get(k, 0)]
        if not workers or worker != workers[0][0]:
            workers.append((worker, subscriber))
        if len(workers) == 2:
            return workers[0][1], workers[1][1]
    raise AssertionError("no connection landed on the other worker")


async def test_a_write_through_one_worker_is_shown_at_once_on_the_other(tmp_path: Path) -> None:
    frames: list[Frame] = []
    publisher = ScriptedPublisher(catalog(sensors()), on_frame=frames.append)

    def taken(kind: type) -> list[Any]:
        return [frame for frame in frames if isinstance(frame, kind)]

    async with serving(publisher) as upstream, contextlib.AsyncExitStack() as stack:
        args = ["--publisher", upstream, "--port", "0", "--workers", "2"]
        args += ["--workers-port", str(free_port()), "--mqtt-port", "0"]
        relay = await stack.enter_async_context(running("relay", args, tmp_path / "relay.log"))
        writer, subscriber = await _on_two_workers(stack, relay.url)
        view = await subscriber.subscribe(topic("live/#"), dataset="sensors", rate=100.0)
        await eventually(lambda: taken(Acquire), what="the leader acquired the view")
        rows = {"topic": ["live/0"], "value": [0.0]}
        await publisher.send(rows, snapshots=publisher.take_fresh(), tick=1)
        assert (await next_update(view, 10)).full and set(view.rows) == {"live/0"}

        # Shown on the other worker while the publisher holds its answer, then logged.
        accepted = asyncio.create_task(writer.publish("sensors", [{"topic": "live/1", "value": 1}]))
        shown = await next_update(view, 10)
        assert shown.provisional and set(view.rows) == {"live/0", "live/1"}
        assert not accepted.done()  # unanswered: the publisher answers when told below
        (first,) = await eventually(lambda: taken(Publish), what="the write forwarded")
        await publisher.broadcast(Published(first.req, 5, 5))
        assert await asyncio.wait_for(accepted, 10) == (5, 5)

        # Refused: shown there too, then withdrawn.
        refused = asyncio.create_task(writer.publish("sensors", [{"topic": "live/2", "value": 2}]))
        shown = await next_update(view, 10)
        assert shown.provisional and set(view.rows) == {"live/0", "live/1", "live/2"}
        second = await eventually(lambda: taken(Publish)[1:], what="the second write forwarded")
        await publisher.broadcast(Error("invalid_write", "not today", ref=second[0].req))
        with pytest.raises(SubscriptionError):
            await asyncio.wait_for(refused, 10)
        withdrawn = await next_update(view, 10)
        assert "live/2" in withdrawn.left.tolist() and set(view.rows) == {"live/0", "live/1"}

        # The batch of the logged write's tick confirms it, sending nothing new.
        await publisher.send({"topic": ["live/0", "live/1"], "value": [0.0, 1.0]}, tick=5)
        counts = await eventually(
            lambda: scrape(relay.url),
            lambda now: now["fanout_relay_live_confirmed_total"] == 1,
            in_thread=True,
            timeout=30,
        )
        assert set(view.rows) == {"live/0", "live/1"}
        # The workers' counts summed: the writer's worker watches nothing; the other showed
        # each write once, and left out of the batch the row it had shown.
        assert counts["fanout_relay_live_passed_total"] == 2
        assert counts["fanout_relay_live_refused_total"] == 1
        assert counts["fanout_relay_live_deduplicated_total"] == 1
        assert counts["fanout_relay_live_pending"] == counts["fanout_relay_live_unsettled"] == 0
        assert counts["fanout_relay_workers_writes_passed_total"] == 2  # the leader's
        assert counts["fanout_relay_workers_writes_not_passed_total"] == 0
