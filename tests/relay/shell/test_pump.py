"""The pump's look for stalled connections (relay/shell/pump.py): those pushed to or found busy
are looked at every pass, every other connection once a sweep; a stall past the limit closes
it, whichever way it was found."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from fanout.relay.config import Limits
from fanout.relay.core.links import Links
from fanout.relay.shell.pump import SWEEP, Pump


class Outbound:
    def __init__(self) -> None:
        self.writing_since: float | None = None
        self.closed: str | None = None
        self.asked = 0

    @property
    def idle(self) -> bool:
        return self.writing_since is None

    def stalled_for(self, now: float) -> float:
        self.asked += 1
        return 0.0 if self.writing_since is None else now - self.writing_since

    def close(self, reason: str) -> None:
        self.closed = reason


def pump(connections: int) -> tuple[Pump, dict[int, Outbound]]:
    open_ = {client: Outbound() for client in range(1, connections + 1)}
    core = SimpleNamespace(serving=SimpleNamespace(links=Links()))
    clients = SimpleNamespace(open=open_)
    config = SimpleNamespace(limits=Limits(stall_timeout=10.0))
    made = Pump(
        config,  # type: ignore[arg-type]
        core,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        clients=clients,  # type: ignore[arg-type]
        writer=None,  # type: ignore[arg-type]
        wake=asyncio.Event(),
        dispatch=lambda sends: None,
    )
    return made, open_


def test_idle_connections_are_each_looked_at_once_a_sweep() -> None:
    made, open_ = pump(1000)
    for now in range(SWEEP):
        made._close_stalled(float(now))
    assert {outbound.asked for outbound in open_.values()} == {1}


def test_a_busy_connection_is_looked_at_every_pass_and_closed_past_the_limit() -> None:
    made, open_ = pump(1000)
    open_[7].writing_since = 0.0
    assert not made._is_idle(7)  # the round found it busy: watched from now on
    asked = open_[7].asked
    made._close_stalled(5.0)
    made._close_stalled(5.5)
    assert open_[7].asked >= asked + 2 and open_[7].closed is None
    made._close_stalled(10.5)
    assert open_[7].closed is not None and "slow consumer" in open_[7].closed


def test_a_connection_stuck_on_a_frame_no_push_made_is_closed_by_the_sweep() -> None:
    made, open_ = pump(100)
    open_[3].writing_since = 0.0  # a control frame it never read; never found busy
    now = 0.0
    while open_[3].closed is None and now < 10.0 + SWEEP:
        made._close_stalled(now)
        now += 0.5
    assert open_[3].closed is not None and now <= 11.0
