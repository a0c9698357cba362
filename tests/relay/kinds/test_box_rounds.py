"""Box views pushed together (``RegionKind.cut_together``, ``Serving._deliver_together``): after
every round, each subscriber applying its pushes holds exactly the rows inside its box, as a
brute-force scan of every row says, views moved, bodies shared by equal views and all."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.relay.core.conversations import batch, relay

from fanout.relay.core.relaycore import RelayCore
from fanout.testing.batches import rows
from fanout.views import Box
from fanout.wire.columns import decode_columns
from fanout.wire.messages import NoUpdate, Push, Subscribe

Point = tuple[float, float]
Corners = tuple[float, float, float, float]  # x, y, width, height

# A few boxes many views share (their bodies are cut once), and any others.
corners = st.one_of(
    st.sampled_from([(0.0, 0.0, 50.0, 50.0), (25.0, 25.0, 10.0, 60.0)]),
    st.tuples(st.floats(-20, 110), st.floats(-20, 110), st.floats(0, 60), st.floats(0, 60)),
)
place = st.tuples(st.floats(0, 100), st.floats(0, 100))
# Each state: keys written (to a point, or deleted: None) since the state before.
writes = st.dictionaries(st.integers(1, 40), st.one_of(st.none(), place), max_size=15)


def inside(world: dict[int, Point], box: Corners) -> dict[int, Point]:
    """The oracle: every row whose point lies in the box, edges included."""
    x, y, width, height = box
    return {
        key: (px, py)
        for key, (px, py) in world.items()
        if x <= px <= x + width and y <= py <= y + height
    }


def decoded(columns: object) -> dict[int, Point]:
    found = decode_columns(columns)  # type: ignore[arg-type]
    if "x" not in found:
        return dict.fromkeys(found["id"].tolist(), (0.0, 0.0)) if "id" in found else {}
    points = zip(found["x"].tolist(), found["y"].tolist(), strict=True)
    return dict(zip(found["id"].tolist(), points, strict=True))


def apply(held: dict[int, Point], push: Push) -> dict[int, Point]:
    """What a subscriber holds after ``push`` (the client's rule: a full push replaces)."""
    after = {} if push.full else dict(held)
    after.update(decoded(push.entered))
    after.update(decoded(push.updated))
    for key in decoded(push.left):
        after.pop(key, None)
    return after


def covered() -> RelayCore:
    """A relay whose coverage of the world (0..100 on each axis) is ready."""
    core = relay()
    core.on_subscribe(99, Subscribe(99, "agents", Box((-50, -50), (150, 150)), rate=1000.0))
    return core


@settings(max_examples=120, deadline=None)
@given(
    first=writes,
    views=st.lists(st.tuples(st.integers(1, 5), corners), min_size=1, max_size=12),
    steps=st.lists(st.tuples(writes, st.dictionaries(st.integers(0, 11), corners)), max_size=6),
)
def test_every_subscriber_holds_the_rows_inside_its_box(
    first: dict[int, Point | None],
    views: list[tuple[int, Corners]],
    steps: list[tuple[dict[int, Point | None], dict[int, Corners]]],
) -> None:
    core = covered()
    world = {key: where for key, where in first.items() if where is not None}
    prims = [p.prim for p in core.upstream.of("agents")]
    points = {f"k{key}": where for key, where in world.items()}
    core.on_batch(batch(0, rows(**points) if points else None, snapshots=prims))
    boxes = {}
    for sub, (client, box) in enumerate(views, start=1):
        boxes[client, sub] = box
        x, y, width, height = box
        core.on_subscribe(client, Subscribe(sub, "agents", Box((x, y), (x + width, y + height))))
    held: dict[tuple[int, int], dict[int, Point]] = {key: {} for key in boxes}
    for seq, (written, moved) in enumerate([({}, {}), *steps], start=1):
        for number, box in moved.items():
            if number < len(views):  # a view moves between states
                client, sub = views[number][0], number + 1
                boxes[client, sub] = box
                x, y, width, height = box
                request = Subscribe(sub, "agents", Box((x, y), (x + width, y + height)))
                core.on_subscribe(client, request)
        for key, where in written.items():
            if where is None:
                world.pop(key, None)
            else:
                world[key] = where
        upserts = {f"k{key}": where for key, where in written.items() if where is not None}
        deletes = [key for key, where in written.items() if where is None]
        core.on_batch(batch(seq, rows(**upserts) if upserts else None, deletes))
        for send in core.pushes(float(seq), lambda client: True):
            frame = send.message()
            if send.to == 99 or isinstance(frame, NoUpdate):
                continue
            assert isinstance(frame, Push)
            held[send.to, frame.sub] = apply(held[send.to, frame.sub], frame)
        for key, box in boxes.items():
            assert held[key] == inside(world, box)
