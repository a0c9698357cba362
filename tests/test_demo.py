"""The demo's status: what it says before the first push and after."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fanout.demo import WAITING, Watcher, _status_line


def watcher(index: int, tick: int | None, lags: list[float]) -> Watcher:
    view: Any = None if tick is None else SimpleNamespace(tick=tick, updates=3, rows={})
    return Watcher(index=index, world=1000.0, side=100.0, view=view, lags=lags)


def test_before_the_first_push_it_says_it_is_waiting_for_spark() -> None:
    line = _status_line([watcher(0, None, []), watcher(1, None, [])], 0.0, 3.0)
    assert line.endswith(WAITING)
    assert "nan" not in line


def test_after_pushes_it_shows_the_tick_and_the_lags() -> None:
    line = _status_line([watcher(0, 42, [0.25]), watcher(1, 41, [0.75])], 10.0, 12.0)
    assert "tick     42" in line
    assert "lag median    500 ms" in line
    assert "max    750 ms" in line
