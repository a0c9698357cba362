"""MQTT topic filters in the relay's algebra: release's probes (``relay.core.release``) and
access rules (``relay.core.rules``: a filter narrowed to the rules it meets)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from fanout.relay.core.release import ReleasePart
from fanout.relay.core.rules import Outside, RulesPart
from fanout.views import View, topic
from fanout.views.anyof import AnyOf
from fanout.views.topic import TopicFilter
from fanout.views.topic import covers as topic_covers


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


class TopicRules(RulesPart):
    """A topic filter not inside the rules: narrowed to them."""

    def narrow(self, view: View, granted: Sequence[View], dataset: str) -> View:
        if isinstance(view, TopicFilter):
            return _narrow_topic(view, granted, dataset)
        return super().narrow(view, granted, dataset)


def _narrow_topic(view: TopicFilter, granted: Sequence[View], dataset: str) -> View:
    """A topic filter intersected with topic rules: the filters matching what it and each rule
    both match (``topic_meet``), one filter or any of several, each keeping its share group."""
    meets: list[str] = []
    for rule in granted:
        if not isinstance(rule, TopicFilter):
            continue
        meet = topic_meet(view.topic_filter, rule.topic_filter)
        if meet is None or _topic_within(meet, meets):
            continue
        meets = [kept for kept in meets if not _topic_within(kept, [meet])] + [meet]
    if not meets:
        raise Outside(f"the filter {view} matches none of your rules on {dataset!r}")
    share = view.share_group
    filters = [TopicFilter(meet if share is None else f"$share/{share}/{meet}") for meet in meets]
    return filters[0] if len(filters) == 1 else AnyOf(tuple(filters))


def _topic_within(meet: str, others: Sequence[str]) -> bool:
    """Whether the filters ``others`` match every topic ``meet`` matches (it adds nothing)."""
    return bool(others) and topic_covers([TopicFilter(o) for o in others], TopicFilter(meet))


def topic_meet(a: str, b: str) -> str | None:
    """The filter matching exactly the topics both MQTT filters match, or None if none does.

    Wildcards meet anything at their level (``+``: one level, ``#``: the rest, including the
    parent level itself, as MQTT 4.7.1.2 has it); topics starting with ``$`` are matched by no
    filter starting with a wildcard (MQTT 4.7.2).
    """
    left, right = a.split("/"), b.split("/")
    if _dollar_against_wildcard(left, right) or _dollar_against_wildcard(right, left):
        return None
    out: list[str] = []
    for index in range(max(len(left), len(right)) + 1):
        x = left[index] if index < len(left) else None
        y = right[index] if index < len(right) else None
        if x == "#":
            return "/".join(out + right[index:])
        if y == "#":
            return "/".join(out + left[index:])
        if x is None or y is None:
            return "/".join(out) if x is None and y is None else None
        if x == "+":
            out.append(y)
        elif y in ("+", x):
            out.append(x)
        else:
            return None
    return "/".join(out)


def _dollar_against_wildcard(levels: list[str], other: list[str]) -> bool:
    return levels[0].startswith("$") and other[0] in ("+", "#")


RELEASE = TopicRelease()
RULES = TopicRules()
