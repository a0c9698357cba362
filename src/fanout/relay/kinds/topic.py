"""Topic datasets (index ``topic``): messages by topic, views that are MQTT topic filters.

A filter's rows come from the match index (``views.topic.index``): every distinct filter of the
dataset is matched in one pass over its topics, once per buffer generation
(:class:`TopicMatches`). A filter is acquired upstream without its ``$share/group/``: the
relay keeps every retained message, whichever member of a group it serves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fanout.errors import InvalidView
from fanout.relay.data.buffers import Positions, Table
from fanout.relay.data.keyedstate import KeyedState
from fanout.relay.kinds.base import Parts, RelaySide
from fanout.relay.kinds.selected import PlainLanguage, Views, selecting
from fanout.views import View
from fanout.views.anyof import AnyOf
from fanout.views.members import members
from fanout.views.topic import TopicFilter
from fanout.views.topic.index import TopicIndex
from fanout.wire.messages import DatasetInfo


def unshared(piece: View) -> View:
    """A filter as acquired upstream: without its ``$share/group/``."""
    assert isinstance(piece, TopicFilter)
    return TopicFilter(piece.topic_filter)


def topic_filters(state: KeyedState) -> PlainLanguage:
    """The language of a ``topic`` dataset."""
    return PlainLanguage(state, Views(TopicFilter, "MQTT topic filters"), unshared)


class TopicSelector:
    """The rows topic filters match (``selected.Selector``), every subscribed filter matched in
    the same pass."""

    def __init__(self, state: KeyedState, parts: Parts) -> None:
        self.state = state
        self.matches = TopicMatches()
        self._parts = parts

    def positions(self, view: View) -> Positions:
        """The rows the filter (any of the filters) matches."""
        buffer, info = self.state.buffer, self.state.info
        subscribed = self._parts.downstream
        found: Positions | None = None
        for member in view.views if isinstance(view, AnyOf) else (view,):
            assert isinstance(member, TopicFilter)
            positions = self.matches.positions(
                member, buffer.active, info, buffer.generation, lambda: subscribed.views(info.name)
            )
            found = positions if found is None else np.union1d(found, positions)
        assert found is not None
        return found

    def stats(self) -> dict[str, float]:
        """Passes over the topics, and rows whose topic is no topic name."""
        return {
            "topic_passes": self.matches.passes,
            "topic_rows_not_topics": self.matches.not_topics,
        }


@dataclass
class TopicMatches:
    """The active rows each topic filter of a dataset matches, for one buffer generation.

    Attributes:
        passes: passes made over the dataset's topics (one per generation and new filters).
        not_topics: rows those passes found whose topic is no topic name (matched by nothing).
    """

    passes: int = 0
    not_topics: int = 0
    _generation: int = -1
    _positions: dict[str, Positions] = field(default_factory=dict)

    def positions(
        self,
        view: TopicFilter,
        table: Table,
        info: DatasetInfo,
        generation: int,
        wanted: Callable[[], Iterable[View]],
    ) -> Positions:
        """Sorted positions of the rows ``view`` matches in ``table`` (the active buffer).

        The first call for a generation matches every topic filter ``wanted()`` lists (the
        dataset's views) in one pass: each topic walks the match index once, whatever the number of
        filters.
        """
        if generation != self._generation:
            self._generation, self._positions = generation, {}
        found = self._positions.get(view.filter)
        if found is None:
            filters = {
                member.filter
                for v in wanted()
                for member in (v.views if isinstance(v, AnyOf) else (v,))
                if isinstance(member, TopicFilter)
            } | {view.filter}
            self._match(sorted(filters - set(self._positions)), table, info)
            found = self._positions[view.filter]
        return found

    def _match(self, filters: Sequence[str], table: Table, info: DatasetInfo) -> None:
        index = TopicIndex()
        for number, text in enumerate(filters):
            index.add(text, number)
        hits: list[list[int]] = [[] for _ in filters]
        for position, topic in enumerate(table.column(info.index_columns[0]).tolist()):
            try:
                numbers = index.match(topic)
            except InvalidView:  # null, empty, a wildcard...: counted, matched by nothing
                self.not_topics += 1
                continue
            for number in numbers:
                hits[number].append(position)
        for text, positions in zip(filters, hits, strict=True):
            self._positions[text] = np.asarray(positions, dtype=np.intp)
        self.passes += 1


SIDE = RelaySide(
    selecting(topic_filters, TopicSelector, selects=members),
    ("topic_passes", "topic_rows_not_topics"),
)
"""Index ``topic`` at the relay."""
