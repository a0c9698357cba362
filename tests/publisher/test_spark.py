"""The publisher's Spark settings (``publisher.spark``)."""

from __future__ import annotations

import os

import pytest

from fanout.publisher.spark import local_cores


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[0]", 1),
        ("local[2, 4]", 2),
        ("local[*]", os.cpu_count() or 1),
        ("spark://127.0.0.1:7077", None),
        ("yarn", None),
    ],
)
def test_a_local_master_runs_tasks_on_its_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores
