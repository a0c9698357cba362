"""bench/wirefloor.py: its search, and its compiled sender and receivers (bench/wirefloor.c) run
as the benchmark runs them, counting every frame once at each of WebSocket's three header sizes."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parents[2] / "bench"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wirefloor", BENCH / "wirefloor.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wirefloor"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


wirefloor = load()


def searched(threshold: int, clients_from: int | None = None, limit: int = 19_000) -> tuple:
    """``search`` against trials that pass up to ``threshold`` (and saturate the clients from
    ``clients_from``): the best N, the bound and the Ns tried."""

    def trial(n: int) -> object:
        verdict = "clients" if clients_from and n >= clients_from else "fail"
        return wirefloor.Trial(n, 200, verdict="pass" if n <= threshold else verdict)

    best, bound, trials = wirefloor.search(trial, 1250, limit, 0.125)
    return best, bound, [t.subscribers for t in trials]


def test_the_search_doubles_bisects_and_says_what_bounds_it() -> None:
    assert searched(6000) == (5625, "sender", [1250, 2500, 5000, 10000, 7500, 6250, 5625])
    assert searched(100) == (97, "sender", [1250, 625, 312, 156, 78, 117, 97, 107])
    assert searched(6000, clients_from=7000) == (5000, "clients", [1250, 2500, 5000, 10000])
    assert searched(50_000) == (19_000, "limit", [1250, 2500, 5000, 10000, 19000])


@pytest.mark.parametrize(("connections", "size"), [(100, 100), (100, 4600), (10, 70_000)])
def test_every_frame_due_in_the_window_is_received_once(
    tmp_path: Path, connections: int, size: int
) -> None:
    binary = wirefloor.build(tmp_path)
    args = argparse.Namespace(warmup=0.3, window=1.0, drain=0.5)
    trial = wirefloor.run_trial(binary, connections, size, args)
    slots = connections * round(args.window * wirefloor.PUSH_RATE)
    pushes = round(trial.pushes_per_s * args.window)
    assert trial.lost == 0 and pushes + trial.coalesced == slots and trial.frames == pushes
    assert trial.bytes_per_frame == size + (2 if size < 126 else 4 if size < 65536 else 10)
    assert 0 < trial.delivered_min <= 1.0 and trial.sender_cpu_us_per_push >= 0
    assert trial.p50_ms <= trial.p99_ms and trial.p99_send_ms <= trial.p99_ms + 1e-3
    assert len(trial.receivers_cores) == wirefloor.RECEIVERS
