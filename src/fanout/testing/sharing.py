"""The sharing benchmark's set-up, which ``bench/sharing.py`` runs and ``bench/sharingmodel.py``
models: ``AGENTS`` agents in a ``WORLD`` square, ``RELAYS`` relays, and subscribers whose box
views crowd around ``POINTS`` points of interest, so that many of them want the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Agents of the simulation, spread uniformly over the world.
AGENTS = 20_000
#: The side of the square world.
WORLD = 1000.0
#: Relays the subscribers are spread over.
RELAYS = 4
#: Points of interest the views crowd around.
POINTS = 50
#: The largest view side; sides are uniform in [VIEW_SIDE / 2, VIEW_SIDE].
VIEW_SIDE = 32.0
#: The seed of the points and the views.
SEED = 4


def points_of_interest(rng: np.random.Generator) -> np.ndarray:
    """``POINTS`` points, further apart (per axis, at least one) than two views can reach.

    A view lies within 3/4 of ``VIEW_SIDE`` of its point on each axis, so views of two points
    never meet.
    """
    spacing = 1.5 * VIEW_SIDE + 1.0
    points: list[np.ndarray] = []
    while len(points) < POINTS:
        point = rng.uniform(VIEW_SIDE, WORLD - VIEW_SIDE, 2)
        if all(np.max(np.abs(point - other)) > spacing for other in points):
            points.append(point)
    return np.array(points)


@dataclass(frozen=True)
class Views:
    """Every subscriber's point of interest and box (the first n are step n's subscribers)."""

    point: np.ndarray  # subscriber -> point index
    lo: np.ndarray  # subscriber -> (x0, y0)
    hi: np.ndarray  # subscriber -> (x1, y1)

    @classmethod
    def draw(cls, count: int, seed: int = SEED) -> Views:
        """``count`` views around seeded points of interest."""
        rng = np.random.default_rng(seed)
        points = points_of_interest(rng)
        point = rng.integers(0, POINTS, count)
        side = rng.uniform(VIEW_SIDE / 2, VIEW_SIDE, count)
        centre = points[point] + rng.uniform(-0.25, 0.25, (count, 2)) * side[:, None]
        half = side[:, None] / 2
        return cls(point, centre - half, centre + half)

    def box(self, index: int) -> list[list[float]]:
        """Subscriber ``index``'s box as ``[lo, hi]``."""
        return [self.lo[index].tolist(), self.hi[index].tolist()]
