"""Topic views: MQTT topic filters, matching, and coverage (docs/concepts.md, "Views"; syntax and
matching rules in ``views.topic.syntax``). Coverage is exact:

- ``covers(have, view)``: no topic the view matches is missed by every usable have; one
  adversarial topic decides it (:func:`_covers_levels`), linear in the filters' length;
- a shared have ``$share/g/f`` counts only towards a view shared in the same group ``g``;
- ``residual(have, view)``: filters that with ``have`` cover the view; ``+`` levels are never
  split, so it is the view itself or the uncovered pieces of a trailing ``#``
  (``a/#`` with ``a/+/#`` held gives ``[a]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fanout.views.base import ViewBase
from fanout.views.topic.syntax import (
    MAX_TOPIC_BYTES,
    NOT_IN_NAMES,
    SHARE_PREFIX,
    FilterParts,
    arrow_regex,
    filter_regex,
    parse_filter,
    topic_levels,
)

if TYPE_CHECKING:
    import pyarrow as pa

Levels = tuple[str, ...]

# Stands for "a level no filter names" in the witness search: U+0000 never occurs in a valid
# filter (MQTT 4.7.3), so it differs from every literal level, and it does not start with '$'.
_FRESH = "\x00"

_SPLIT_LEVELS = 8
"""How many levels below a trailing '#' residual() splits at most."""


class TopicFilter(ViewBase, tag="topic", frozen=True, dict=True):
    """A subscription to the topics an MQTT topic filter matches (MQTT 4.7, 4.8.2).

    ``filter`` is the text as given, e.g. ``sensors/+/temp``, ``sport/#`` or
    ``$share/workers/jobs/#``. It is validated on construction and on decode.
    """

    filter: str

    def __post_init__(self) -> None:
        """Validate the filter (raises InvalidView) and keep its parsed parts."""
        _ = self._parts

    @cached_property
    def _parts(self) -> FilterParts:
        return parse_filter(self.filter)

    @property
    def share_group(self) -> str | None:
        """The share name of a ``$share/group/filter`` subscription; None when not shared."""
        return self._parts.share_group

    @property
    def topic_filter(self) -> str:
        """The filter that selects topics: the text without any ``$share/group/`` prefix."""
        return self._parts.topic_filter

    @property
    def levels(self) -> Levels:
        """``topic_filter`` split into levels."""
        return self._parts.levels

    def matches(self, topic: str) -> bool:
        """Whether this filter matches one topic name.

        Raises:
            InvalidView: ``topic`` is not a valid topic name.
        """
        topic_levels(topic)
        return filter_regex(self.levels).fullmatch(topic) is not None

    def match(self, topics: Sequence[str] | npt.NDArray[np.str_]) -> npt.NDArray[np.bool_]:
        """Vectorised matching over topic names already validated (e.g. when a batch was taken in).

        Args:
            topics: topic names, as a sequence or a numpy string array.

        Returns:
            A boolean mask, True where this filter matches the topic.
        """
        pattern = filter_regex(self.levels)
        count = len(topics)
        return np.fromiter(
            (pattern.fullmatch(topic) is not None for topic in topics), np.bool_, count
        )

    def match_arrow(self, topics: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
        """``match`` over an Arrow string array, in Arrow's compute kernels (no Python per
        topic). What is no topic name (null, empty, longer than 65,535 bytes, with U+0000 or a
        wildcard) is matched by no filter, as at a relay (``relay.kinds.topic``) and in Spark
        (``publisher.matching.topics``): ``#`` and ``+`` would otherwise match ``""``.

        Args:
            topics: topics as an Arrow string array.
        """
        # pyarrow is the relay's and the publisher's (their extras), not the subscriber's
        import pyarrow.compute as pc  # noqa: PLC0415

        mask = pc.match_substring_regex(topics, arrow_regex(self.levels))
        if self.levels[0] in ("+", "#"):  # rule 5: not topics starting with '$'
            mask = pc.and_(mask, pc.invert(pc.starts_with(topics, "$")))
        size = pc.binary_length(topics)
        named = pc.and_(
            pc.and_(pc.greater(size, 0), pc.less_equal(size, MAX_TOPIC_BYTES)),
            pc.invert(pc.match_substring_regex(topics, NOT_IN_NAMES)),
        )
        mask = pc.and_(mask, named)
        return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=np.bool_)


def parse(text: str) -> TopicFilter:
    """Parse a topic filter's text into a view.

    Raises:
        InvalidView: the filter is not a valid MQTT topic filter.
    """
    return TopicFilter(text)


def matches(filter: str, topic: str) -> bool:
    """Whether MQTT topic filter ``filter`` matches topic name ``topic`` (MQTT 4.7).

    A ``$share/group/f`` filter matches what ``f`` matches (MQTT 5.0 4.8.2).

    Raises:
        InvalidView: ``filter`` is not a valid topic filter or ``topic`` not a valid topic name.
    """
    levels = parse_filter(filter).levels
    topic_levels(topic)
    return filter_regex(levels).fullmatch(topic) is not None


def covers(have: Sequence[ViewBase], view: TopicFilter) -> bool:
    """Whether the filters in ``have`` deliver every message ``view`` needs.

    Args:
        have: views held (upstream); items that are not TopicFilters are ignored, shared ones
            count only for a view shared in the same group.
        view: the view to serve.

    Returns:
        True iff every topic ``view`` matches is matched by some usable filter in ``have``.
    """
    return _covers_levels(_usable_levels(have, view), view.levels)


def meets(a: TopicFilter, b: TopicFilter) -> bool:
    """Whether some topic name is matched by both filters (a shared filter by its filter)."""
    first, second = a.levels, b.levels
    for at in range(max(len(first), len(second))):
        x = first[at] if at < len(first) else None
        y = second[at] if at < len(second) else None
        if x == "#" or y == "#":  # the rest matches anything, this level included
            other = y if x == "#" else x
            if at == 0:
                return other is None or not other.startswith("$")  # rule 5
            # '#' also matches the parent: with the other filter ended there, the one topic
            # both match has `at` levels, and one empty level would be "", no topic at all.
            return not (other is None and at == 1 and "" in (first[0], second[0]))
        if x is None or y is None:
            return False  # one has more levels, and no '#' to take them
        if x == "+" or y == "+":
            if at == 0 and (y if x == "+" else x).startswith("$"):
                return False  # rule 5: a first-level wildcard matches no '$' topic
        elif x != y:
            return False
    return True


def residual(have: Sequence[ViewBase], view: TopicFilter) -> list[TopicFilter]:
    """Filters that, together with ``have``, cover ``view``; empty when ``have`` covers it.

    Each returned filter matches a subset of ``view``'s topics and keeps its share group. The
    result is the view itself, or the uncovered pieces of its trailing ``#`` split level by level
    (see the module docstring): a correct over-approximation when the exact residual is not
    expressible as filters.
    """
    haves = _usable_levels(have, view)
    # Splitting deeper than the haves reach, or than a few levels, does not pay.
    depth = min(max((len(levels) for levels in haves), default=0), len(view.levels) + _SPLIT_LEVELS)
    pieces = _residual_levels(haves, view.levels, depth)
    if pieces == [view.levels]:
        return [view]
    prefix = "" if view.share_group is None else f"{SHARE_PREFIX}{view.share_group}/"
    return [TopicFilter(prefix + "/".join(piece)) for piece in pieces]


def _usable_levels(have: Sequence[ViewBase], view: TopicFilter) -> list[Levels]:
    """The levels of the haves that can deliver ``view``'s messages (see module docstring)."""
    return [
        item.levels
        for item in have
        if isinstance(item, TopicFilter)
        and (item.share_group is None or item.share_group == view.share_group)
    ]


