"""The spatial MQTT benchmark's pure parts (testing/spatial.py), against brute-force oracles."""

from __future__ import annotations

import contextlib
import json
import select
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.testing.binaries import find, on_ci
from fanout.testing.needs import need
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.spatial import (
    CELL,
    CELLS,
    OWN_CORES_MAX,
    Search,
    boxes,
    cell_rows,
    cells_of,
    judge,
    tick_block,
    useful_rows,
)
from fanout.testing.world import VIEW_SIDE, WORLD, Entities

LOAD_SOURCE = Path(__file__).parents[2] / "bench" / "mqttload.c"

coordinates = st.floats(0, WORLD, allow_nan=False)
points = st.lists(st.tuples(coordinates, coordinates), max_size=60)
corners = st.tuples(
    st.floats(0, WORLD - VIEW_SIDE, allow_nan=False), st.floats(0, WORLD - VIEW_SIDE)
)


def box_at(corner: tuple[float, float]) -> tuple[float, float, float, float]:
    x, y = corner
    return (x, y, x + VIEW_SIDE, y + VIEW_SIDE)


@given(corners, points)
def test_useful_rows_counts_the_rows_inside_the_box(
    corner: tuple[float, float], rows: list[tuple[float, float]]
) -> None:
    box = box_at(corner)
    expected = sum(1 for x, y in rows if box[0] <= x < box[2] and box[1] <= y < box[3])
    xs = np.array([x for x, _ in rows], dtype=np.float64)
    ys = np.array([y for _, y in rows], dtype=np.float64)
    assert useful_rows(box, xs, ys) == expected


