"""Live writes when the publisher goes (issue 40, item 5): of the writes a relay showed at once,
the one the publisher had accepted (durable in its ingest log) stays shown and is confirmed by
its tick once the publisher is back; the one it had not answered is withdrawn where it was shown,
its writer told ``unavailable``. A real relay on loopback; the publisher is the scripted one, its
connection closed as a killed publisher's is."""

from __future__ import annotations

import asyncio

import pytest

from fanout.client import SubscriptionError, connect
from fanout.metrics import scrape
from fanout.testing.catalog import catalog, sensors
from fanout.testing.publisher import ScriptedPublisher
from fanout.testing.wait import eventually
from fanout.views.topic import parse as topic
from fanout.wire.messages import Acquire, Frame, Publish, Published

from .deployments import next_update, running

pytestmark = pytest.mark.asyncio


async def test_the_unanswered_write_is_withdrawn_and_the_accepted_one_confirmed_after() -> None:
    frames: list[Frame] = []
    publisher = ScriptedPublisher(catalog(sensors()), on_frame=frames.append)

    def taken(kind: type) -> list:  # type: ignore[type-arg]
        return [frame for frame in frames if isinstance(frame, kind)]

    async with (
        running(publisher) as (publisher, _, url),
        connect(url) as subscriber,
        connect(url) as writer,
    ):
        view = await subscriber.subscribe(topic("live/#"), dataset="sensors", rate=100.0)
        await eventually(lambda: taken(Acquire), what="the relay acquired the view")
        snapshot = publisher.take_fresh()
        await publisher.send({"topic": ["live/0"], "value": [0.0]}, snapshots=snapshot, tick=1)
        assert (await next_update(view)).full
        accepted = asyncio.create_task(writer.publish("sensors", [{"topic": "live/1", "value": 1}]))
        shown = await next_update(view)
        assert shown.provisional and "live/1" in view.rows
        (first,) = await eventually(lambda: taken(Publish), what="the write forwarded")
        await publisher.broadcast(Published(first.req, 5, 5))  # durable at ingest offset 5
        assert await accepted == (5, 5)
        unanswered = asyncio.create_task(
            writer.publish("sensors", [{"topic": "live/2", "value": 2}])
        )
        await next_update(view)
        assert set(view.rows) == {"live/0", "live/1", "live/2"}
        await eventually(lambda: len(taken(Publish)) == 2, what="the second write forwarded")

        for connection in list(publisher.relays):  # the publisher killed: its links close
            await connection.close()
        with pytest.raises(SubscriptionError) as refused:
            await unanswered
        assert refused.value.code == "unavailable"
        withdrawn = await next_update(view)
        assert set(view.rows) == {"live/0", "live/1"}, "only the unanswered write is taken back"
        assert "live/2" in withdrawn.left.tolist()

        # Back: the relay acquires again; the batch of the accepted write's tick confirms it.
        await eventually(lambda: len(taken(Acquire)) >= 2, timeout=30, what="acquired again")
        again = publisher.take_fresh()
        rows = {"topic": ["live/0", "live/1"], "value": [0.0, 1.0]}
        await publisher.send(rows, snapshots=again, tick=5)
        counts = await eventually(
            lambda: scrape(url),
            lambda now: now["fanout_relay_live_confirmed_total"] == 1,
            in_thread=True,
            timeout=30,
        )
    assert counts["fanout_relay_live_withdrawn_total"] == 1
    assert counts["fanout_relay_live_pending"] == 0
    assert set(view.rows) == {"live/0", "live/1"}
