"""The ``exact`` kind at the relay: a selecting kind whose rows are those of exactly the topic."""

from __future__ import annotations

import numpy as np

from fanout.relay.data.buffers import Positions
from fanout.relay.kinds.base import RelaySide
from fanout.relay.kinds.keyed import SelectingKind
from fanout.views import View
from fanout.views.topic import TopicFilter


class ExactTopics(SelectingKind):
    """An ``exact`` dataset at the relay (``relay.kinds.base.DatasetKind``)."""

    language = (TopicFilter, "topic names")

    def positions(self, view: View) -> Positions:
        """The active rows whose topic is the view's text."""
        assert isinstance(view, TopicFilter)
        topics = self.state.buffer.active.column(self.state.info.index_columns[0])
        return np.flatnonzero(np.asarray(topics, dtype=object) == view.topic_filter)


SIDE = RelaySide(ExactTopics)
"""Index ``exact`` at the relay."""