@given(corners, points)
def test_a_box_subscribes_to_every_cell_holding_a_row_inside_it_and_no_other(
    corner: tuple[float, float], rows: list[tuple[float, float]]
) -> None:
    box = box_at(corner)
    topics = cells_of(box)
    assert 1 <= len(topics) <= 4 and len(set(topics)) == len(topics)
    for x, y in rows:
        if box[0] <= x < box[2] and box[1] <= y < box[3]:
            cx, cy = min(int(x // CELL), CELLS - 1), min(int(y // CELL), CELLS - 1)
            assert f"cells/{cx}/{cy}" in topics
    for topic in topics:  # each one overlaps the box
        cx, cy = (int(v) for v in topic.split("/")[1:])
        assert cx * CELL < box[2] and (cx + 1) * CELL > box[0]
        assert cy * CELL < box[3] and (cy + 1) * CELL > box[1]


@given(points)
def test_cell_rows_puts_each_row_once_in_its_cell(rows: list[tuple[float, float]]) -> None:
    xy = np.array(rows, dtype=np.float64).reshape(-1, 2).T
    ids = np.arange(len(rows), dtype=np.int64)
    bounds, sorted_rows = cell_rows(ids, xy)
    assert len(bounds) == CELLS * CELLS + 1 and bounds[0] == 0 and bounds[-1] == len(rows)
    assert sorted(sorted_rows["id"].tolist()) == ids.tolist()
    for cell in range(CELLS * CELLS):
        for row in sorted_rows[bounds[cell] : bounds[cell + 1]]:
            x, y = rows[int(row["id"])]
            assert (min(int(x // CELL), CELLS - 1), min(int(y // CELL), CELLS - 1)) == divmod(
                cell, CELLS
            )
            assert row["x"] == np.float32(x) and row["y"] == np.float32(y)


def test_boxes_lie_inside_the_world_and_depend_on_the_seed_only() -> None:
    chosen = boxes(200, seed=3)
    assert chosen == boxes(200, seed=3) and chosen != boxes(200, seed=4)
    for x0, y0, x1, y1 in chosen:
        assert min(x0, y0) >= 0 and max(x1, y1) <= WORLD
        assert np.isclose(x1 - x0, VIEW_SIDE) and np.isclose(y1 - y0, VIEW_SIDE)


def test_a_trial_whose_own_processes_saturate_is_invalid_not_failed() -> None:
    assert judge(1.0, 10.0, [0.1, 0.2], lost=0) == "pass"
    assert judge(0.94, 10.0, [0.1], lost=0) == "fail"
    assert judge(1.0, 101.0, [0.1], lost=0) == "fail"
    assert judge(1.0, 10.0, [0.1], lost=1) == "fail"
    assert judge(0.5, 500.0, [0.1, OWN_CORES_MAX + 0.01], lost=3) == "invalid"
    assert judge(1.0, 10.0, [OWN_CORES_MAX], lost=0) == "pass"


def run(search: Search, verdict_of: dict[int, str] | None, threshold: int) -> list[int]:
    tried = []
    while (n := search.next()) is not None:
        assert n not in tried and len(tried) < 100
        tried.append(n)
        verdict = (verdict_of or {}).get(n, "pass" if n <= threshold else "fail")
        search.record(n, verdict)  # type: ignore[arg-type]
    return tried


@given(st.integers(1, 300), st.integers(1, 5000), st.integers(0, 8000), st.integers(0, 4))
def test_the_search_finds_the_most_subscribers_of_a_monotone_broker(
    start: int, limit: int, threshold: int, bisections: int
) -> None:
    search = Search(start, limit, bisections)
    tried = run(search, None, threshold)
    passed = [n for n in tried if n <= threshold]
    assert search.best == max(passed, default=0)
    assert search.best <= threshold
    if search.failed is None:  # every N tried up to the limit passed
        assert search.bound == "limit" and (not tried or tried[-1] * 2 > limit)
    else:
        assert search.bound == "broker" and search.failed == min(n for n in tried if n > threshold)
        assert search.failed > search.best
        first_failure = next(i for i, n in enumerate(tried) if n > threshold)
        bisected = len(tried) - first_failure - 1
        assert bisected == bisections or (
            bisected < bisections and search.failed - search.best <= 1
        )


def test_an_invalid_trial_ends_the_search_and_says_the_clients_bound_it() -> None:
    search = Search(100, 10_000)
    tried = run(search, {400: "invalid"}, threshold=5000)
    assert tried == [100, 200, 400]
    assert search.best == 200 and search.bound == "clients"
    search = Search(100, 10_000)  # invalid while bisecting below a broker failure
    tried = run(search, {300: "invalid"}, threshold=350)
    assert tried == [100, 200, 400, 300]
    assert search.best == 200 and search.bound == "broker"


def compiled_load(into: Path) -> Path:
    """``bench/mqttload.c`` built as the benchmark builds it (skipped, or failed on CI, without
    libmosquitto's headers)."""
    need("mosquitto")
    compiler = shutil.which("cc") or shutil.which("gcc")
    binary = into / "mqttload"
    built = subprocess.run(
        [compiler or "cc", "-O2", "-o", str(binary), str(LOAD_SOURCE), "-lmosquitto"],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        reason = f"bench/mqttload.c needs libmosquitto-dev (and gcc): {built.stderr[-500:]}"
        if on_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return binary


def test_the_compiled_clients_count_every_row_the_per_cell_publisher_sent(tmp_path: Path) -> None:
    load = compiled_load(tmp_path)
    port = free_port()
    config = tmp_path / "mosquitto.conf"
    config.write_text(f"listener {port} {LOOPBACK}\nallow_anonymous true\n")
    chosen = boxes(3, seed=5)
    lines = [
        " ".join([*(f"{v:.3f}" for v in b), str(len(cells_of(b))), *cells_of(b)]) for b in chosen
    ]
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(
            subprocess.Popen([find("mosquitto") or "mosquitto", "-c", str(config)])
        )
        stack.callback(broker.kill)
        wait_for_port(port)
        subscribers = started(stack, [str(load), "subscribe", LOOPBACK, str(port)])
        write(subscribers, "3\n" + "".join(f"{line}\n" for line in lines))
        assert json.loads(read_line(subscribers)) == {"ready": 3}
        publisher = started(stack, [str(load), "publish", LOOPBACK, str(port), str(CELLS)])
        assert json.loads(read_line(publisher)) == {"ready": 1}
        start = time.time()
        write(subscribers, f"window {start:.6f} {start + 1.5:.6f} 0.5\n")
        world, sent = Entities(3000, seed=2), []
        for tick in range(1, 4):
            world.step(0.1)
            write(publisher, tick_block(tick, time.time(), world.ids, world.xy))
            sent.append(world.xy.copy())
        reports = [json.loads(read_line(subscribers)) for _ in chosen]
        latencies = json.loads(read_line(subscribers))["latencies_ms"]
    for box, report in zip(chosen, reports, strict=True):
        topics = set(cells_of(box))
        edges = tuple(float(np.float32(round(v, 3))) for v in box)  # as the program reads them
        rows = useful = 0
        for xy in sent:
            cx = np.clip((xy[0] // CELL).astype(int), 0, CELLS - 1)
            cy = np.clip((xy[1] // CELL).astype(int), 0, CELLS - 1)
            mine = np.array([f"cells/{x}/{y}" in topics for x, y in zip(cx, cy, strict=True)])
            rows += int(mine.sum())
            xs, ys = xy.astype(np.float32)
            useful += useful_rows(edges, xs[mine], ys[mine])  # type: ignore[arg-type]
        assert rows > useful > 0
        assert report["ticks"] == 3 and report["messages"] == 3 * len(topics)
        assert report["rows"] == rows and report["useful"] == useful and report["lost"] == 0
        assert report["bytes"] > 16 * rows
    assert len(latencies) == sum(r["messages"] for r in reports)


def started(stack: contextlib.ExitStack, command: list[str]) -> subprocess.Popen[bytes]:
    process = stack.enter_context(
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    )
    stack.callback(process.kill)
    return process


def write(process: subprocess.Popen[bytes], data: str | bytes) -> None:
    assert process.stdin is not None
    process.stdin.write(data.encode() if isinstance(data, str) else data)
    process.stdin.flush()


def read_line(process: subprocess.Popen[bytes], timeout: float = 20.0) -> bytes:
    """A line of ``process``'s output, failing the test if none comes within ``timeout``."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"{process.args} printed nothing within {timeout} s"
    line = process.stdout.readline()
    assert line, f"{process.args} exited ({process.wait()})"
    return line


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((LOOPBACK, port), 0.2).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)
