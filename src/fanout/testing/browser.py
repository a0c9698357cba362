"""A real browser for tests: headless Chromium (Debian's ``chromium``) driven over the Chrome
DevTools Protocol (CDP: JSON commands over a WebSocket, on loopback).

Only what a test of a page needs: open a URL, evaluate JavaScript in the page (its own data),
send real mouse input (a drag, a wheel turn), take a screenshot. Each browser has a profile
directory of its own and is closed, and its process ended, when the block ends::

    async with open_browser("http://127.0.0.1:7701/", tmp_path) as page:
        await page.evaluate("document.title")
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

from websockets.asyncio.client import ClientConnection, connect

from fanout.background import Background
from fanout.testing.binaries import ProgramMissing, find

_LISTENING = "DevTools listening on "
#: Whether the page navigated to has loaded, scripts included (not the blank page before it).
_LOADED = 'document.readyState === "complete" && location.href !== "about:blank"'


class BrowserError(Exception):
    """The browser did not start, or a command or script in the page failed."""


def chromium() -> str | None:
    """The Chromium binary on ``PATH`` (under any of its names), or None."""
    return find("chromium")


class Page:
    """One page of a headless browser, attached over CDP."""

    def __init__(
        self,
        socket: ClientConnection,
        session: str,
        ids: itertools.count[int],
        waiting: dict[int, asyncio.Future[dict[str, Any]]],
    ) -> None:
        """A page attached as ``session`` on the browser's connection ``socket``, whose replies
        the connection's reader hands to ``waiting`` by command number (from ``ids``)."""
        self._socket = socket
        self._session = session
        self._ids = ids
        self._waiting = waiting

    async def command(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one CDP command to the page; returns its result.

        Raises:
            BrowserError: the browser answered with an error.
        """
        return await _command(
            self._socket, self._ids, self._waiting, method, params, session=self._session
        )

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited), as JSON gives it.

        Raises:
            BrowserError: the script threw.
        """
        result = await self.command(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"the page's script failed: {text}")
        return result["result"].get("value")

    async def loaded(self, timeout: float = 60.0) -> None:
        """Wait until the page navigated to and its scripts have loaded.

        Raises:
            BrowserError: it had not within ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            with contextlib.suppress(BrowserError):  # the old document may be going away
                if await self.evaluate(_LOADED):
                    return
            await asyncio.sleep(0.05)
        raise BrowserError(f"the page did not load within {timeout:g} s")

    async def drag(
        self, start: tuple[float, float], end: tuple[float, float], steps: int = 8
    ) -> None:
        """Press the left button at ``start`` (CSS pixels), move to ``end``, release."""
        await self._mouse("mousePressed", *start, buttons=1)
        for step in range(1, steps + 1):
            x = start[0] + (end[0] - start[0]) * step / steps
            y = start[1] + (end[1] - start[1]) * step / steps
            await self._mouse("mouseMoved", x, y, buttons=1)
        await self._mouse("mouseReleased", *end, buttons=0)

    async def screenshot(self, path: Path) -> Path:
        """Save a PNG of the page as it is now."""
        result = await self.command("Page.captureScreenshot", {"format": "png"})
        await asyncio.to_thread(_write, path, base64.b64decode(result["data"]))
        return path

    async def _mouse(self, kind: str, x: float, y: float, buttons: int) -> None:
        await self.command(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": x, "y": y, "button": "left", "buttons": buttons, "clickCount": 1},
        )


async def _command(
    socket: ClientConnection,
    ids: itertools.count[int],
    waiting: dict[int, asyncio.Future[dict[str, Any]]],
    method: str,
    params: dict[str, Any] | None,
    *,
    session: str | None,
) -> dict[str, Any]:
    number = next(ids)
    future = asyncio.get_running_loop().create_future()
    waiting[number] = future
    message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
    if session is not None:
        message["sessionId"] = session
    await socket.send(json.dumps(message))
    reply = await asyncio.wait_for(future, 60)
    if "error" in reply:
        raise BrowserError(f"{method}: {reply['error'].get('message')}")
    result: dict[str, Any] = reply.get("result", {})
    return result


@contextlib.asynccontextmanager
async def open_browser(
    url: str, directory: Path, *, size: tuple[int, int] = (1000, 700), timeout: float = 60.0
) -> AsyncIterator[Page]:
    """Start headless Chromium showing ``url``; yield its page.

    Args:
        url: the page to open.
        directory: the browser's profile and its log (``chromium.log``) go here.
        size: the window's width and height, CSS pixels.
        timeout: seconds the browser may take to start.

    Raises:
        ProgramMissing: no Chromium on ``PATH``.
        BrowserError: it did not start in time (its log says why).
    """
    binary = chromium()
    if binary is None:
        raise ProgramMissing("chromium")
    log = directory / "chromium.log"
    stderr = await asyncio.to_thread(_open_log, log)
    with stderr:
        process = await asyncio.create_subprocess_exec(
            binary,
            "--headless=new",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={directory / 'profile'}",
            f"--window-size={size[0]},{size[1]}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        endpoint = await _devtools_endpoint(log, process, timeout)
        async with (
            connect(endpoint, max_size=64 << 20, open_timeout=timeout) as socket,
            Background() as reading,
        ):
            ids: itertools.count[int] = itertools.count(1_000_000)
            waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
            reading.start(_route(socket, waiting))
            target = await _command(
                socket,
                ids,
                waiting,
                "Target.createTarget",
                {"url": "about:blank"},
                session=None,
            )
            attached = await _command(
                socket,
                ids,
                waiting,
                "Target.attachToTarget",
                {"targetId": target["targetId"], "flatten": True},
                session=None,
            )
            page = Page(socket, attached["sessionId"], ids, waiting)
            await page.command(
                "Emulation.setDeviceMetricsOverride",
                {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": False},
            )
            await page.command("Page.navigate", {"url": url})
            await page.loaded(timeout)
            yield page
            with contextlib.suppress(BrowserError, TimeoutError):
                await _command(socket, ids, waiting, "Browser.close", None, session=None)
            reading.cancel()
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def _route(
    socket: ClientConnection, waiting: dict[int, asyncio.Future[dict[str, Any]]]
) -> None:
    with contextlib.suppress(Exception):
        async for message in socket:
            reply = json.loads(message)
            future = waiting.pop(reply.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(reply)
    for future in waiting.values():
        if not future.done():
            future.set_exception(BrowserError("the browser closed its DevTools connection"))


async def _devtools_endpoint(log: Path, process: asyncio.subprocess.Process, timeout: float) -> str:
    """The browser's DevTools WebSocket URL, from the line it logs once listening."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        text = await asyncio.to_thread(log.read_text, errors="replace")
        for line in text.splitlines():
            if _LISTENING in line:
                return line.split(_LISTENING, 1)[1].strip()
        if process.returncode is not None:
            break
        await asyncio.sleep(0.1)
    tail = (await asyncio.to_thread(log.read_text, errors="replace"))[-2000:]
    raise BrowserError(f"Chromium did not start (its log {log}):\n{tail}")


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _open_log(log: Path) -> BinaryIO:
    log.parent.mkdir(parents=True, exist_ok=True)
    return log.open("wb")
