"""The box algebra under SQL views: boxes over columns and unions of boxes (CA 3197003 [0161],
step 830: does the union of held subscriptions cover query Q? becomes box arithmetic). Rules:

1. A box gives some columns a value set each (``views.sql.values``); an unmentioned column is
   unconstrained. A box holds the rows whose every constrained column is in its set.
2. A union of boxes is a list of boxes, not necessarily disjoint.
3. :func:`subtract` is exact over continuous domains; boxes incomparable on a shared column take
   nothing from each other: never a wrong "covered".
4. The algebra works on mappings (column key -> value set), keyed as callers like (by table, or
   atoms); :class:`Box` is the wire form.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

import msgspec

from fanout.errors import InvalidView
from fanout.views.sql.values import (
    EVERYTHING,
    ValueSet,
    comparable,
    complement,
    intersect,
    meets,
    union,
    within,
)

K = TypeVar("K", bound=Hashable)


class Box(msgspec.Struct, frozen=True):
    """A conjunction of per-column value sets; a column it does not mention is unconstrained.

    ``ranges`` is sorted by column and leaves out unconstrained columns, so equal boxes compare
    equal. A box whose value set for some column is empty selects nothing.

    Raises:
        InvalidView: a column appears twice.
    """

    ranges: tuple[tuple[str, ValueSet], ...] = ()

    def __post_init__(self) -> None:
        kept = (
            (column.lower(), values) for column, values in self.ranges if not values.is_everything()
        )
        ranges = tuple(sorted(kept, key=lambda item: item[0]))
        columns = [column for column, _ in ranges]
        if len(set(columns)) != len(columns):
            raise InvalidView(f"a box constrains a column twice: {columns}")
        if ranges != self.ranges:
            msgspec.structs.force_setattr(self, "ranges", ranges)

    @classmethod
    def of(cls, mapping: Mapping[str, ValueSet]) -> Box:
        """Build a box from a column -> value set mapping."""
        return cls(tuple(mapping.items()))

    def as_map(self) -> dict[str, ValueSet]:
        """Return the box as a column -> value set mapping (for the algebra below)."""
        return dict(self.ranges)

    def is_empty(self) -> bool:
        """Return True if the box selects nothing."""
        return any(values.is_empty() for _, values in self.ranges)


# ---------------------------------------------------------------------------------------------
# Boxes and unions of boxes, as mappings (column key -> value set; absent key = unconstrained)

_SIMPLIFY_AT = 32  # subtracting many haves fragments the residual; tidy it up past this many boxes


def box_intersect(a: Mapping[K, ValueSet], b: Mapping[K, ValueSet]) -> dict[K, ValueSet] | None:
    """Return the box of points in both boxes, or None if they do not meet.

    Raises:
        ValueError: the boxes constrain a column over different domains.
    """
    result = dict(a)
    for key, values in b.items():
        both = intersect(result[key], values) if key in result else values
        if both.is_empty():
            return None
        result[key] = both
    return result


def box_meets(a: Mapping[K, ValueSet], b: Mapping[K, ValueSet]) -> bool:
    """Return True if two comparable boxes share a point (faster than :func:`box_intersect`)."""
    return all(meets(a[key], values) for key, values in b.items() if key in a)


def boxes_comparable(a: Mapping[K, ValueSet], b: Mapping[K, ValueSet]) -> bool:
    """Return True if every column both boxes constrain has one domain in both."""
    return all(comparable(a[key], values) for key, values in b.items() if key in a)


def box_within(a: Mapping[K, ValueSet], b: Mapping[K, ValueSet]) -> bool:
    """Return True if box ``a`` lies inside box ``b`` (False if they are incomparable)."""
    for key, values in b.items():
        if key in a:
            if not within(a[key], values):
                return False
        elif not values.is_everything():
            return False  # a is unconstrained where b is constrained
    return True


def box_subtract(a: Mapping[K, ValueSet], b: Mapping[K, ValueSet]) -> list[dict[K, ValueSet]]:
    """Return ``a`` minus ``b`` as disjoint boxes.

    Peels ``a`` one of ``b``'s columns at a time: the slice of ``a`` outside ``b`` on that column
    is a piece of the result; the slice inside carries on to the next column. If the boxes are
    incomparable, nothing can be said about their overlap and ``a`` is returned whole.
    """
    if not boxes_comparable(a, b) or not box_meets(a, b):
        return [dict(a)]
    pieces: list[dict[K, ValueSet]] = []
    rest = dict(a)
    for key, values in b.items():
        current = rest.get(key, EVERYTHING)
        outside = intersect(current, complement(values))
        if not outside.is_empty():
            pieces.append({**rest, key: outside})
        rest[key] = intersect(current, values)
    return pieces


def subtract(
    boxes: Iterable[Mapping[K, ValueSet]], minus: Iterable[Mapping[K, ValueSet]]
) -> list[dict[K, ValueSet]]:
    """Return the union of ``boxes`` minus the union of ``minus``, as a simplified union of boxes.

    Exact over the algebra's continuous domains; boxes of ``minus`` that are incomparable with a
    box of ``boxes`` take nothing away from it.
    """
    left = [_clean(box) for box in boxes]
    for taken in minus:
        left = [piece for box in left for piece in box_subtract(box, taken)]
        if not left:
            return []
        if len(left) > _SIMPLIFY_AT:
            left = simplify(left)
    return simplify(left)


def simplify(boxes: Iterable[Mapping[K, ValueSet]]) -> list[dict[K, ValueSet]]:
    """Return the same union with fewer boxes: drop boxes inside others, merge neighbours.

    Two boxes merge when they agree on every column but one; the merged box holds the union of
    their value sets on that column.
    """
    current = [_clean(box) for box in boxes]
    while True:
        tidied = _merge(_drop_covered(current))
        if len(tidied) == len(current):
            return tidied
        current = tidied


def _clean(box: Mapping[K, ValueSet]) -> dict[K, ValueSet]:
    """Copy a box, leaving out the columns it does not constrain."""
    return {key: values for key, values in box.items() if not values.is_everything()}


def _drop_covered(boxes: list[dict[K, ValueSet]]) -> list[dict[K, ValueSet]]:
    """Drop every box that lies inside another (of two equal boxes, keep the first)."""
    kept: list[dict[K, ValueSet]] = []
    for i, box in enumerate(boxes):
        covered = any(
            other.keys() <= box.keys()  # cheap first: a box is unconstrained where it lacks a key
            and box_within(box, other)
            and (j < i or not box_within(other, box))
            for j, other in enumerate(boxes)
            if j != i
        )
        if not covered:
            kept.append(box)
    return kept


Signature = tuple[K, frozenset[tuple[K, ValueSet]]]  # (column, every other column's values)


def _merge(boxes: list[dict[K, ValueSet]]) -> list[dict[K, ValueSet]]:
    """Merge boxes that agree on all columns but one, in one pass keyed by that agreement."""
    merged: list[dict[K, ValueSet]] = []
    index: dict[Signature[K], int] = {}
    for box in boxes:
        found = _partner(box, merged, index)
        if found is None:
            merged.append(box)
            _index(index, box, len(merged) - 1)
            continue
        position, key = found
        for signature in _signatures(merged[position]):
            if index.get(signature) == position:
                del index[signature]
        joined = {**merged[position], key: union(merged[position][key], box[key])}
        if joined[key].is_everything():
            del joined[key]
        merged[position] = joined
        _index(index, joined, position)
    return merged


def _index(index: dict[Signature[K], int], box: Mapping[K, ValueSet], position: int) -> None:
    """Record a box's signatures; one already taken keeps its box (a later pass merges them)."""
    for signature in _signatures(box):
        index.setdefault(signature, position)


def _signatures(box: Mapping[K, ValueSet]) -> list[Signature[K]]:
    """Return, per column of a box, the column and the box's other columns' sets."""
    items = frozenset(box.items())
    return [(key, items - {(key, values)}) for key, values in box.items()]


def _partner(
    box: Mapping[K, ValueSet], merged: list[dict[K, ValueSet]], index: Mapping[Signature[K], int]
) -> tuple[int, K] | None:
    """Find an earlier box that differs from ``box`` on one comparable column only."""
    for signature in _signatures(box):
        position = index.get(signature)
        key = signature[0]
        if position is not None and comparable(merged[position][key], box[key]):
            return position, key
    return None


def hull(boxes: Sequence[Mapping[K, ValueSet]]) -> dict[K, ValueSet]:
    """Return the smallest box holding every box of a non-empty union (an over-approximation).

    Raises:
        ValueError: the boxes constrain a column over different domains.
    """
    keys = set(boxes[0]).intersection(*boxes[1:])
    result: dict[K, ValueSet] = {}
    for key in keys:
        values = boxes[0][key]
        for box in boxes[1:]:
            values = union(values, box[key])
        if not values.is_everything():
            result[key] = values
    return result
