"""/healthz and /readyz (the publisher's readiness), answered on a real WebSocket server's port
by ``fanout.metrics.route``."""

from __future__ import annotations

import httpx
from websockets.asyncio.server import ServerConnection, serve

from fanout.metrics import route


async def echo(websocket: ServerConnection) -> None:
    async for message in websocket:
        await websocket.send(message)


async def test_ready_says_why_not_until_it_is_and_health_is_always_ok() -> None:
    why: list[str | None] = ["dataset 'agents': no micro-batch yet"]
    hook = route(list, lambda: why[0])
    async with serve(echo, "127.0.0.1", 0, process_request=hook) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).text == "ok\n"
            response = await client.get("/readyz")
            assert response.status_code == 503
            assert response.text == "not ready: dataset 'agents': no micro-batch yet\n"
            why[0] = None
            response = await client.get("/readyz")
            assert (response.status_code, response.text) == (200, "ready\n")
            assert (await client.get("/metrics")).status_code == 200  # the fallback's
