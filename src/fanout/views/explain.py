"""EXPLAIN for subscriptions: is a view covered by what is held, and what is missing?

``fanout explain --dataset D --view VIEW --have VIEW ...`` prints :meth:`Explanation.render`:
the relay planner's step S430/S440 (founding document [78]-[81]) for one view, made visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanout.views.algebra import covers, residual
from fanout.views.kinds import View
from fanout.views.region import REGIONS, Box, Region
from fanout.views.text import parse, to_text

# Sample points per axis when estimating a residual's share of a curved view: 512**2 in 2-D,
# 64**3 in 3-D, about a quarter of a million either way.
_SAMPLES_PER_AXIS = {2: 512, 3: 64}


@dataclass(frozen=True)
class Explanation:
    """The coverage of one view by the views held.

    Attributes:
        kind: the view kind (``region``, ``sql``, ``topic`` or ``path``).
        view: the view explained.
        have: the views held.
        covered: whether ``have`` covers ``view``.
        residual: views that, with ``have``, cover ``view`` ([] when covered).
    """

    kind: str
    view: View
    have: list[View]
    covered: bool
    residual: list[View]

    def render(self) -> str:
        """Return a readable multi-line EXPLAIN of the coverage."""
        lines = [f"EXPLAIN {self.kind} view {to_text(self.view)}"]
        if self.have:
            lines.append(f"have ({len(self.have)}):")
            lines.extend(f"  {i}. {to_text(view)}" for i, view in enumerate(self.have, 1))
        else:
            lines.append("have: nothing")
        lines.append("result: covered" if self.covered else "result: not covered")
        if not self.residual:
            lines.append("residual: none")
            return "\n".join(lines)
        count = len(self.residual)
        summary = f"residual ({count} {'primitive' if count == 1 else 'primitives'}"
        share = self._residual_share()
        lines.append(f"{summary}{', ' + share if share else ''}):")
        lines.extend(f"  {to_text(view)}" for view in self.residual)
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        """The coverage as plain data (``fanout explain --json``): views as text;
        ``residual_share``, for a region view, the share of its area (volume) the residual
        holds (None: not a region, or no area), estimated unless ``residual_exact``."""
        share = None
        if isinstance(self.view, REGIONS):
            pieces = [piece for piece in self.residual if isinstance(piece, REGIONS)]
            share = residual_share(self.view, pieces) if pieces else 0.0
        return {
            "kind": self.kind,
            "view": to_text(self.view),
            "have": [to_text(view) for view in self.have],
            "covered": self.covered,
            "residual": [to_text(view) for view in self.residual],
            "residual_share": share,
            "residual_exact": isinstance(self.view, Box),
        }

    def _residual_share(self) -> str:
        """Describe the share of a region view's area or volume that the residual holds."""
        if not isinstance(self.view, REGIONS):
            return ""
        noun = "area" if self.view.dims == 2 else "volume"
        pieces = [piece for piece in self.residual if isinstance(piece, REGIONS)]
        share = residual_share(self.view, pieces)
        if share is None:
            return f"the view has no {noun}"
        exact = isinstance(self.view, Box)
        return f"{'' if exact else '~'}{share:.1%} of the view's {noun}"


def explain(kind: str, view: str | View, have: Sequence[str]) -> Explanation:
    """Parse a view and the views held, and explain the view's coverage.

    Args:
        kind: ``region``, ``sql``, ``topic`` or ``path``.
        view: the view's text, or the view (an effective view under access rules, which may
            have no text of its own to read back).
        have: the held views' texts.

    Raises:
        InvalidView: a text that does not parse as a view of ``kind``, or a relative region.
    """
    parsed = parse(view, kind) if isinstance(view, str) else view
    held = [parse(text, kind) for text in have]
    return Explanation(
        kind=kind,
        view=parsed,
        have=held,
        covered=covers(held, parsed),
        residual=residual(held, parsed),
    )


def residual_share(view: Region, pieces: Sequence[Region]) -> float | None:
    """Return the fraction of ``view``'s area (volume) inside the union of ``pieces``.

    Exact for a box view (a residual of a box is disjoint boxes inside it); estimated on a
    grid of points for other views. None when the view has no area (volume).
    """
    if isinstance(view, Box):
        total = view.measure()
        if total == 0:
            return None
        inside = sum(piece.measure() for piece in pieces if isinstance(piece, Box))
        return min(1.0, inside / total)
    bounds = view.bounds()
    steps = _SAMPLES_PER_AXIS[view.dims]
    axes = [
        np.linspace(low, high, steps) if high > low else np.array([low])
        for low, high in zip(bounds.lo, bounds.hi, strict=True)
    ]
    grid = [column.ravel() for column in np.meshgrid(*axes, indexing="ij")]
    in_view = view.match(*grid)
    if not in_view.any() or bounds.measure() == 0:
        return None
    in_pieces = np.zeros_like(in_view)
    for piece in pieces:
        in_pieces |= piece.match(*grid)
    return float(np.count_nonzero(in_view & in_pieces) / np.count_nonzero(in_view))