def _covers_levels(haves: Sequence[Levels], view: Levels) -> bool:
    """Exact coverage of one filter's topics by the union of others', all as levels.

    Reads one topic level by level, looking for a witness: a topic the view matches and no have
    does. Where the view has a literal level the topic must have it too; where the view has a
    wildcard the topic takes a level that no filter names, which only wildcards match, so it
    leaves the fewest haves still matching. Fewer haves matching can only make a witness easier
    to find, so if this topic (cut at any length the view accepts) is no witness, none is.
    """
    alive = [(levels, 0) for levels in haves]
    position = 0
    first = True
    nameless = False  # the topic read so far is one empty level: "", not a topic name
    while True:
        if not first:
            if any(_at_multilevel(levels, j) for levels, j in alive):
                return True  # a have's '#' matches every continuation of this prefix
            ends_here = _accepts(view, position) and not nameless
            if ends_here and not any(j == len(levels) for levels, j in alive):
                return False  # the topic read so far is a witness
        if position == len(view):
            return True  # the view matches no longer topic
        token = view[position]
        level = _FRESH if token in ("+", "#") else token
        nameless = first and level == ""
        position = position if token == "#" else position + 1
        alive = [
            (levels, after)
            for levels, j in alive
            if (after := _step(levels, j, level, first)) is not None
        ]
        first = False


def _at_multilevel(levels: Levels, position: int) -> bool:
    return position == len(levels) - 1 and levels[position] == "#"


def _accepts(levels: Levels, position: int) -> bool:
    """Whether a filter read up to ``position`` matches a topic that ends here."""
    return position == len(levels) or levels[position] == "#"


def _step(levels: Levels, position: int, level: str, first: bool) -> int | None:
    """The filter's position after reading one topic level, or None when it no longer matches."""
    if position == len(levels):
        return None
    token = levels[position]
    if token in ("+", "#"):
        if first and level.startswith("$"):
            return None  # wildcards skip '$' first levels [MQTT-4.7.2-1]
        return position if token == "#" else position + 1
    return position + 1 if token == level else None


def _residual_levels(haves: Sequence[Levels], view: Levels, depth: int) -> list[Levels]:
    """Uncovered pieces of ``view``; the view itself when splitting does not help."""
    if _covers_levels(haves, view):
        return []
    parts = _split_multilevel(view, depth)
    if parts is None:
        return [view]
    pieces = [piece for part in parts for piece in _residual_levels(haves, part, depth)]
    return [view] if pieces == parts else pieces


def _split_multilevel(view: Levels, depth: int) -> list[Levels] | None:
    """Split ``p/#`` into ``p`` and ``p/+/#`` while the haves reach that deep, else None.

    ``#`` alone is first read as ``+/#``: both match every topic not starting with ``$``.
    """
    if view[-1] != "#":
        return None
    parent = view[:-1] or ("+",)
    if len(parent) + 1 > depth:
        return None
    return [parent, (*parent, "+", "#")]


__all__ = [
    "TopicFilter",
    "covers",
    "matches",
    "parse",
    "residual",
]
