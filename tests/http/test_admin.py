"""The relay's admin API over real sockets (``http.admin``), against a scripted publisher: a
live EXPLAIN of views it covers and views it does not (nothing acquired), narrowed by rules;
per-subscriber accounting and the top subscribers in ``/metrics``; only tokens with role
``admin`` are answered; ``fanout explain --relay`` prints the same."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from fanout.auth import AuthConfig, issue
from fanout.cli.main import main
from fanout.client import connect
from fanout.relay.config import Planning
from fanout.relay.core.planner import Policy
from fanout.testing.catalog import catalog
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views import Box

SECRET = "admin-secret-" + "k" * 32
ADMIN = issue("HS256", SECRET, ["admin"])
SUBSCRIBER = issue("HS256", SECRET, ["subscriber"], subject="ana")
EXPLAIN = "/v1/admin/explain?dataset=agents&view=box:0,0,5,5"


@contextlib.asynccontextmanager
async def deployment() -> AsyncIterator[tuple[ScriptedPublisher, str, str]]:
    """A relay checking tokens, with one subscriber of box 0,0,10,10 served 3 rows."""
    publisher = ScriptedPublisher(catalog())
    async with (
        serving(publisher) as url,
        running_relay(
            url, planning=Planning(Policy(widen="exact")), auth=AuthConfig("HS256", SECRET)
        ) as (_, relay_url),
        connect(relay_url, token=SUBSCRIBER) as subscriber,
    ):
        view = await subscriber.subscribe(Box((0, 0), (10, 10)))
        await publisher.next_acquire()
        rows = {"id": [1, 2, 3], "x": [1.0, 4.0, 8.0], "y": [1.0, 4.0, 8.0]}
        await publisher.send(rows, snapshots=publisher.take_fresh())
        await eventually(lambda: len(view.rows) == 3)
        yield publisher, relay_url, relay_url.replace("ws://", "http://")


def near(colours: list[str], wanted: tuple[int, int, int]) -> bool:
    """Whether a pixel of ``colours`` ("r,g,b") is ``wanted`` (within anti-aliasing)."""
    return any(
        sum(abs(int(c) - w) for c, w in zip(colour.split(","), wanted, strict=True)) < 30
        for colour in colours
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_explain_says_what_covers_a_view_what_it_would_acquire_and_its_cost() -> None:
    async with deployment() as (publisher, _, base), httpx.AsyncClient(timeout=10) as client:
        said = (await client.get(base + EXPLAIN + "&rate=4", headers=bearer(ADMIN))).json()
        (held,) = said["held"]
        assert held["view"] == "box:0,0,10,10" and held["ready"]
        assert said["covered"] and said["covered_by"] == [held["prim"]] and said["residual"] == []
        cost = said["cost"]
        assert cost["rows"] == 2 and cost["pushes_per_second"] == 4
        assert cost["bytes_per_second"] == 4 * cost["bytes_per_push"] > 0
        links = said["links"]  # no link fitted: the subscriber on loopback takes it all
        assert links["needs_bytes_per_second"] == cost["bytes_per_second"]
        assert links["fitted"] == 0 and links["fitted_links"] == []
        wider = "/v1/admin/explain?dataset=agents&view=box:0,0,20,10"
        said = (await client.get(base + wider, headers=bearer(ADMIN))).json()
        assert not said["covered"] and said["residual"] == [
            {"dataset": "agents", "view": "box:10,0,20,10"}
        ]
        with pytest.raises(TimeoutError):  # a dry run: nothing was asked upstream
            await publisher.next_acquire(timeout=0.5)
        ruled = wider + "&rule=agents=box:0,0,3,3"
        said = (await client.get(base + ruled, headers=bearer(ADMIN))).json()
        assert said["narrowed"] and said["effective_view"] == "box:0,0,3,3" and said["covered"]
        assert said["rules"] == {"agents": ["box:0,0,3,3"]} and said["cost"]["rows"] == 1


async def test_only_admin_tokens_are_answered_and_bad_requests_say_why() -> None:
    async with deployment() as (_, _, base), httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(base + EXPLAIN)).status_code == 401
        refused = await client.get(base + EXPLAIN, headers=bearer(SUBSCRIBER))
        assert refused.status_code == 403 and "admin" in refused.json()["message"]
        for query, status, code in (
            ("/v1/admin/explain?dataset=nope&view=box:0,0,1,1", 404, "unknown_dataset"),
            ("/v1/admin/explain?dataset=agents&view=box:0,0", 400, "invalid_view"),
            (
                "/v1/admin/explain?dataset=agents&view=box:0,0,5,5&rule=agents=box:50,50,60,60",
                403,
                "forbidden",
            ),
            ("/v1/admin/subscribers?top=0", 400, "bad_request"),
            ("/v1/admin/subscribers?topp=3", 400, "bad_request"),
            ("/v1/admin/batches?top=3", 400, "bad_request"),
        ):
            answer = await client.get(base + query, headers=bearer(ADMIN))
            assert (answer.status_code, answer.json()["error"]) == (status, code), query


async def test_subscribers_are_accounted_and_the_top_ones_are_in_the_metrics() -> None:
    async with deployment() as (publisher, _, base), httpx.AsyncClient(timeout=10) as client:
        await publisher.send({"id": [1], "x": [2.0], "y": [2.0]}, tick=5)
        query = base + "/v1/admin/subscribers?top=5"

        async def accounted() -> dict:
            return (await client.get(query, headers=bearer(ADMIN))).json()

        said = await eventually(
            accounted, lambda said: said["top"] and said["top"][0]["pushes"] >= 2
        )
        (top,) = said["top"]
        assert top["subject"] == "ana" and top["view"] == "box:0,0,10,10"
        assert top["rows"] == 4 and top["bytes"] > 0 and said["bytes"] == top["bytes"]
        assert top["cpu_seconds"] == said["push_cpu_seconds"] >= 0  # the only one: all of it
        # Its link was probed after its pushes (docs/concepts.md, "Link-aware delivery").
        assert top["coarse"] is False and top["link"]["fitted"] is False
        assert top["link"]["detail"] == "full" and said["links"]["fitted"] == 0
        metrics = (await client.get(base + "/metrics")).text
        labels = f'client="{top["client"]}",dataset="agents",sub="{top["sub"]}"'
        assert f"fanout_relay_top_subscriber_bytes{{{labels}}}" in metrics


async def test_batches_list_each_one_s_times_through_the_relay() -> None:
    async with deployment() as (publisher, _, base), httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(base + "/v1/admin/batches")).status_code == 401
        ticked = time.time() - 1.0
        sent = await publisher.send({"id": [1], "x": [2.0], "y": [2.0]}, tick_time=ticked)
        query = base + "/v1/admin/batches"

        async def listed() -> list[dict]:
            return (await client.get(query, headers=bearer(ADMIN))).json()["batches"]

        said = await eventually(
            listed, lambda said: said and said[-1]["seq"] == sent.seq and said[-1]["pushed_last"]
        )
        first, last = said[0], said[-1]  # the first batch, with the subscriber's snapshot
        assert [b["seq"] for b in said] == [first["seq"], sent.seq] and first["seq"] < sent.seq
        assert (last["dataset"], last["tick"], last["tick_time"]) == ("agents", sent.tick, ticked)
        # In the order a batch goes through the relay: read, written, swapped in, pushed.
        for times in said:
            assert times["read"] <= times["written"] <= times["swapped"] <= times["pushed_first"]
            assert times["pushed_first"] <= times["pushed_last"] < time.time()


async def test_fanout_explain_relay_prints_the_relays_answer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with deployment() as (_, url, _):
        monkeypatch.setenv("FANOUT_TOKEN", ADMIN)
        args = ["explain", "--relay", url, "--view", "box:0,0,20,10"]
        assert await asyncio.to_thread(main, args) == 0
        out = capsys.readouterr().out
        assert "result: not covered" in out and "agents box:10,0,20,10" in out
        assert "links fitted to their drain rate: 0 of 1" in out
        assert await asyncio.to_thread(main, [*args, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["residual"][0]["view"] == "box:10,0,20,10"
        monkeypatch.setenv("FANOUT_TOKEN", SUBSCRIBER)
        assert await asyncio.to_thread(main, args) == 1
        assert "403 forbidden" in capsys.readouterr().err
        assert await asyncio.to_thread(main, [*args, "--have", "box:0,0,1,1"]) == 2


async def test_the_viewer_draws_the_relays_primitives_and_its_subscribers_views(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    from fanout.testing.browser import open_browser

    both = issue("HS256", SECRET, ["subscriber", "admin"])
    async with deployment() as (publisher, _, base):
        page_url = f"{base}/?dataset=agents&view=box:0,0,40,40&admin=1&access_token={both}"
        async with open_browser(page_url, tmp_path / "browser") as page:

            async def system() -> dict | None:  # snapshots of what the page acquired, until drawn
                await publisher.send(
                    {"id": [4], "x": [30.0], "y": [30.0]}, snapshots=publisher.take_fresh()
                )
                return await page.evaluate("window.fanoutViewer.system")  # type: ignore[no-any-return]

            drawn = await eventually(
                system, lambda s: s is not None and len(s["subscribers"]) == 2, timeout=30
            )
            assert "box:0,0,10,10" in [p["view"] for p in drawn["held"]]
            assert "box:0,0,10,10" in drawn["subscribers"]  # the WebSocket subscriber's view
            served = await page.evaluate("window.fanoutViewer.servedView")
            assert served in drawn["subscribers"]  # and the page's own
            script = (
                "(() => { const c = document.getElementById('map');"
                " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                " const seen = new Set(); for (let i = 0; i < d.length; i += 4)"
                " seen.add(`${d[i]},${d[i+1]},${d[i+2]}`); return [...seen]; })()"
            )
            # the layer is drawn at the page's next frame after the system state comes
            await eventually(
                lambda: page.evaluate(script),
                lambda colours: near(colours, (64, 192, 176)) and near(colours, (224, 160, 64)),
                timeout=10,
                what="the held primitives (teal) and subscribers' views (orange) drawn",
            )
            assert await page.evaluate("window.fanoutViewer.rows.size") == 4
            stats = await page.evaluate("document.getElementById('stats').textContent")
            assert "held" in stats and "subscribers 2" in stats
            await page.screenshot(tmp_path / "admin-layer.png")
        only_subscriber = page_url.replace(both, SUBSCRIBER)
        async with open_browser(only_subscriber, tmp_path / "browser-2") as page:
            error = await eventually(
                lambda: page.evaluate("window.fanoutViewer.systemError"), bool, timeout=30
            )
            assert "forbidden" in error
