"""The relay's index of subscriptions (``relay.core.downstream``) against its own contents: what
it says of a dataset's ``every`` subscriptions is what looking at each says, whatever was
added, changed (another dataset or mode) or removed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.downstream import Asked, Downstream, Subscription
from fanout.relay.core.transforms import Shape
from fanout.views import Box

DATASETS = ("agents", "orders")
step = st.tuples(
    st.sampled_from(["put", "remove"]),
    st.integers(1, 4),  # the subscription
    st.sampled_from(DATASETS),
    st.sampled_from(["latest", "every"]),
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(step, max_size=30))
def test_whether_a_dataset_has_every_subscriptions_is_what_each_says(
    steps: list[tuple[str, int, str, str]],
) -> None:
    downstream = Downstream()
    for action, sub, dataset, mode in steps:
        if action == "remove":
            downstream.remove((1, sub))
            continue
        asked = Asked(
            dataset, Box((0, 0), (1, 1)), 10.0, Shape(("id",)), mode=mode, reads=(dataset,)
        )
        existing = downstream.get((1, sub))
        if existing is None:
            downstream.put(Subscription(1, sub, asked))
        else:  # as the lifecycle changes one: out of the index, changed, back in
            downstream.remove(existing.key)
            existing.asked = asked
            downstream.put(existing)
        for name in DATASETS:
            truth = any(s.mode == "every" for s in downstream.of_dataset(name))
            assert downstream.any_every(name) == truth
