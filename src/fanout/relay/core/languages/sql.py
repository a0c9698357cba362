"""SQL in the relay's algebra: release's probes (``relay.core.release``).

A SQL primitive (a ``SqlBox``) is found by its table and, among that table's, by the range of
the column their boxes constrain most often: two primitives whose hulls on a column are apart
share no row.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from fanout.relay.core.release import ReleasePart
from fanout.views import View, sql
from fanout.views.sql import SqlBox


class SqlRelease(ReleasePart):
    """SQL primitives found by table, then by hull (see the module)."""

    def meets(self, a: View, b: View) -> bool:
        if isinstance(a, SqlBox) and isinstance(b, SqlBox):
            return sql.meets(a, b)
        return True

    def registered(self, view: View) -> list[Hashable] | None:
        return [("sql", view.table)] if isinstance(view, SqlBox) else None

    def probes(self, view: View) -> list[Hashable] | None:
        return [("sql", view.table)] if isinstance(view, SqlBox) else None

    def among(self, views: Sequence[View]) -> Callable[[View], list[int]] | None:
        return _Hulls(views).overlapping


class _Hulls:
    """SQL primitives of one table with their hulls on one column (the one their boxes
    constrain most often), so that those whose hull overlaps a view's are found at once."""

    def __init__(self, views: Sequence[View]) -> None:
        boxes = [view for view in views if isinstance(view, SqlBox)]
        counts = Counter(
            column
            for view in boxes
            for box in view.boxes
            for column, values in box.ranges
            if values.domain == "num" and not values.null
        )
        self.column = counts.most_common(1)[0][0] if counts else None
        hulls = [_hull(view, self.column) for view in views]
        self.low = np.array([low for low, _ in hulls], dtype=np.float64)
        self.high = np.array([high for _, high in hulls], dtype=np.float64)

    def overlapping(self, view: View) -> list[int]:
        """The positions of the primitives whose hull overlaps ``view``'s."""
        low, high = _hull(view, self.column)
        close = (self.low <= high) & (self.high >= low)
        positions: list[int] = np.flatnonzero(close).tolist()
        return positions


def _hull(view: View, column: str | None) -> tuple[float, float]:
    """The closed range of ``column`` that ``view``'s rows may take (unbounded where a box does
    not constrain it, lets NULL in, or is not numeric; empty for no boxes)."""
    unbounded = (-math.inf, math.inf)
    if column is None or not isinstance(view, SqlBox):
        return unbounded
    low, high = math.inf, -math.inf
    for box in view.boxes:
        values = dict(box.ranges).get(column)
        if values is None or values.null or values.domain != "num":
            return unbounded
        for interval in values.intervals:  # a float rounds monotonically: never apart wrongly
            low = min(low, -math.inf if interval.low is None else float(interval.low))
            high = max(high, math.inf if interval.high is None else float(interval.high))
    return low, high


RELEASE = SqlRelease()
