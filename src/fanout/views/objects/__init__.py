"""Object-path views: QNX PPS style paths with attribute filters (US 9,026,567; docs/concepts.md,
"Views"; syntax in :mod:`fanout.views.objects.syntax`).

A view is the set of (object, attribute) cells it delivers:

- scope: the one object named, or with ``.all`` every object directly in the directory;
- attributes: the bare names in ``f=``, or every attribute when it names none;
- filters: an object is in the view when any ``f=`` comparison holds for it (an attribute set to
  a matching value), or always when there are none.

Options that say how or when data is delivered (``delta``, ``wait``, ...) are ignored by
coverage. Coverage is exact, by primitives and value classes (docs/objects.md, "How objects are
kept"); ``residual`` regroups the uncovered primitives into paths, or returns the view whole
when that is not expressible.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property

import numpy as np
import numpy.typing as npt

from fanout.views.base import ViewBase
from fanout.views.objects.syntax import (
    LONG_LONG_MAX,
    LONG_LONG_MIN,
    AttributeFilter,
    ParsedPath,
    as_long_long,
    parse_path,
)

Attributes = Mapping[str, object]

_ORDER: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "=": operator.eq,
    "!=": operator.ne,
}


class ObjectPath(ViewBase, tag="path", frozen=True, dict=True):
    """A subscription to PPS objects: ``/dir/obj``, ``/dir/.all``, with open options.

    ``path`` is the text as given, e.g. ``/pps/media/.all?wait`` or
    ``/pps/sensors/t1?delta,f=temp<37``; it is validated on construction and on decode.
    """

    path: str

    def __post_init__(self) -> None:
        """Validate the path (raises InvalidView) and keep its parsed parts."""
        _ = self._parsed

    @cached_property
    def _parsed(self) -> ParsedPath:
        return parse_path(self.path)

    @property
    def object_path(self) -> str:
        """The path without open options, e.g. ``/pps/media/.all``."""
        return self._parsed.object_path

    @property
    def directory(self) -> str:
        """The directory holding the object(s), e.g. ``/pps/media`` (``/`` at the root)."""
        return self._parsed.directory

    @property
    def object(self) -> str | None:
        """The object's name; None for ``.all``."""
        return self._parsed.object

    @property
    def all(self) -> bool:
        """True for ``.all``: every object in the directory."""
        return self._parsed.object is None

    @property
    def delta(self) -> bool:
        """Delta mode: deliver changed attributes only (a delivery option)."""
        return "delta" in self._parsed.flags

    @property
    def deltadir(self) -> bool:
        """Deliver the names of objects created and deleted in the directory (``.all`` only)."""
        return "deltadir" in self._parsed.flags

    @property
    def wait(self) -> bool:
        """Blocking reads (PPS clears O_NONBLOCK)."""
        return "wait" in self._parsed.flags

    @property
    def nopersist(self) -> bool:
        """The object should not survive a restart (a publisher option)."""
        return "nopersist" in self._parsed.flags

    @property
    def critical(self) -> bool:
        """A critical publisher: closing its write handle deletes the object's non-persistent
        attributes (the mount's writes)."""
        return "critical" in self._parsed.flags

    @property
    def notify(self) -> str | None:
        """The ``id:value`` of a ``notify=`` option: a mount's notification group."""
        return self._parsed.notify

    @property
    def backlog(self) -> int | None:
        """Bytes a delta reader's queue may hold (``backlog=KB``); None for the default."""
        return self._parsed.backlog

    @property
    def attributes(self) -> frozenset[str] | None:
        """The attribute names selected by ``f=``; None for every attribute."""
        return self._parsed.attributes

    @property
    def filters(self) -> tuple[AttributeFilter, ...]:
        """The ``f=`` value comparisons; an object passes when any holds."""
        return self._parsed.filters

    def in_scope(self, paths: Sequence[str] | npt.NDArray[np.str_]) -> npt.NDArray[np.bool_]:
        """Which object paths (without options) this view's path selects, vectorised."""
        names = np.asarray(paths, dtype=np.str_)
        if not self.all:
            return np.asarray(names == self.object_path, dtype=np.bool_)
        prefix = self.directory.rstrip("/") + "/"
        return np.asarray(
            np.strings.startswith(names, prefix)
            & (np.strings.str_len(names) > len(prefix))
            & (np.strings.find(names, "/", len(prefix)) < 0),
            dtype=np.bool_,
        )

    def match(
        self,
        paths: Sequence[str] | npt.NDArray[np.str_],
        attrs: Sequence[Attributes] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Which objects belong to this view.

        Args:
            paths: object paths without options, e.g. ``/pps/media/PlayCurrent``.
            attrs: each object's attributes, aligned with ``paths``; needed when the view has
                value filters.

        Returns:
            A boolean mask: in scope, and (when filters exist) passing one of them.

        Raises:
            ValueError: the view has value filters and ``attrs`` is missing or misaligned.
            TypeError: an attribute value is not a str, int, float, bool or None.
        """
        mask = self.in_scope(paths)
        if not self.filters:
            return mask
        if attrs is None or len(attrs) != len(mask):
            raise ValueError(
                f"{self.path!r} filters on attribute values: pass one attribute mapping per path"
            )
        for index in np.flatnonzero(mask).tolist():
            mask[index] = any(passes(flt, attrs[index]) for flt in self.filters)
        return mask


def parse(text: str) -> ObjectPath:
    """Parse a PPS object path with open options into a view.

    Raises:
        InvalidView: the text is not a valid object path (see ``views.objects.syntax``).
    """
    return ObjectPath(text)


def passes(flt: AttributeFilter, attrs: Attributes) -> bool:
    """Whether an object's attributes satisfy one value comparison.

    Integers within ``long long`` (and strings spelling them) and floats compare as numbers; other
    values as strings; ``true``/``false`` for booleans; None or a missing name never passes.

    Raises:
        TypeError: the attribute's value has another type.
    """
    value = comparable(attrs.get(flt.name))
    if value is None:
        return False
    if isinstance(flt.value, int):
        if isinstance(value, str):
            return flt.op == "!="  # a string is unequal to, and unordered with, every number
        return _ORDER[flt.op](value, flt.value)
    if isinstance(value, str):
        return (value == flt.value) == (flt.op == "=")
    return flt.op == "!="  # a number never equals a string that is not an integer


def comparable(value: object) -> int | float | str | None:
    """An attribute value as PPS filters compare it (see :func:`passes`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"  # PPS's ':b:' encoding
    if isinstance(value, int):
        return value if LONG_LONG_MIN <= value <= LONG_LONG_MAX else str(value)
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        number = as_long_long(value)
        return value if number is None else number
    raise TypeError(f"attribute value {value!r} is not a str, int, float, bool or None")


def covers(have: Sequence[ViewBase], view: ObjectPath) -> bool:
    """Whether the paths in ``have`` deliver every cell ``view`` needs (module docstring).

    Items of ``have`` that are not ObjectPaths are ignored.
    """
    haves = _relevant(have, view)
    return all(_primitive_covered(haves, *primitive) for primitive in _primitives(view))


def meets(a: ObjectPath, b: ObjectPath) -> bool:
    """Whether some object is in the scope of both paths (``f=`` filters aside: True may mean
    only that the scopes meet)."""
    if a.all or b.all:
        return a.directory.rstrip("/") == b.directory.rstrip("/")
    return a.object_path == b.object_path


def residual(have: Sequence[ViewBase], view: ObjectPath) -> list[ObjectPath]:
    """ObjectPaths that, together with ``have``, cover ``view``; empty when it is covered.

    Each keeps the view's path and delivery options with ``f=`` narrowed to what is uncovered;
    the view itself is returned when no part of it is covered.
    """
    haves = _relevant(have, view)
    primitives = _primitives(view)
    uncovered = [p for p in primitives if not _primitive_covered(haves, *p)]
    if len(uncovered) == len(primitives):
        return [view] if uncovered else []
    by_attribute: dict[str | None, list[AttributeFilter | None]] = {}
    for attribute, comparison in uncovered:
        by_attribute.setdefault(attribute, []).append(comparison)
    by_comparisons: dict[tuple[AttributeFilter | None, ...], list[str | None]] = {}
    for attribute, comparisons in by_attribute.items():
        by_comparisons.setdefault(tuple(comparisons), []).append(attribute)
    return [_narrowed(view, names, comparisons) for comparisons, names in by_comparisons.items()]


Primitive = tuple[str | None, AttributeFilter | None]
"""(attribute, comparison): None for "every attribute" and for "any object"."""


def _primitives(view: ObjectPath) -> list[Primitive]:
    """The view as a union of (attribute, comparison) pieces."""
    attributes: list[str | None] = [None]
    if view.attributes is not None:
        attributes = [*sorted(view.attributes)]
    comparisons: list[AttributeFilter | None] = list(view.filters) or [None]
    return [(name, flt) for name in attributes for flt in comparisons]


def _relevant(have: Sequence[ViewBase], view: ObjectPath) -> list[ObjectPath]:
    """The haves whose scope includes the view's (an object the view names, or any object)."""
    return [
        item
        for item in have
        if isinstance(item, ObjectPath)
        and item.directory == view.directory
        and (item.all or item.object == view.object)
    ]


def _primitive_covered(
    haves: Sequence[ObjectPath], attribute: str | None, comparison: AttributeFilter | None
) -> bool:
    """Whether every object putting a cell in this primitive has that cell delivered.

    For "every attribute" the hardest cell is an attribute no path names, which only haves
    delivering every attribute include; the other cells are then covered too.
    """
    serving = [
        h
        for h in haves
        if h.attributes is None or (attribute is not None and attribute in h.attributes)
    ]
    if any(not h.filters for h in serving):
        return True
    offered = [flt for h in serving for flt in h.filters]
    # The cell exists when the comparison holds and the attribute is set. Attributes are
    # independent, so the have's disjunction is implied iff one of these conditions alone
    # implies the have's comparisons on the same attribute.
    required: dict[str, AttributeFilter | None] = {}
    if attribute is not None:
        required[attribute] = None  # "is set"
    if comparison is not None:
        required[comparison.name] = comparison
    return any(
        _implies(condition, [flt for flt in offered if flt.name == name])
        for name, condition in required.items()
    )


def _implies(condition: AttributeFilter | None, offered: Sequence[AttributeFilter]) -> bool:
    """Whether every value meeting ``condition`` (None: any value) meets one of ``offered``."""
    cells = _ValueCells([*offered, *([] if condition is None else [condition])])
    needed = cells.everything if condition is None else cells.mask(condition)
    held = 0
    for flt in offered:
        held |= cells.mask(flt)
    return needed & ~held == 0


class _ValueCells:
    """The classes of attribute values that some comparisons tell apart, as bit positions.

    With integer constants c1 < ... < cn, the reals fall into 2n + 1 cells (below c1, c1, between
    c1 and c2, ..., above cn); after them come one cell per string constant and one for every
    other string. A comparison's value set is the union of some cells: a bit mask.
    """

    def __init__(self, comparisons: Sequence[AttributeFilter]) -> None:
        numbers = sorted({c.value for c in comparisons if isinstance(c.value, int)})
        strings = sorted({c.value for c in comparisons if isinstance(c.value, str)})
        self.point = {number: 2 * index + 1 for index, number in enumerate(numbers)}
        real_cells = 2 * len(numbers) + 1
        self.string = {text: real_cells + index for index, text in enumerate(strings)}
        self.reals = (1 << real_cells) - 1
        self.everything = (1 << (real_cells + len(strings) + 1)) - 1

    def mask(self, comparison: AttributeFilter) -> int:
        if isinstance(comparison.value, str):
            cell = 1 << self.string[comparison.value]
            return cell if comparison.op == "=" else self.everything & ~cell
        point = 1 << self.point[comparison.value]
        below = point - 1
        above = self.reals & ~(below | point)
        return {
            "<": below,
            "<=": below | point,
            ">": above,
            ">=": above | point,
            "=": point,
            "!=": self.everything & ~point,
        }[comparison.op]


def _narrowed(
    view: ObjectPath,
    attributes: Sequence[str | None],
    comparisons: Sequence[AttributeFilter | None],
) -> ObjectPath:
    """The view's path with ``f=`` listing only these attributes and comparisons."""
    specs = [name for name in attributes if name is not None]
    specs += [str(flt) for flt in comparisons if flt is not None]
    options = [*view._parsed.delivery_options, *(["f=" + "+".join(specs)] if specs else [])]
    return ObjectPath(view.object_path + ("?" + ",".join(options) if options else ""))


__all__ = ["AttributeFilter", "ObjectPath", "comparable", "covers", "parse", "passes", "residual"]
