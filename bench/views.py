"""Benchmark the coverage algebra and the topic index; print one JSON object.

Run ``.venv/bin/python bench/views.py``; it also writes ``bench/results/views.json``.

* ``covers_ms_median_N``: median time of ``covers(index, view)`` for a box view against a
  :class:`CoverIndex` holding N boxes (what a relay keeps and updates incrementally). The held
  boxes are scattered over a world sized so that every N sees the same density (each point of
  the world lies in about 1.5 held boxes), so roughly half the views are covered. Target: under
  1 ms for N = 10,000 on one core.
* ``residual_ms_median_N``: the same for ``residual``, which must find every uncovered piece.
* ``covers_ms_median_sphere_10000``: a sphere view (cells along its curve) against 10,000 boxes.
* ``topic_matches_per_s``: topic names matched per second by a TopicIndex holding 100,000
  filters (exact names, ``+`` and ``#`` wildcards); half the topics are named by some filter,
  half are random (mostly misses). Target: at least 200,000.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views import Box, CoverIndex, Sphere, View, covers, residual
from fanout.views.topic.index import TopicIndex

HELD_COUNTS = (10, 100, 1_000, 10_000)
VIEWS_PER_COUNT = 2_000
TOPIC_FILTERS = 100_000
TOPICS_MATCHED = 300_000
RESULTS = Path(__file__).parent / "results" / "views.json"


def random_box(rng: random.Random, world: float, low: float, high: float) -> Box:
    x, y = rng.uniform(0, world), rng.uniform(0, world)
    width, height = rng.uniform(low, high), rng.uniform(low, high)
    return Box((x, y), (x + width, y + height))


def median_ms(call: Callable[[View], object], views: list[View]) -> float:
    """Return the median wall time of ``call(view)`` over the views, in milliseconds."""
    times = []
    for view in views:
        start = time.perf_counter()
        call(view)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def bench_covers(results: dict[str, object]) -> None:
    for count in HELD_COUNTS:
        rng = random.Random(count)
        # Held boxes average 50 x 50: a world of side sqrt(count * 2500 / 1.5) is held about
        # 1.5 deep everywhere, whatever the count.
        world = math.sqrt(count * 2500 / 1.5)
        index = CoverIndex(random_box(rng, world, 20, 80) for _ in range(count))
        views: list[View] = [random_box(rng, world, 10, 40) for _ in range(VIEWS_PER_COUNT)]
        results[f"covers_ms_median_{count}"] = round(median_ms(partial(covers, index), views), 4)
        results[f"residual_ms_median_{count}"] = round(
            median_ms(partial(residual, index), views), 4
        )
        results[f"covered_fraction_{count}"] = round(
            sum(covers(index, view) for view in views) / len(views), 3
        )
        if count == HELD_COUNTS[-1]:
            spheres: list[View] = [
                Sphere((rng.uniform(0, world), rng.uniform(0, world)), rng.uniform(5, 20))
                for _ in range(VIEWS_PER_COUNT // 4)
            ]
            results[f"covers_ms_median_sphere_{count}"] = round(
                median_ms(partial(covers, index), spheres), 4
            )


def topic_filters(rng: random.Random, count: int) -> list[str]:
    """Filters over ``fleet/<region>/<vehicle>/<sensor>``: 70% exact, 20% ``+``, 10% ``#``."""
    filters = []
    for _ in range(count):
        region, vehicle = f"r{rng.randrange(50)}", f"v{rng.randrange(20_000)}"
        sensor = rng.choice(["temp", "speed", "fuel", "position", "door"])
        shape = rng.random()
        if shape < 0.7:
            filters.append(f"fleet/{region}/{vehicle}/{sensor}")
        elif shape < 0.9:
            filters.append(f"fleet/+/{vehicle}/{sensor}")
        else:
            filters.append(f"fleet/{region}/{vehicle}/#")
    return filters


def bench_topics(results: dict[str, object]) -> None:
    rng = random.Random(7)
    index = TopicIndex()
    filters = topic_filters(rng, TOPIC_FILTERS)
    for sub_id, text in enumerate(filters):
        index.add(text, sub_id)
    # Half the topics are ones some subscriber named exactly (hits, which also meet the '+' and
    # '#' filters of the same vehicle), half are random vehicles (mostly misses).
    named = [text for text in filters if "+" not in text and "#" not in text]
    topics = [
        rng.choice(named)
        if i % 2
        else f"fleet/r{rng.randrange(50)}/v{rng.randrange(20_000)}/"
        f"{rng.choice(['temp', 'speed', 'fuel', 'position', 'door'])}"
        for i in range(TOPICS_MATCHED)
    ]
    start = time.perf_counter()
    delivered = sum(len(index.match(topic)) for topic in topics)
    elapsed = time.perf_counter() - start
    results["topic_matches_per_s"] = round(len(topics) / elapsed)
    results["topic_filters"] = TOPIC_FILTERS
    results["topic_subscribers_per_match_mean"] = round(delivered / len(topics), 3)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    results: dict[str, object] = {"machine": describe(), "calibration": calibrate()}
    bench_covers(results)
    bench_topics(results)
    write_results(results, RESULTS)


if __name__ == "__main__":
    main()
