"""``fanout demo``: a publisher, a relay and simulated subscribers, with a live status view.

Every subscriber holds a box view that follows its own moving point. With a duration, the demo
stops moving the boxes at the end, lets every view settle, and checks each subscriber's rows
against the publisher's authoritative state inside its box at the tick of its last update. With
``json``, what it says for people goes to stderr and its result, one JSON object, to stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from fanout.client import LiveView, connect
from fanout.client.publisher import open_reader
from fanout.launch import Children
from fanout.metrics import scrape
from fanout.publisher.sources.simulation import SimulationParams
from fanout.views import Box, RegionUnion

#: Seconds between box moves.
MOVE_EVERY = 0.5
#: Updates each view must receive after its last move before the check reads it.
SETTLE_UPDATES = 2


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs (see ``fanout demo --help``)."""

    duration: float = 0.0
    subscribers: int = 50
    box: float = 100.0
    rate: float = 10.0
    simulation: SimulationParams = field(default_factory=SimulationParams)
    state_dir: Path | None = None
    plain: bool = False
    log_level: str = "warning"
    #: Print the result as one JSON object on stdout (``Report``), the rest on stderr.
    json: bool = False
    log_format: str = "text"


#: The demo's result, as ``--json`` prints it: ``seconds``, ``subscribers``, ``updates``,
#: ``lag_ms`` ({p50, p99} or None), ``floor_ms``, ``check`` ({passed, failures, ticks}, None
#: without a duration) and ``egress`` (bytes each way and pushes, None if unreadable).
Report = dict[str, Any]


@dataclass
class Watcher:
    """One simulated subscriber: its moving point and what it has seen."""

    index: int
    world: float
    side: float
    view: LiveView | None = None
    box: Box | None = None
    lags: list[float] = field(default_factory=list)
    updates_after_move: int = 0

    def point(self, seconds: float) -> tuple[float, float]:
        """Where this subscriber's point is ``seconds`` into the demo (a slow ellipse)."""
        phase = 2 * math.pi * self.index / 50
        omega = 0.05 + 0.01 * (self.index % 7)
        radius = self.world * (0.15 + 0.25 * ((self.index * 37) % 100) / 100)
        return (
            self.world / 2 + radius * math.cos(omega * seconds + phase),
            self.world / 2 + radius * math.sin(1.3 * omega * seconds + phase),
        )

    def box_at(self, seconds: float) -> Box:
        """The box around the point at ``seconds``."""
        x, y = self.point(seconds)
        half = self.side / 2
        return Box((x - half, y - half), (x + half, y + half))


def run_demo(config: DemoConfig) -> int:
    """Run the demo; returns 0, or 1 if the final check found a subscriber out of step."""
    report: Report = {}
    with _state_dir(config.state_dir) as state_dir:
        status = asyncio.run(_demo(config, state_dir, report))
    if config.json:
        print(json.dumps(report), flush=True)
    return status


@contextlib.contextmanager
def _state_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="fanout-demo-") as tmp:
        yield Path(tmp)


async def _demo(config: DemoConfig, state_dir: Path, report: Report) -> int:
    console = Console(stderr=config.json)
    console.print(f"starting the publisher (Spark local[*]) and a relay; logs in {state_dir}")
    async with Children() as children:
        publisher = await children.start(
            "publisher", _publisher_args(config, state_dir), state_dir / "publisher.log"
        )
        relay = await children.start(
            "relay",
            [
                *("--publisher", publisher.url, "--port", "0", "--name", "demo"),
                *("--log-format", config.log_format),
            ],
            state_dir / "relay.log",
        )
        console.print(
            f"publisher {publisher.url}, relay {relay.url}; {config.subscribers} subscribers"
        )
        console.print(f"live viewer: {_http(relay.url)}/  (open it in a browser)")
        return await _run(config, console, (publisher.url, relay.url), report)


def _publisher_args(config: DemoConfig, state_dir: Path) -> list[str]:
    sim = config.simulation
    return [
        "--port",
        "0",
        "--state-dir",
        str(state_dir / "publisher"),
        "--log-level",
        config.log_level,
        "--log-format",
        config.log_format,
        "--agents",
        str(sim.agents),
        "--dims",
        str(sim.dims),
        "--tick-rate",
        str(sim.rate),
        "--world",
        str(sim.world),
        "--speed",
        str(sim.speed),
        "--seed",
        str(sim.seed),
        "--period",
        str(sim.period),
        "--max-ticks-per-batch",
        str(sim.max_ticks_per_batch),
    ]


