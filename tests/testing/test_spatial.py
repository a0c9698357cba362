"""The spatial MQTT benchmark's pure parts (testing/spatial.py), against brute-force oracles."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fanout.testing.spatial import (
    CELL,
    CELLS,
    OWN_CORES_MAX,
    Search,
    boxes,
    cell_rows,
    cells_of,
    judge,
    useful_rows,
)
from fanout.testing.world import VIEW_SIDE, WORLD

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
