"""The match index: which subscribers' topic filters match a published topic name.

Filters with wildcards live in a trie over their levels (a child per literal level, a ``+``
child, a ``#`` slot): matching walks the literal and ``+`` children and collects ``#`` slots, so
its cost depends on the topic and the wildcard branches, not on the filters held. Filters without
wildcards sit in a dict keyed by the filter. Shared filters (``$share/group/f``, MQTT 5.0 4.8.2)
live in a second trie: :meth:`TopicIndex.match` returns every member,
:meth:`TopicIndex.match_shared` them per shared subscription.

The nodes are laid out as IPCOM000235838D's rows (a filter prefix, each level followed by ``/``,
-> its children and exact subscribers), kept in memory; ``mqtt.matchtable`` keeps the same rows
in Redis (docs/mqtt.md, "How it is built").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from typing import Generic, TypeVar

from fanout.views.topic.syntax import MAX_TOPIC_BYTES, parse_filter, topic_levels

Bag = TypeVar("Bag", bound=Sized)


class _Node(Generic[Bag]):
    """One filter prefix: its literal children, its ``+`` child, and two subscriber slots."""

    __slots__ = ("children", "here", "multi", "plus")

    def __init__(self) -> None:
        self.children: dict[str, _Node[Bag]] = {}
        self.plus: _Node[Bag] | None = None
        self.here: Bag | None = None
        """Subscribers of the filter that ends at this prefix."""
        self.multi: Bag | None = None
        """Subscribers of this prefix followed by ``#``."""

    def is_empty(self) -> bool:
        return not (self.children or self.plus or self.here or self.multi)


class _Trie(Generic[Bag]):
    """A trie of filters whose slots hold a ``Bag`` of subscribers each."""

    def __init__(self, new_bag: Callable[[], Bag]) -> None:
        self.root: _Node[Bag] = _Node()
        self.new_bag = new_bag

    def bag(self, levels: tuple[str, ...]) -> Bag:
        """The slot of a filter, creating its nodes and slot when missing."""
        node = self.root
        for level in _prefix(levels):
            node = self._child(node, level)
        if levels[-1] == "#":
            if node.multi is None:
                node.multi = self.new_bag()
            return node.multi
        if node.here is None:
            node.here = self.new_bag()
        return node.here

    def find(self, levels: tuple[str, ...]) -> Bag | None:
        """The slot of a filter, or None when nobody holds it."""
        path = self._path(levels)
        if path is None:
            return None
        return path[-1].multi if levels[-1] == "#" else path[-1].here

    def prune(self, levels: tuple[str, ...]) -> None:
        """Drop a filter's emptied slot and the nodes it leaves without content, bottom up."""
        path = self._path(levels)
        if path is None:
            return
        last = path[-1]
        if levels[-1] == "#" and not last.multi:
            last.multi = None
        elif levels[-1] != "#" and not last.here:
            last.here = None
        for level, node, parent in zip(
            reversed(_prefix(levels)), reversed(path[1:]), reversed(path[:-1]), strict=True
        ):
            if not node.is_empty():
                break
            if level == "+":
                parent.plus = None
            else:
                del parent.children[level]

    def _path(self, levels: tuple[str, ...]) -> list[_Node[Bag]] | None:
        """The nodes from the root to a filter's node, or None when some are missing."""
        path = [self.root]
        for level in _prefix(levels):
            node = path[-1]
            child = node.plus if level == "+" else node.children.get(level)
            if child is None:
                return None
            path.append(child)
        return path

    def walk(self, levels: list[str]) -> list[Bag]:
        """The non-empty slots of every filter matching a topic given as its levels."""
        found: list[Bag] = []
        root = self.root
        first = levels[0]
        child = root.children.get(first)
        nodes = [] if child is None else [child]
        if not first.startswith("$"):  # wildcards skip '$' first levels [MQTT-4.7.2-1]
            if root.multi:
                found.append(root.multi)
            if root.plus is not None:
                nodes.append(root.plus)
        for level in levels[1:]:
            if not nodes:
                return found
            next_nodes = []
            for node in nodes:
                if node.multi:
                    found.append(node.multi)
                child = node.children.get(level)
                if child is not None:
                    next_nodes.append(child)
                if node.plus is not None:
                    next_nodes.append(node.plus)
            nodes = next_nodes
        for node in nodes:
            if node.here:
                found.append(node.here)
            if node.multi:
                found.append(node.multi)  # '#' also matches the parent level (MQTT 4.7.1.2)
        return found

    def _child(self, node: _Node[Bag], level: str) -> _Node[Bag]:
        if level == "+":
            if node.plus is None:
                node.plus = _Node()
            return node.plus
        child = node.children.get(level)
        if child is None:
            child = node.children[level] = _Node()
        return child