async def _run(config: DemoConfig, console: Console, urls: tuple[str, str], report: Report) -> int:
    publisher, relay = urls
    world = config.simulation.world
    watchers = [Watcher(i, world, config.box) for i in range(config.subscribers)]
    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        for watcher in watchers:
            subscriber = await stack.enter_async_context(
                connect(relay, name=f"demo-{watcher.index}")
            )
            watcher.box = watcher.box_at(0.0)
            watcher.view = await subscriber.subscribe(
                watcher.box, dataset="agents", rate=config.rate
            )
        async with asyncio.TaskGroup() as tasks:
            listeners = [tasks.create_task(_listen(w)) for w in watchers]
            mover = tasks.create_task(_move(watchers, started))
            display = tasks.create_task(_display(config, console, watchers, started))
            await _wait(config.duration)
            mover.cancel()
            if config.duration:
                await _settle(watchers)
            display.cancel()
            report["check"] = None
            status = await _check(console, publisher, watchers, report) if config.duration else 0
            elapsed, floor_ms = time.monotonic() - started, await _floor_ms(publisher)
            _summary(console, watchers, elapsed, floor_ms, report)
            await _egress(console, publisher, relay, report)
            for listener in listeners:
                listener.cancel()
        return status


async def _wait(duration: float) -> None:
    if duration:
        await asyncio.sleep(duration)
    else:
        await asyncio.Event().wait()  # until Ctrl-C


async def _listen(watcher: Watcher) -> None:
    assert watcher.view is not None
    async for update in watcher.view:
        if not update.no_update and update.tick_time:
            watcher.lags.append(update.received_at - update.tick_time)
        watcher.updates_after_move += 1


async def _move(watchers: list[Watcher], started: float) -> None:
    while True:
        await asyncio.sleep(MOVE_EVERY)
        seconds = time.monotonic() - started
        for watcher in watchers:
            assert watcher.view is not None
            watcher.box = watcher.box_at(seconds)
            await watcher.view.change(watcher.box)
            watcher.updates_after_move = 0


