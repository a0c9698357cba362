"""The topic match index, checked against matching every held filter one by one."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fanout.errors import InvalidView
from fanout.views.topic import matches
from fanout.views.topic.index import TopicIndex


def brute_match(pairs: set[tuple[str, int]], topic: str) -> set[int]:
    return {sub_id for text, sub_id in pairs if matches(text, topic)}


def test_match_finds_exact_wildcard_and_shared_filters() -> None:
    index = TopicIndex()
    index.add("sensors/s1/d1/temp", 1)
    index.add("sensors/+/d1/temp", 2)
    index.add("sensors/s1/#", 3)
    index.add("sensors/s2/#", 4)
    index.add("#", 5)
    index.add("$share/g/sensors/+/+/temp", 6)
    index.add("$share/g/sensors/+/+/temp", 7)
    assert index.match("sensors/s1/d1/temp") == {1, 2, 3, 5, 6, 7}
    assert index.match("sensors/s1") == {3, 5}  # '#' matches the parent level
    assert index.match("other") == {5}
    assert index.match_shared("sensors/s1/d1/temp") == {"$share/g/sensors/+/+/temp": {6, 7}}
    assert index.match_shared("other") == {}
    assert len(index) == 7


def test_each_share_group_is_its_own_shared_subscription() -> None:
    # MQTT 5.0 4.8.2: "$share/consumer1/sport/tennis/+" and "$share/consumer2/sport/tennis/+"
    # are distinct shared subscriptions; each gets every matching message once.
    index = TopicIndex()
    index.add("$share/consumer1/sport/tennis/+", 1)
    index.add("$share/consumer1/sport/tennis/+", 2)
    index.add("$share/consumer2/sport/tennis/+", 3)
    index.add("sport/tennis/+", 4)
    assert index.match_shared("sport/tennis/player1") == {
        "$share/consumer1/sport/tennis/+": {1, 2},
        "$share/consumer2/sport/tennis/+": {3},
    }
    assert index.match("sport/tennis/player1") == {1, 2, 3, 4}


def test_very_deep_filters_are_handled() -> None:
    index = TopicIndex()
    deep = "/".join(["a"] * 20000)
    index.add(deep + "/#", 1)
    index.add(deep.replace("a", "+", 1), 2)
    assert index.match(deep) == {1, 2}
    assert sorted(index) == [(deep.replace("a", "+", 1), 2), (deep + "/#", 1)]
    index.remove(deep + "/#", 1)
    assert index.match(deep) == {2}


def test_dollar_topics_skip_leading_wildcards() -> None:
    index = TopicIndex()
    for sub_id, text in enumerate(["#", "+/monitor/Clients", "$SYS/#", "$SYS/monitor/+", "+/#"]):
        index.add(text, sub_id)
    assert index.match("$SYS/monitor/Clients") == {2, 3}
    assert index.match("SYS/monitor/Clients") == {0, 1, 4}


def test_adding_twice_holds_one_pair_and_remove_raises_when_absent() -> None:
    index = TopicIndex()
    index.add("a/+", 1)
    index.add("a/+", 1)
    assert len(index) == 1
    index.remove("a/+", 1)
    assert len(index) == 0
    assert index.match("a/b") == set()
    with pytest.raises(KeyError):
        index.remove("a/+", 1)
    with pytest.raises(KeyError):
        index.remove("a/b", 2)
    with pytest.raises(KeyError):
        index.remove("$share/g/a", 2)


def test_invalid_input_is_rejected_with_the_reason() -> None:
    index = TopicIndex()
    with pytest.raises(InvalidView, match="must be the last level"):
        index.add("a/#/b", 1)
    with pytest.raises(InvalidView, match="wildcard '\\+'"):
        index.match("a/+")
    with pytest.raises(InvalidView, match="empty"):
        index.match("")
    with pytest.raises(InvalidView, match="U\\+0000"):
        index.match_shared("a\x00")
    assert index.match("é/b") == set()  # non-ASCII names take the careful path and pass


def test_removing_everything_leaves_an_empty_trie() -> None:
    index = TopicIndex()
    texts = ["a/b/c", "a/+/c", "a/#", "+/+", "#", "$share/g/a/#", "/", "//#"]
    for sub_id, text in enumerate(texts):
        index.add(text, sub_id)
    for sub_id, text in enumerate(texts):
        index.remove(text, sub_id)
    assert list(index) == []
    # Emptied nodes are pruned, so churn does not grow memory (white-box check).
    assert index._wild.root.is_empty()
    assert index._shared.root.is_empty()
    assert index._exact == {}


LEVELS = ["a", "b", "", "$x"]
level = st.sampled_from(LEVELS)


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.sampled_from([*LEVELS, "+"]), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels[-1] = "#"
    text = "/".join(levels) or "+"
    if draw(st.integers(0, 4)) == 0:
        text = f"$share/{draw(st.sampled_from(['g', 'h']))}/{text}"
    return text


topic_names = st.lists(level, min_size=1, max_size=5).map("/".join).filter(bool)


class IndexMachine(RuleBasedStateMachine):
    """Random adds and removes; every match must equal brute force over the held pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.index = TopicIndex()
        self.pairs: set[tuple[str, int]] = set()

    @rule(text=filters(), sub_id=st.integers(0, 5))
    def add(self, text: str, sub_id: int) -> None:
        self.index.add(text, sub_id)
        self.pairs.add((text, sub_id))

    @precondition(lambda self: bool(self.pairs))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        text, sub_id = data.draw(st.sampled_from(sorted(self.pairs)))
        self.index.remove(text, sub_id)
        self.pairs.remove((text, sub_id))

    @rule(text=filters(), sub_id=st.integers(0, 5))
    def remove_absent(self, text: str, sub_id: int) -> None:
        if (text, sub_id) not in self.pairs:
            with pytest.raises(KeyError):
                self.index.remove(text, sub_id)

    @rule(topic=topic_names)
    def match(self, topic: str) -> None:
        assert self.index.match(topic) == brute_match(self.pairs, topic)
        expected: dict[str, set[int]] = {}
        for text, sub_id in self.pairs:
            if text.startswith("$share/") and matches(text, topic):
                expected.setdefault(text, set()).add(sub_id)
        assert self.index.match_shared(topic) == expected

    @invariant()
    def holds_exactly_the_pairs(self) -> None:
        assert len(self.index) == len(self.pairs)
        assert sorted(self.index) == sorted(self.pairs)


IndexMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30)
TestIndexMachine = IndexMachine.TestCase
