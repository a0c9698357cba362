"""Topic datasets (index ``topic``): messages by topic, views that are MQTT topic filters.

A filter's rows come from the match index (``views.topic.index``): every distinct filter of the
dataset is matched in one pass over its topics, once per buffer generation
(``relay.keyed.TopicMatches``). A filter is acquired upstream without its ``$share/group/``: the
relay keeps every retained message, whichever member of a group it serves.
"""

from __future__ import annotations

from fanout.relay.keyed import TopicMatches
from fanout.relay.kinds.base import Parts
from fanout.relay.kinds.keyed import KeyedKind
from fanout.relay.state import Positions
from fanout.views import View
from fanout.views.topic import TopicFilter
from fanout.wire.messages import DatasetInfo


class TopicKind(KeyedKind):
    """A ``topic`` dataset at the relay (``relay.kinds.base.DatasetKind``)."""

    language = (TopicFilter, "MQTT topic filters")
    STATS = ("topic_passes", "topic_rows_not_topics")

    def __init__(self, info: DatasetInfo, parts: Parts) -> None:
        super().__init__(info, parts)
        self._matches = TopicMatches()

    def widened(self, piece: View) -> View:
        """The filter without its ``$share/group/``."""
        assert isinstance(piece, TopicFilter)
        return TopicFilter(piece.topic_filter)

    def positions(self, view: View) -> Positions:
        """The rows the filter matches, every subscribed filter matched in the same pass."""
        assert isinstance(view, TopicFilter)
        buffer, info = self.state.buffer, self.state.info
        subscribed = self._parts.downstream
        return self._matches.positions(
            view, buffer.active, info, buffer.generation, lambda: subscribed.views(self.name)
        )

    def stats(self) -> dict[str, float]:
        """Passes over the topics, and rows whose topic is no topic name."""
        return {
            "topic_passes": self._matches.passes,
            "topic_rows_not_topics": self._matches.not_topics,
        }
