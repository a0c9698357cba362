"""``crossings``, the example Python transducer, against a brute-force evaluation: an event for
each row whose value crossed the threshold between the previous tick and the newest."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.transducers.streams import SCHEMA, Content, apply, contents, frames

from fanout.transducers.budget import Budget
from fanout.transducers.crossings import Crossings
from fanout.transducers.session import Session


def crossings(window: list[Content], above: float) -> dict[object, tuple[object, ...]]:
    now = {key: v for key, (_, v) in window[-1].items()}
    before = window[-2] if len(window) > 1 else {}
    events: dict[object, tuple[object, ...]] = {}
    for key in set(now) | set(before):
        was = key in before and before[key][1] > above
        is_ = key in now and now[key] > above
        if was != is_:
            events[key] = (key, "start" if is_ else "stop", now.get(key))
    return events


@settings(max_examples=80, deadline=None)
@given(ticks=contents(), above=st.integers(-2, 2).map(float))
def test_crossings_match_a_brute_force_evaluation(ticks, above) -> None:
    session = Session(
        Crossings({"column": "v", "above": above}), SCHEMA, Budget(seconds=60), lambda: 0.0
    )
    held: dict[object, tuple[object, ...]] = {}
    for at, frame in enumerate(frames(ticks)):
        apply(held, session.step(frame), session.key)
        window = [content for content, _ in ticks[max(0, at - 1) : at + 1]]
        assert held == crossings(window, above), at
