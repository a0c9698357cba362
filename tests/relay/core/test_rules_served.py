"""Access rules as the relay's core serves them: no row outside a subscriber's rules reaches it,
however its view, its rules and the rows move (against a brute-force publisher)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fanout.errors import Unauthorized
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, Send
from fanout.relay.core.rules import restrict
from fanout.testing.oracle import grid_points, in_box, inside
from fanout.testing.relaycore import frames_to, ready_core
from fanout.views import Box
from fanout.views.region import Sphere
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import Acquire, Batch, Curious, Knowledge, Push, Subscribe
from fanout.wire.options import Resume

POINTS = grid_points(12)
SPACE = {"agents": "space"}
positions = st.tuples(st.integers(-1, 9).map(float), st.integers(-1, 9).map(float))
changes = st.dictionaries(
    st.integers(1, 40), st.none() | positions | positions, min_size=4, max_size=20
)


@st.composite
def wide_boxes(draw: st.DrawFn) -> Box:
    """Boxes a few units wide, so that views, rules and rows meet often."""
    x0, y0 = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    return Box((x0, y0), (x0 + draw(st.integers(2, 5)), y0 + draw(st.integers(2, 5))))


@st.composite
def wide_discs(draw: st.DrawFn) -> Sphere:
    """Discs a few units wide, as rules: a view meets them partly, so it is served their
    intersection."""
    return Sphere((draw(st.integers(0, 8)), draw(st.integers(0, 8))), draw(st.integers(1, 4)))


class Upstream:
    """A brute-force publisher: the truth, a log by seq, snapshots of what is acquired."""

    def __init__(self) -> None:
        self.truth: dict[int, tuple[float, float]] = {}
        self.seq = -1
        self.log: dict[int, tuple[dict, list[int]]] = {}
        self.fresh: list[int] = []

    def take(self, sends: list[Send]) -> list[Knowledge]:
        answers = []
        for send in sends:
            match send.frame:
                case Acquire(prim=prim) if send.to == UPSTREAM:
                    self.fresh.append(prim)
                case Curious() as ask if send.to == UPSTREAM:
                    for seq in range(ask.first, ask.last + 1):
                        upserts, deletes = self.log[seq]
                        answers.append(
                            Knowledge(
                                ask.req,
                                "agents",
                                1,
                                seq,
                                10 * seq,
                                float(seq),
                                encode_columns(columns(upserts)),
                                encode_columns({"id": np.array(deletes, np.int64)}),
                            )
                        )
        return answers

    def step(self, change: dict[int, tuple[float, float] | None]) -> Batch:
        self.seq += 1
        upserts = {k: p for k, p in change.items() if p is not None}
        deletes = sorted(k for k, p in change.items() if p is None and k in self.truth)
        self.truth.update(upserts)
        for key in deletes:
            del self.truth[key]
        self.log[self.seq] = (upserts, deletes)
        snapshots, self.fresh = self.fresh, []
        sent = dict(self.truth) if snapshots else upserts  # a snapshot: everything, as a superset
        return Batch(
            "agents",
            1,
            self.seq,
            10 * self.seq,
            float(self.seq),
            encode_columns(columns(sent)),
            encode_columns({"id": np.array(deletes, np.int64)}),
            snapshots,
        )


def columns(rows: dict[int, tuple[float, float]]) -> dict[str, np.ndarray]:
    keys = sorted(rows)
    return {
        "id": np.array(keys, np.int64),
        "x": np.array([rows[k][0] for k in keys], np.float64),
        "y": np.array([rows[k][1] for k in keys], np.float64),
    }


DENSE = [
    ("tick", {k: (float(k % 9), float(k // 9)) for k in range(1, 60)}),
    ("move", Box((1, 1), (5, 5))),
    ("resume", None),
    ("tick", {k: (float(k // 9), float(k % 9)) for k in range(1, 60, 2)}),
    ("tick", dict.fromkeys(range(1, 60, 3))),
]


@settings(max_examples=120, deadline=None)
@example([Box((0, 0), (4, 4)), Box((3, 3), (7, 6))], Box((2, 1), (8, 8)), "latest", DENSE)
@example([Box((0, 0), (4, 4)), Box((3, 3), (7, 6))], Box((2, 1), (8, 8)), "every", DENSE)
@example([Sphere((4, 4), 3)], Box((2, 1), (8, 8)), "latest", DENSE)
@example([Sphere((4, 4), 3), Box((6, 0), (9, 3))], Box((2, 1), (8, 8)), "every", DENSE)
@given(
    st.lists(st.one_of(wide_boxes(), wide_discs()), min_size=1, max_size=3),
    wide_boxes(),
    st.sampled_from(["latest", "every"]),
    st.lists(
        st.one_of(
            st.tuples(st.just("tick"), changes),
            st.tuples(st.just("tick"), changes),
            st.tuples(st.just("move"), wide_boxes()),
            st.tuples(st.just("resume"), st.none()),
        ),
        min_size=2,
        max_size=12,
    ),
)
def test_no_row_outside_the_rules_reaches_a_subscriber(
    rule_shapes: list[Box | Sphere], view: Box, mode: str, script: list
) -> None:
    """Every mode, view changes (latest) and resumes (every): each row pushed lies inside the
    rules (boxes and discs), and after every push of mode latest the subscriber holds exactly
    the truth inside its view and its rules (plain comparisons)."""
    rules = {"agents": [str(shape) for shape in rule_shapes]}
    core = ready_core(policy=Policy(widen="margin", grace=0.0))
    upstream = Upstream()
    held: dict[int, tuple[float, float]] = {}
    current = view

    def granted(x: float, y: float) -> bool:
        return any(inside(shape, x, y) for shape in rule_shapes)

    def subscribe(asked: Box, resume: Resume | None = None) -> bool:
        request = Subscribe(1, "agents", asked, rate=1000.0, mode=mode, resume=resume)  # type: ignore[arg-type]
        try:
            request = restrict(request, rules, SPACE)  # as the relay's shell does
        except Unauthorized:
            assert not any(in_box(asked, *p) and granted(*p) for p in POINTS)
            return False
        upstream.take(core.on_subscribe(1, request))
        return True

    def serve(now: float) -> None:
        for _ in range(50):
            sends = core.pushes(now, lambda client: True)
            for answer in upstream.take(sends):
                core.on_knowledge(answer)
            mine = frames_to(sends, 1)
            for frame in mine:
                if isinstance(frame, Push):
                    if frame.full:
                        held.clear()
                    for key in decode_columns(frame.left).get("id", np.empty(0)).tolist():
                        held.pop(key, None)
                    for part in (frame.entered, frame.updated):
                        rows = decode_columns(part)
                        for k, x, y in zip(
                            *(rows.get(c, []) for c in ("id", "x", "y")), strict=True
                        ):
                            assert granted(x, y), f"row {k} at {(x, y)} is outside the rules"
                            held[int(k)] = (float(x), float(y))
                    if mode == "latest":
                        expected = {
                            k: p
                            for k, p in upstream.truth.items()
                            if in_box(current, *p) and granted(*p)
                        }
                        assert held == expected
            if not sends:
                return

    if not subscribe(view):
        return
    now = 1.0
    core.on_batch(upstream.step({}))
    serve(now)
    for action, argument in script:
        now += 1.0
        if action == "tick":
            upstream.take(core.on_batch(upstream.step(argument)))
        elif action == "move" and mode == "latest":
            if subscribe(argument):
                current = argument
            core.on_batch(upstream.step({}))  # the snapshots of what the move acquired
        elif action == "resume" and mode == "every":
            core.on_disconnect(1)
            keys = np.array(sorted(held), np.int64)
            seq = upstream.seq
            token = Resume(1, seq, encode_columns({"id": keys}))
            subscribe(view, token)
            core.on_batch(upstream.step({}))
        serve(now)
    assert all(granted(*p) for p in held.values())
