"""HTTP streams move with their part in a split (issue 27, deliverable 3; docs/http.md): a page's
``EventSource`` streams in headless Chromium and a Python client's NDJSON stream, in cells a
split on load moves, go on at the standby (``every`` ones audited against the publisher's log:
nothing lost, duplicated or reordered; the ``latest`` one equal to them at every tick), and a
stream whose cell stayed is not disturbed.

Not collected on its own (its name does not start with ``test_``): ``test_split.py`` imports its
test, which then runs on that module's publisher, with a map and relays of its own started for
it (function scope).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.integration.test_tiers import states

from fanout.client.following import connect_cluster
from fanout.launch import Child, Children
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.clusterview import last_logged, members_seen, metric, started_together
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import Box

LEASE = 2.0
#: One box in each of twelve cells of the 256-unit grid over the 1,000-unit world.
BOXES = [
    Box((x + 60, y + 60), (x + 190, y + 190)) for x in (0, 256, 512, 768) for y in (0, 256, 512)
]

#: The giver splits past 7 subscriptions; two cells of two subscriptions each move (a split
#: takes the heaviest parts first while they fit in half the load, ``cluster.balance``
#: rule 4) and four cells of one stay.
HTTP_MOVING = {"page": BOXES[0], "python": BOXES[3]}
HTTP_STAYING = [BOXES[1], BOXES[4], BOXES[6], BOXES[9]]
HTTP_DWELL = 4.0
#: The page's script: an EventSource per stream, every event it dispatches kept in order.
FOLLOW_IN_PAGE = """
window.seen = window.seen || {};
window.follow = (name, view, mode) => {
  const url = new URL("/v1/subscribe", location.origin);
  const query = {dataset: "agents", view, mode, format: "sse"};
  if (mode === "latest") query.rate = "20";
  url.search = new URLSearchParams(query);
  const events = (window.seen[name] = []);
  const source = new EventSource(url);
  for (const type of ["subscribed", "push", "no_update", "moved", "error", "open"]) {
    source.addEventListener(type, (m) => events.push({type, data: m.data ?? null}));
  }
  return url.href;
};
"""


@pytest_asyncio.fixture(loop_scope="module")
async def http_movers(
    children: Children, publisher: Child, tmp_path: Path
) -> AsyncIterator[list[Child]]:
    """A giver splitting past 7 subscriptions for a dwell, and a standby, in a map of their
    own; stopped when the test ends."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        common = ["--publisher", publisher.url, "--port", "0", "--grace", "1"]
        common += ["--registry", f"redis://{host}:{port}", "--registry-lease", str(LEASE)]
        common += ["--log-level", "info"]
        giver = ["--name", "hg", "--split-above", "subscribers=7"]
        giver += ["--split-dwell", str(HTTP_DWELL)]
        async with started_together(
            children.start("relay", [*common, *giver], tmp_path / "relay-hg.log"),
            children.start(
                "relay", [*common, "--name", "hs", "--standby"], tmp_path / "relay-hs.log"
            ),
        ) as started:
            yield started


def _http(child: Child) -> str:
    return child.url.replace("ws://", "http://")


def _stream_url(child: Child, box: Box, mode: str) -> str:
    import urllib.parse

    query = {"dataset": "agents", "view": str(box), "mode": mode}
    if mode == "latest":
        query["rate"] = "20"
    return f"{_http(child)}/v1/subscribe?{urllib.parse.urlencode(query)}"


async def _page_events(page: object, name: str) -> list[dict[str, object]]:
    """What the page's stream ``name`` dispatched, each event's data read into it."""
    import json

    raw = await page.evaluate(f"JSON.stringify(window.seen[{json.dumps(name)}])")  # type: ignore[attr-defined]
    return [
        {"type": e["type"], **(json.loads(e["data"]) if e["data"] else {})} for e in json.loads(raw)
    ]


def _after_moved(events: list[dict]) -> list[dict]:
    """The events after the first ``moved`` one (none before it has come)."""
    types = [e["type"] for e in events]
    return events[types.index("moved") + 1 :] if "moved" in types else []