class TopicIndex:
    """Subscriber ids by topic filter, answering "who wants this topic?" quickly.

    Every (filter, subscriber id) pair is held at most once; adding it again changes nothing.
    """

    def __init__(self) -> None:
        self._exact: dict[str, set[int]] = {}
        self._wild: _Trie[set[int]] = _Trie(set)
        self._shared: _Trie[dict[str, set[int]]] = _Trie(dict)
        self._size = 0
        self._shared_size = 0

    def __len__(self) -> int:
        """The number of (filter, subscriber id) pairs held."""
        return self._size

    def add(self, filter: str, sub_id: int) -> None:
        """Subscribe ``sub_id`` to ``filter`` (plain or ``$share/group/f``).

        Raises:
            InvalidView: ``filter`` is not a valid MQTT topic filter.
        """
        parts = parse_filter(filter)
        if parts.share_group is not None:
            members = self._shared.bag(parts.levels).setdefault(filter, set())
        elif _has_wildcard(filter):
            members = self._wild.bag(parts.levels)
        else:
            members = self._exact.setdefault(filter, set())
        if sub_id not in members:
            members.add(sub_id)
            self._size += 1
            if parts.share_group is not None:
                self._shared_size += 1

    def remove(self, filter: str, sub_id: int) -> None:
        """Unsubscribe ``sub_id`` from ``filter``.

        Raises:
            InvalidView: ``filter`` is not a valid MQTT topic filter.
            KeyError: ``sub_id`` does not hold ``filter``.
        """
        parts = parse_filter(filter)
        if parts.share_group is not None:
            self._remove_shared(parts.levels, filter, sub_id)
            self._shared_size -= 1
        elif _has_wildcard(filter):
            members = self._wild.find(parts.levels)
            _discard(members, filter, sub_id)
            if not members:
                self._wild.prune(parts.levels)
        else:
            members = self._exact.get(filter)
            _discard(members, filter, sub_id)
            if not members:
                del self._exact[filter]
        self._size -= 1

    def _remove_shared(self, levels: tuple[str, ...], filter: str, sub_id: int) -> None:
        groups = self._shared.find(levels) or {}
        members = groups.get(filter)
        _discard(members, filter, sub_id)
        if not members:
            del groups[filter]
            if not groups:
                self._shared.prune(levels)

    def match(self, topic: str) -> set[int]:
        """The ids subscribed to any filter matching ``topic``, shared filters' members included.

        Raises:
            InvalidView: ``topic`` is not a valid topic name.
        """
        levels = _topic_levels(topic)
        found = self._wild.walk(levels)
        exact = self._exact.get(topic)
        if exact:
            found.append(exact)
        if self._shared_size:
            for groups in self._shared.walk(levels):
                found.extend(groups.values())
        if not found:
            return set()
        return set().union(*found)

    def match_shared(self, topic: str) -> dict[str, set[int]]:
        """The members of every matching shared subscription, by its ``$share/group/f`` text.

        MQTT 5.0 section 4.8.2 sends each message to one member of each matching shared
        subscription; the caller chooses which.

        Raises:
            InvalidView: ``topic`` is not a valid topic name.
        """
        levels = _topic_levels(topic)
        if not self._shared_size:
            return {}
        return {
            text: set(members)
            for groups in self._shared.walk(levels)
            for text, members in groups.items()
        }

    def __iter__(self) -> Iterator[tuple[str, int]]:
        """Every (filter, subscriber id) pair held, in no particular order."""
        for text, members in self._exact.items():
            yield from ((text, sub_id) for sub_id in members)
        for text, members in _slots(self._wild.root):
            yield from ((text, sub_id) for sub_id in members)
        for _, groups in _slots(self._shared.root):
            for text, members in groups.items():
                yield from ((text, sub_id) for sub_id in members)


def _has_wildcard(filter: str) -> bool:
    return "+" in filter or "#" in filter


def _discard(members: set[int] | None, filter: str, sub_id: int) -> None:
    """Remove ``sub_id`` from a filter's members, or raise KeyError when it is not there."""
    if members is None or sub_id not in members:
        raise KeyError((filter, sub_id))
    members.remove(sub_id)


def _topic_levels(topic: str) -> list[str]:
    """Validate and split a topic name, with a fast path for the common case."""
    if (
        topic
        and topic.isascii()
        and len(topic) <= MAX_TOPIC_BYTES
        and "+" not in topic
        and "#" not in topic
        and "\x00" not in topic
    ):
        return topic.split("/")
    return topic_levels(topic)  # the slow path, which names what is wrong


def _prefix(levels: tuple[str, ...]) -> tuple[str, ...]:
    """The levels leading to a filter's node: all of them, or all but a final ``#``."""
    return levels[:-1] if levels[-1] == "#" else levels


def _slots(root: _Node[Bag]) -> Iterator[tuple[str, Bag]]:
    """Every non-empty slot of a trie with its filter text (iteratively: filters can be deep)."""
    stack: list[tuple[_Node[Bag], str]] = [(root, "")]
    while stack:
        node, prefix = stack.pop()  # prefix: the node's levels, each followed by '/'
        if node.here:
            yield prefix[:-1], node.here
        if node.multi:
            yield prefix + "#", node.multi
        stack.extend((child, f"{prefix}{level}/") for level, child in node.children.items())
        if node.plus is not None:
            stack.append((node.plus, prefix + "+/"))