async def _settle(watchers: list[Watcher], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while any(w.updates_after_move < SETTLE_UPDATES for w in watchers):
        if time.monotonic() > deadline:
            return  # the check reports the views that did not settle
        await asyncio.sleep(0.1)


async def _check(console: Console, publisher: str, watchers: list[Watcher], report: Report) -> int:
    """Compare every subscriber's rows with the publisher's state in its box at its tick."""
    by_tick: dict[int, list[Watcher]] = {}
    captured: dict[int, dict[Any, dict[str, Any]]] = {}
    for watcher in watchers:
        assert watcher.view is not None
        captured[watcher.index] = dict(watcher.view.rows)
        by_tick.setdefault(watcher.view.tick, []).append(watcher)
    failures: list[str] = []
    async with open_reader(publisher) as reader:
        for tick, group in sorted(by_tick.items()):
            union = RegionUnion(tuple(w.box for w in group if w.box is not None))
            _, state = await reader.read("agents", union, tick)
            for watcher in group:
                problem = _compare(watcher, captured[watcher.index], state, tick)
                if problem:
                    failures.append(problem)
    report["check"] = {"passed": not failures, "failures": failures, "ticks": sorted(by_tick)}
    if failures:
        console.print(
            f"[bold red]check FAILED[/]: {len(failures)} of {len(watchers)} subscribers differ"
        )
        for failure in failures:
            console.print(f"  {failure}")
        return 1
    ticks = ", ".join(str(t) for t in sorted(by_tick))
    console.print(
        f"[bold green]check passed[/]: all {len(watchers)} subscribers' views equal the"
        f" publisher's state in their boxes (tick {ticks})"
    )
    return 0


def _compare(
    watcher: Watcher, rows: dict[Any, dict[str, Any]], state: dict[str, np.ndarray], tick: int
) -> str:
    assert watcher.box is not None and watcher.view is not None
    if watcher.updates_after_move < SETTLE_UPDATES:
        return f"subscriber {watcher.index}: its view did not settle after the last move"
    inside = watcher.box.match(state["x"], state["y"])
    expected = {
        key: {name: values[i].item() for name, values in state.items()}
        for i, key in zip(np.flatnonzero(inside), state["id"][inside].tolist(), strict=True)
    }
    if rows == expected:
        return ""
    missing = sorted(set(expected) - set(rows))
    extra = sorted(set(rows) - set(expected))
    different = sorted(k for k in set(rows) & set(expected) if rows[k] != expected[k])
    return (
        f"subscriber {watcher.index} at tick {tick}: {len(rows)} rows, expected {len(expected)};"
        f" missing {missing[:5]}, extra {extra[:5]}, different {different[:5]}"
    )


async def _display(
    config: DemoConfig, console: Console, watchers: list[Watcher], started: float
) -> None:
    plain = config.plain or config.json or not console.is_terminal
    previous = 0
    last = time.monotonic()
    if plain:
        while True:
            await asyncio.sleep(1.0)
            rate, previous, last = _rate(watchers, previous, last)
            console.print(_status_line(watchers, rate, time.monotonic() - started))
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            await asyncio.sleep(0.5)
            rate, previous, last = _rate(watchers, previous, last)
            live.update(_status_table(watchers, rate, time.monotonic() - started))


def _rate(watchers: list[Watcher], previous: int, last: float) -> tuple[float, int, float]:
    total = sum(w.view.updates for w in watchers if w.view is not None)
    now = time.monotonic()
    return (total - previous) / max(now - last, 1e-9), total, now


def _tick(watchers: list[Watcher]) -> int:
    return max((w.view.tick for w in watchers if w.view is not None), default=-1)


def _lag_ms(watcher: Watcher) -> float:
    return 1e3 * watcher.lags[-1] if watcher.lags else float("nan")


#: What the status says before any push: Spark's first micro-batch takes a while.
WAITING = "waiting for the publisher's first micro-batch (Spark is starting)"


def _status_line(watchers: list[Watcher], rate: float, elapsed: float) -> str:
    if _tick(watchers) < 0:
        return f"{elapsed:6.1f} s  {WAITING}"
    lags = [_lag_ms(w) for w in watchers if w.lags]
    median = float(np.median(lags)) if lags else float("nan")
    worst = max(lags, default=float("nan"))
    return (
        f"{elapsed:6.1f} s  tick {_tick(watchers):6d}  {rate:7.1f} updates/s delivered"
        f"  lag median {median:6.0f} ms  max {worst:6.0f} ms"
    )


def _status_table(watchers: list[Watcher], rate: float, elapsed: float) -> Group:
    summary = Table.grid(padding=(0, 2))
    tick = _tick(watchers)
    shown = str(tick) if tick >= 0 else "-"
    summary.add_row("elapsed", f"{elapsed:.1f} s", "publisher tick", shown)
    if tick < 0:
        summary.add_row(WAITING)
    summary.add_row("subscribers", str(len(watchers)), "updates/s delivered", f"{rate:.1f}")
    table = Table(title="subscribers, slowest first (lag = receipt - tick time)")
    for column in ("subscriber", "box centre", "rows", "updates", "tick", "lag ms"):
        table.add_column(column, justify="right")
    slowest = sorted(watchers, key=lambda w: -_lag_ms(w) if w.lags else 0.0)[:12]
    for watcher in slowest:
        assert watcher.view is not None and watcher.box is not None
        centre = ", ".join(
            f"{(lo + hi) / 2:.0f}" for lo, hi in zip(watcher.box.lo, watcher.box.hi, strict=True)
        )
        table.add_row(
            str(watcher.index),
            centre,
            str(len(watcher.view.rows)),
            str(watcher.view.updates),
            str(watcher.view.tick),
            f"{_lag_ms(watcher):.0f}",
        )
    return Group(summary, table)


async def _egress(console: Console, publisher: str, relay: str, report: Report) -> None:
    """What the publisher wrote to the relay and the relay to its subscribers (``GET /metrics``):
    the fan-out the relay does so the publisher does not."""
    try:
        upstream = await asyncio.to_thread(scrape, publisher)
        downstream = await asyncio.to_thread(scrape, relay)
    except OSError as exc:
        console.print(f"metrics: could not be read ({exc})")
        report["egress"] = None
        return
    sent = sum(v for k, v in upstream.items() if k.startswith("fanout_publisher_relay_bytes_sent"))
    report["egress"] = {
        "publisher_to_relay_bytes": sent,
        "relay_to_subscribers_bytes": downstream["fanout_relay_bytes_sent_total"],
        "pushes": downstream["fanout_relay_pushes_total"],
    }
    console.print(
        f"publisher -> relay: {sent / 1e6:.1f} MB; relay -> subscribers:"
        f" {downstream['fanout_relay_bytes_sent_total'] / 1e6:.1f} MB in"
        f" {downstream['fanout_relay_pushes_total']:.0f} pushes (metrics: {_http(relay)}/metrics,"
        f" {_http(publisher)}/metrics)"
    )


def _http(url: str) -> str:
    return url.replace("ws://", "http://", 1)


async def _floor_ms(publisher: str) -> float | None:
    """The publisher's shortest micro-batch (``GET /metrics``), or None if it has none yet or
    its metrics cannot be read."""
    try:
        values = await asyncio.to_thread(scrape, publisher)
    except OSError:
        return None
    seconds = values.get('fanout_publisher_micro_batch_fastest_seconds{dataset="agents"}')
    return None if seconds is None else seconds * 1e3


def _summary(
    console: Console,
    watchers: list[Watcher],
    elapsed: float,
    floor_ms: float | None,
    report: Report,
) -> None:
    lags = np.array([lag for w in watchers for lag in w.lags]) * 1e3
    updates = sum(w.view.updates for w in watchers if w.view is not None)
    report |= {"seconds": elapsed, "subscribers": len(watchers), "updates": updates}
    report["floor_ms"] = floor_ms
    report["lag_ms"] = (
        {"p50": float(np.percentile(lags, 50)), "p99": float(np.percentile(lags, 99))}
        if len(lags)
        else None
    )
    line = (
        f"ran {elapsed:.1f} s: {updates} updates to {len(watchers)} subscribers"
        f" ({updates / elapsed:.1f}/s)"
    )
    if len(lags):
        p50 = float(np.percentile(lags, 50))
        line += f"; lag p50 {p50:.0f} ms, p99 {np.percentile(lags, 99):.0f} ms"
        # A tick waits for the micro-batch running when it happens, then for its own: about
        # 1.5 micro-batches is as fresh as the pipeline can be (docs/concepts.md).
        if floor_ms:
            line += f"; floor (fastest micro-batch) {floor_ms:.0f} ms: p50 {p50 / floor_ms:.1f}x"
        else:
            line += "; floor unknown (no micro-batch measured)"
    console.print(line)
