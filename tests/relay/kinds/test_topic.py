"""Which rows a topic filter selects at the relay: every filter in one pass
(relay/kinds/topic.py)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data.buffers import Table
from fanout.relay.kinds.topic import TopicMatches
from fanout.testing.catalog import sensors
from fanout.views.topic import matches
from fanout.views.topic import parse as topic

SENSORS = sensors()


TOPICS = st.lists(st.sampled_from(["a", "b", "$s"]), min_size=1, max_size=3).map("/".join)
FILTERS = st.sampled_from(["a/+", "a/#", "#", "+/b", "a/b/a", "$s/#", "+/+/+", "$share/g/a/#"])


@settings(max_examples=60, deadline=None)
@given(st.lists(TOPICS, max_size=12, unique=True), st.lists(FILTERS, min_size=1, max_size=4))
def test_topic_matches_equal_a_brute_force_oracle(
    table: Callable[..., Table], topics: list[str], filters: list[str]
) -> None:
    rows = table(SENSORS, topic=topics, value=[0.0] * len(topics))
    matcher = TopicMatches()
    views = [topic(text) for text in filters]
    for view in views:
        found = rows.keys[matcher.positions(view, rows, SENSORS, 1, lambda: views)].tolist()
        want = sorted(t for t in topics if matches(view.filter, t))
        assert found == want
    assert matcher.passes == 1  # every filter of the dataset in one pass over its topics


def test_rows_whose_topic_is_no_topic_name_are_matched_by_nothing(
    table: Callable[..., Table],
) -> None:
    # One such row (from a files source, say) made every topic view of the dataset fail.
    rows = table(SENSORS, topic=["a", "", "b/#", "c"], value=[1.0, 2.0, 3.0, 4.0])
    views = [topic("#"), topic("+")]
    matcher = TopicMatches()
    found = [rows.keys[matcher.positions(v, rows, SENSORS, 1, lambda: views)] for v in views]
    assert [f.tolist() for f in found] == [["a", "c"], ["a", "c"]]
    assert matcher.not_topics == 2  # one pass for both filters: "" and "b/#"
