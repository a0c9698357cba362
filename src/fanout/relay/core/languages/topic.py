"""MQTT topic filters in the relay's algebra: release's probes (``relay.core.release``)."""

from __future__ import annotations

from collections.abc import Hashable

from fanout.relay.core.release import ReleasePart
from fanout.views import View, topic
from fanout.views.topic import TopicFilter


class TopicRelease(ReleasePart):
    """Topic filters found by their literal levels before the first wildcard: a filter meets
    another only if either's literal prefix starts with the other's."""

    def meets(self, a: View, b: View) -> bool:
        if isinstance(a, TopicFilter) and isinstance(b, TopicFilter):
            return topic.meets(a, b)
        return True

    def registered(self, view: View) -> list[Hashable] | None:
        if not isinstance(view, TopicFilter):
            return None
        prefix = _literal_prefix(view)
        return [("exact", prefix), *(("within", prefix[:end]) for end in range(len(prefix) + 1))]

    def probes(self, view: View) -> list[Hashable] | None:
        if not isinstance(view, TopicFilter):
            return None
        prefix = _literal_prefix(view)
        shorter = [("exact", prefix[:end]) for end in range(len(prefix))]
        return [*shorter, ("within", prefix)]


def _literal_prefix(view: TopicFilter) -> tuple[str, ...]:
    levels = view.levels
    for at, level in enumerate(levels):
        if level in ("+", "#"):
            return levels[:at]
    return levels


RELEASE = TopicRelease()
