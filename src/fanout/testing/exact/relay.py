"""The ``exact`` kind at the relay: a selecting kind whose rows are those of exactly the topic."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from fanout.relay.data.buffers import Array, Mask, Positions
from fanout.relay.data.keyedstate import KeyedState
from fanout.relay.kinds.base import Parts, RelaySide
from fanout.relay.kinds.selected import PlainLanguage, Views, selecting
from fanout.views import View
from fanout.views.topic import TopicFilter
from fanout.wire.messages import DatasetInfo


def topic_names(state: KeyedState) -> PlainLanguage:
    """Topic names, as topic filters (``publisher`` refuses wildcards)."""
    return PlainLanguage(state, Views(TopicFilter, "topic names"))


class ExactSelector:
    """The rows of exactly the view's topic (``relay.kinds.selected.Selector``)."""

    def __init__(self, state: KeyedState, parts: Parts) -> None:
        self.state = state

    def positions(self, view: View) -> Positions:
        """The active rows whose topic is the view's text."""
        assert isinstance(view, TopicFilter)
        topics = self.state.buffer.active.column(self.state.info.index_columns[0])
        return np.flatnonzero(np.asarray(topics, dtype=object) == view.topic_filter)

    def stats(self) -> dict[str, float]:
        """No counters."""
        return {}


def names_held(views: Iterable[View], rows: Mapping[str, Array], info: DatasetInfo) -> Mask:
    """The rows whose topic any of the primitives names (``relay.data.keyedstate.Picks``)."""
    names = {view.topic_filter for view in views if isinstance(view, TopicFilter)}
    if not rows:
        return np.zeros(0, dtype=bool)
    topics = rows[info.index_columns[0]].tolist()
    return np.fromiter((topic in names for topic in topics), dtype=bool, count=len(topics))


SIDE = RelaySide(selecting(topic_names, ExactSelector, names_held))
"""Index ``exact`` at the relay."""
