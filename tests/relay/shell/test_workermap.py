"""What a relay's leader weighs of its workers' load when it splits and merges on load
(``relay.shell.workermap.WorkersLoad``), and what a worker tells it
(``cluster.splitting.CoreHoldings.told``): a real ``RelayCore``, frames as they go over the wire."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cluster.responsibility import part_of
from fanout.cluster.splitting import CoreHoldings
from fanout.errors import InvalidView
from fanout.relay.shell.workermap import WorkersLoad
from fanout.testing.relaycore import ready_core
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import Subscribe, WorkerLoad

SIDE = 256.0


def _told(frame: WorkerLoad) -> WorkerLoad:
    decoded = codec.to_publisher().decode(codec.encode(frame))
    assert isinstance(decoded, WorkerLoad)
    return decoded


@given(st.lists(st.tuples(st.integers(0, 900), st.integers(0, 900)), max_size=20))
def test_a_worker_tells_its_subscriptions_by_part_and_the_box_each_part_warms(
    corners: list[tuple[int, int]],
) -> None:
    """Oracle: counted by hand, part by part, and the bounding box of each part's boxes."""
    core = ready_core()
    boxes = [Box((x, y), (x + 20, y + 10)) for x, y in corners]
    for sub, box in enumerate(boxes, 1):
        core.on_subscribe(1, Subscribe(sub, "agents", box), 0.0)
    frame = _told(CoreHoldings(core).told(SIDE))
    by_part: dict[str, list[Box]] = {}
    for box in boxes:
        by_part.setdefault(part_of("agents", box, SIDE), []).append(box)
    assert frame.parts == {part: len(held) for part, held in by_part.items()}
    assert frame.subscriptions == len(boxes) and frame.side == SIDE
    for part, held in by_part.items():
        lo = (min(b.lo[0] for b in held), min(b.lo[1] for b in held))
        hi = (max(b.hi[0] for b in held), max(b.hi[1] for b in held))
        assert frame.boxes[part] == str(Box(lo, hi))


def test_the_leader_weighs_every_workers_subscriptions_and_its_sums_never_fall() -> None:
    load = WorkersLoad()
    load.told(1, _told(WorkerLoad(SIDE, {"a/cell:0,0": 3}, {"a/cell:0,0": "box:0,0,5,5"}, 3, 100)))
    load.told(2, _told(WorkerLoad(SIDE, {"a/cell:0,0": 1, "t/topic:x": 2}, {}, 3, 50, cpu=1.5)))
    load.told(3, WorkerLoad(64.0, {"a/cell:9,9": 7}, {}, 7, 10))  # told before the map's side
    assert load.weights(SIDE) == {"a/cell:0,0": 4.0, "t/topic:x": 2.0}
    # worker 2 holds cell 0,0 without a box (another view than a region): nothing warms there
    assert load.warm(["a/cell:0,0"], SIDE) == {}
    held, pushes, cpu = load.figures()
    assert (held, pushes) == (13, 160.0) and cpu >= 1.5
    # A worker restarting counts again from zero: what it had sent stays in the sums.
    load.gone(2)
    load.told(4, WorkerLoad(SIDE, {}, {}, 0, 5))
    assert load.figures()[:2] == (10, 165.0) and load.figures()[2] >= 1.5
    assert load.warm(["a/cell:0,0"], SIDE) == {"a/cell:0,0": "box:0,0,5,5"}


def test_a_report_with_a_box_that_is_no_region_is_refused_and_the_last_one_stands() -> None:
    load = WorkersLoad()
    load.told(1, WorkerLoad(SIDE, {"a/cell:0,0": 1}, {"a/cell:0,0": "box:0,0,5,5"}, 1))
    with pytest.raises(InvalidView):
        load.told(1, WorkerLoad(SIDE, {"a/cell:0,0": 9}, {"a/cell:0,0": "box:nonsense"}, 9))
    assert load.weights(SIDE) == {"a/cell:0,0": 1.0}
    assert load.warm(["a/cell:0,0"], SIDE) == {"a/cell:0,0": "box:0,0,5,5"}