async def test_http_streams_move_with_their_part_in_a_split_and_lose_nothing(
    http_movers: list[Child], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A page's two EventSource streams (``every``, ``latest``) in headless Chromium and a
    Python client's ``every`` NDJSON stream, in the two cells that move: the page does nothing
    (the browser reconnects by itself, is redirected and resumes with ``Last-Event-ID``), the
    Python client follows the documented procedure (``fanout.testing.httpstream``). The
    ``every`` streams, audited against the log across the move, lose, duplicate and reorder
    nothing; the ``latest`` one equals the ``every`` one at every tick it shows; the moved
    streams end up at the standby; a stream whose cell stayed is not disturbed."""
    import json

    import httpx

    from fanout.testing.browser import open_browser
    from fanout.testing.httpstream import Following, updates_of

    giver, standby = http_movers
    await members_seen(http_movers, 2)
    page_box, python_box = HTTP_MOVING["page"], HTTP_MOVING["python"]
    directory = tmp_path_factory.mktemp("browser")
    async with (
        open_browser(f"{_http(giver)}/v1/datasets", directory) as page,
        httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client,
        connect_cluster(giver.url) as ballast,
        contextlib.AsyncExitStack() as streams,
    ):
        await page.evaluate(FOLLOW_IN_PAGE)
        for mode in ("every", "latest"):  # each stream named by its mode
            await page.evaluate(f"window.follow(...{json.dumps([mode, str(page_box), mode])})")
        moving = Following(_stream_url(giver, python_box, "every"))
        staying = Following(_stream_url(giver, HTTP_STAYING[0], "latest"))
        for stream in (moving, staying):
            stream.task = asyncio.create_task(stream.run(client))
            streams.push_async_callback(stream.stop)
        views = [await ballast.subscribe(b, rate=20) for b in (python_box, *HTTP_STAYING[1:-1])]
        # Seven subscriptions, not past 7: the every streams are served before the eighth.
        await eventually(
            lambda: _page_events(page, "every"),
            lambda events: len([e for e in events if "seq" in e]) >= 3,
            timeout=120,
            every=0.2,
            what="the page's every stream served",
        )
        await eventually(
            lambda: [e for e in moving.checked() if "seq" in e],
            lambda served: len(served) >= 3,
            timeout=120,
            every=0.2,
            what="the NDJSON stream served",
        )
        views.append(await ballast.subscribe(HTTP_STAYING[-1], rate=20))
        assert {ballast.relay_of(view) for view in views} == {giver.url}  # a standby owns nothing
        # Eight, past 7 for a dwell: the two cells of two subscriptions go to the standby.
        every = await eventually(
            lambda: _page_events(page, "every"),
            lambda events: len([e for e in _after_moved(events) if "seq" in e]) >= 3,
            timeout=120,
            every=0.2,
            what="the page's every stream moved and served at the standby",
        )
        await eventually(
            lambda: [e for e in _after_moved(moving.checked()) if "seq" in e],
            lambda served: len(served) >= 3,
            timeout=120,
            every=0.2,
            what="the NDJSON stream moved and served at the standby",
        )
        assert await metric(giver.url, "fanout_relay_splits_total") == 1
        # Past the log's end as it is now: the streams are served well after the move.
        epoch = next(e["epoch"] for e in every if "epoch" in e)
        target = last_logged(tmp_path / "publisher" / "log.db", epoch) + 3
        every = await eventually(
            lambda: _page_events(page, "every"),
            lambda events: max(e.get("seq", -1) for e in events) >= target,
            timeout=120,
            every=0.2,
            what=f"the page's every stream past seq {target}",
        )
        await eventually(
            lambda: max(e.get("seq", -1) for e in moving.checked()),
            lambda seq: seq >= target,
            timeout=120,
            every=0.2,
            what=f"the NDJSON stream past seq {target}",
        )
        latest = await eventually(
            lambda: _page_events(page, "latest"),
            lambda events: len([e for e in _after_moved(events) if e["type"] == "push"]) >= 3,
            timeout=120,
            every=0.2,
            what="the page's latest stream served after the move",
        )
        # Where the streams are: the page's two, the NDJSON one and a ballast view at the
        # standby, the NDJSON stream that stayed and three ballast views at the giver.
        held = [await metric(c.url, "fanout_relay_subscriptions") for c in (standby, giver)]
        assert held == [4, 4]
        await asyncio.wait_for(ballast.settled(), 60)
        assert ballast.relay_of(views[0]) == standby.url
        assert {ballast.relay_of(view) for view in views[1:]} == {giver.url}
        staying_ticks = [e["tick"] for e in staying.checked() if e["type"] == "push"]

    # The page's every stream: one move, told where and why, served there, nothing lost.
    moved = [e for e in every if e["type"] == "moved"]
    assert len(moved) == 1, moved
    assert moved[0]["location"].startswith(f"{_http(standby)}/v1/subscribe?")
    assert "moved to relay hs" in moved[0]["message"]
    before = every[: every.index(moved[0])]
    assert moved[0]["token"] == [e["token"] for e in before if "token" in e][-1]
    assert [e["type"] for e in every].count("subscribed") == 2  # once at each relay
    # The NDJSON stream: the same, by hand; its second response came from the standby.
    assert len(moving.served_at) == 2
    assert moving.served_at[0].startswith(_http(giver))
    assert moving.served_at[1].startswith(_http(standby))
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for box, updates in ((page_box, updates_of(every)), (python_box, moving.updates())):
            report = audit(updates, box, key="id", index=("x", "y"), log=stored, dataset="agents")
            assert (report.lost, report.duplicated, report.reordered) == (0, 0, 0), report.problems
            assert report.clean and report.restarts == 0, report.problems
            assert report.delivered >= 6
    # The latest stream: the browser's own error events (no data) while it reconnects, then a
    # full push at the standby; the every stream's rows at every tick both show, both sides of
    # the move.
    assert all(len(e) == 1 for e in every + latest if e["type"] == "error")
    again = [e["type"] for e in _after_moved(latest) if e["type"] != "error"]
    assert again[:3] == ["open", "subscribed", "push"]
    first_there = next(e for e in _after_moved(latest) if e["type"] == "push")
    assert first_there["full"]
    shown, truth = states(updates_of(latest)), states(updates_of(every))
    common = sorted(set(shown) & set(truth))
    assert any(t < first_there["tick"] for t in common)
    assert any(t >= first_there["tick"] for t in common)
    for tick in common:
        assert shown[tick] == truth[tick], f"tick {tick} differs"
    # The stream whose cell stayed: one response, no move, pushes after the others moved.
    assert len(staying.served_at) == 1 and staying.served_at[0].startswith(_http(giver))
    assert [e["type"] for e in staying.events].count("subscribed") == 1
    assert "moved" not in [e["type"] for e in staying.events]
    assert max(staying_ticks) > first_there["tick"]


# -- split and merge on load (deliverable 3): the subscribers move with their parts ---------
