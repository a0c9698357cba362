"""What one MQTT client may read and write: topic filters granted, and denied (docs/security.md,
"MQTT"). Pure. Rules:

1. A topic is readable if a ``read`` filter matches it and no ``deny`` filter does; writable
   the same with ``write``. ``None`` grants every topic; ``()`` none.
2. A SUBSCRIBE filter is served as its intersection with the rules, as the WebSocket side serves
   a topic view (``relay.core.rules.effective``): it is refused (SUBACK 0x87) only when that
   intersection is empty or every part of it is denied; otherwise it is taken as asked and each
   message it matches goes out only if readable (rule 1), so a partly allowed filter delivers
   exactly its allowed part, retained messages and ``$share`` groups included.
3. Filters follow MQTT matching: a filter starting with a wildcard matches no ``$`` topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fanout.errors import InvalidView, Unauthorized
from fanout.relay.core.rules import effective
from fanout.views.anyof import members_of
from fanout.views.topic import TopicFilter, covers
from fanout.views.topic.syntax import filter_regex, parse_filter

#: The rules' dataset name in ``effective``'s terms: a client's filters all read one namespace.
_TOPICS = "mqtt"


def _compiled(filters: tuple[str, ...] | None) -> tuple[re.Pattern[str], ...] | None:
    if filters is None:
        return None
    return tuple(filter_regex(parse_filter(f).levels) for f in filters)


@dataclass(frozen=True)
class Rights:
    """A client's topic rights (rule 1).

    Attributes:
        read: filters whose topics it may receive (None: all).
        write: filters whose topics it may publish to (None: all).
        deny: filters whose topics it may neither receive nor publish to.

    Raises:
        InvalidView: a filter is not a valid MQTT topic filter.
    """

    read: tuple[str, ...] | None = None
    write: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    _read: tuple[re.Pattern[str], ...] | None = field(init=False, repr=False, compare=False)
    _write: tuple[re.Pattern[str], ...] | None = field(init=False, repr=False, compare=False)
    _deny: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_read", _compiled(self.read))
        object.__setattr__(self, "_write", _compiled(self.write))
        object.__setattr__(self, "_deny", _compiled(self.deny) or ())

    @property
    def nothing(self) -> bool:
        """Whether it grants no topic at all, read or write."""
        return self.read == () and self.write == ()

    def may_read(self, topic: str) -> bool:
        """Whether a message on ``topic`` may reach the client (rule 1)."""
        return _allowed(self._read, self._deny, topic)

    def may_write(self, topic: str) -> bool:
        """Whether the client may publish to ``topic`` (rule 1)."""
        return _allowed(self._write, self._deny, topic)

    def may_subscribe(self, topic_filter: str) -> bool:
        """Whether some topic ``topic_filter`` (without its ``$share/group/``) matches is
        readable (rule 2)."""
        view = TopicFilter(topic_filter)
        if self.read is not None:
            try:
                view_or_any = effective(view, _TOPICS, "topic", {_TOPICS: self.read})
            except Unauthorized:  # the intersection is empty
                return False
            served = [m for m in members_of(view_or_any) if isinstance(m, TopicFilter)]
        else:
            served = [view]
        if not self.deny:
            return True
        denied = [TopicFilter(d) for d in self.deny]
        return not all(covers(denied, part) for part in served)


def _allowed(
    granted: tuple[re.Pattern[str], ...] | None, denied: tuple[re.Pattern[str], ...], topic: str
) -> bool:
    if granted is not None and not any(g.fullmatch(topic) for g in granted):
        return False
    return not any(d.fullmatch(topic) for d in denied)


def check_filters(filters: tuple[str, ...], where: str) -> None:
    """Raises:
    InvalidView: one of ``filters`` is not a valid topic filter (the message says ``where``).
    """
    for text in filters:
        try:
            parts = parse_filter(text)
        except InvalidView as exc:
            raise InvalidView(f"{where}: {exc}") from None
        if parts.share_group is not None:
            raise InvalidView(f"{where}: a rule cannot be a $share filter ({text!r})")
