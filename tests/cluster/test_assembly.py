"""Pieces from several upstreams assembled seq by seq (``cluster.assembly``), against
brute force.

Each scenario gives every upstream a stream of seqs (from a start of its own, optionally with a
gap and with re-stamps: a second piece of a seq carrying snapshots), delivers all pieces in a
random interleaving (each upstream's own order kept: its connection is ordered, the delays
between upstreams are arbitrary), and may lose an upstream midway and replace it by another.
The oracles are computed from the log of what happened, written from the promises, not from the
code: seqs handed out in order; no piece twice nor lost (each handed out, dropped as stale, or
still waiting); never a seq handed out without the piece of a started upstream that owes it (no
view mixes two ticks); a piece is stale exactly when it came after its seq was handed out (or
around a gap, or from an upstream forgotten); and with every upstream's stream complete,
everything up to the last seq is handed out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cluster.assembly import Assembled, Assembly
from fanout.errors import ProtocolError

LAST = 12  # every stream ends at this seq unless its upstream is forgotten


@dataclass(frozen=True)
class Piece:
    upstream: str
    seq: int
    restamp: bool = False  # a second piece of the seq
    snapshots: bool = False  # carries snapshots (a re-stamp always does)


@dataclass
class Log:
    """What happened, in order: ('add', piece, handed before it) and every handed out seq."""

    arrivals: list[tuple[Piece, tuple[int, int] | None, frozenset[str], frozenset[str]]]
    assembled: list[tuple[Assembled[Piece], frozenset[str], frozenset[Piece]]]
    stale: list[Piece]
    forgotten: dict[str, int]  # upstream -> index in arrivals at which it was forgotten


def stream(
    upstream: str, start: int, gap: int | None, restamps: set[int], first: bool = False
) -> list[Piece]:
    """Pieces start..LAST (``first``: the first carries snapshots)."""
    out = []
    for seq in range(start, LAST + 1):
        if seq == gap:
            continue
        out.append(Piece(upstream, seq, snapshots=first and seq == start))
        if seq in restamps:
            out.append(Piece(upstream, seq, restamp=True, snapshots=True))
    return out


@st.composite
def scenarios(draw: st.DrawFn, *, gaps: bool = False, losses: bool = False) -> dict:
    count = draw(st.integers(2 if losses else 1, 4))
    streams = {}
    for number in range(count):
        name = f"u{number}"
        start = draw(st.integers(0, 6))
        gap = draw(st.one_of(st.none(), st.integers(start + 1, LAST - 1))) if gaps else None
        restamps = draw(st.sets(st.integers(start, LAST), max_size=3))
        streams[name] = stream(name, start, gap, restamps, draw(st.booleans()))
    order = draw(st.permutations([name for name, pieces in streams.items() for _ in pieces]))
    lost = None
    if losses:
        # an upstream lost after some arrivals; another takes its parts, starting later
        victim = draw(st.sampled_from(sorted(streams)))
        at = draw(st.integers(0, len(order)))
        start = draw(st.integers(0, LAST))
        streams["r"] = stream("r", start, None, set(), first=True)
        spot = draw(st.integers(at, len(order)))
        order = order[:spot] + ["r"] * len(streams["r"]) + order[spot:]
        lost = (victim, at)
    return {"streams": streams, "order": order, "lost": lost}


def run(scenario: dict) -> tuple[Assembly[Piece], Log]:
    assembly: Assembly[Piece] = Assembly()
    streams = {name: list(pieces) for name, pieces in scenario["streams"].items()}
    log = Log([], [], [], {})
    arrived: set[Piece] = set()
    lost = scenario["lost"]
    for name in streams:
        if name != "r":
            assembly.expect(name)

    def record(outcome, expected: frozenset[str]) -> None:
        for out in outcome.assembled:
            log.assembled.append((out, expected, frozenset(arrived)))
        log.stale.extend(outcome.stale)

    for index, name in enumerate(scenario["order"]):
        if lost is not None and index == lost[1]:
            log.forgotten[lost[0]] = len(log.arrivals)
            record(assembly.forget(lost[0]), frozenset(assembly.expected()))
        if name == "r" and "r" not in assembly.expected():
            assembly.expect("r")
        piece = streams[name].pop(0)
        handed = assembly.last
        arrived.add(piece)
        expected = frozenset(assembly.expected())
        started = frozenset(p.upstream for p in arrived)
        log.arrivals.append((piece, handed, expected, started))
        outcome = assembly.add(name, (0, piece.seq), piece, snapshots=piece.snapshots)
        record(outcome, expected)
    if lost is not None and lost[1] >= len(scenario["order"]):
        log.forgotten[lost[0]] = len(log.arrivals)
        record(assembly.forget(lost[0]), frozenset(assembly.expected()))
    return assembly, log


def handed_out(log: Log) -> list[Piece]:
    return [piece for out, _, _ in log.assembled for piece in out.pieces]


def check_order_and_conservation(scenario: dict, log: Log) -> None:
    last = None
    for out, _, _ in log.assembled:
        assert all(piece.seq == out.stamp[1] for piece in out.pieces)
        if out.restamp:
            assert out.stamp == last, "a re-stamp is of the seq handed out last"
            assert all(piece.snapshots for piece in out.pieces)
        else:
            assert last is None or out.stamp > last, "seqs are handed out in order"
            last = out.stamp
            upstreams = [piece.upstream for piece in out.pieces if not piece.restamp]
            assert len(upstreams) == len(out.pieces) - sum(p.restamp for p in out.pieces)
            assert len(upstreams) == len(set(upstreams)), "one piece per upstream"
    gone = handed_out(log) + log.stale
    assert len(gone) == len(set(gone)), "no piece handed out or dropped twice"
    arrived = [piece for piece, *_ in log.arrivals]
    assert set(gone) <= set(arrived)


def check_no_mixing(scenario: dict, log: Log) -> None:
    """A seq handed out holds the piece of every upstream expected then, started before it,
    whose stream has that seq (it owes it)."""
    for out, expected, arrived in log.assembled:
        if out.restamp:
            continue
        seq = out.stamp[1]
        inside = {piece.upstream for piece in out.pieces}
        for upstream in expected:
            pieces = scenario["streams"][upstream]
            started = any(piece.upstream == upstream for piece in arrived)
            owes = any(p.seq == seq for p in pieces) and pieces[0].seq < seq
            if started and owes and min(p.seq for p in arrived if p.upstream == upstream) < seq:
                assert upstream in inside, (upstream, seq, out)


@given(scenarios())
def test_pieces_are_assembled_in_order_whole_and_each_once(scenario: dict) -> None:
    assembly, log = run(scenario)
    check_order_and_conservation(scenario, log)
    check_no_mixing(scenario, log)
    # A piece is stale exactly when its seq was handed out before it came, unless it carries
    # snapshots of the seq handed out last: then it goes out alone, re-stamped.
    stale = set(log.stale)
    restamped = {piece for out, _, _ in log.assembled if out.restamp for piece in out.pieces}
    for piece, handed, _, _ in log.arrivals:
        late = handed is not None and piece.seq <= handed[1]
        again = piece.snapshots and handed is not None and piece.seq == handed[1]
        assert (piece in stale) == (late and not again), (piece, handed)
        assert (piece in restamped) == (late and again), (piece, handed)
    # Every stream ends at LAST and none has a gap: all is handed out up to LAST.
    assert assembly.last == (0, LAST)
    pending = {p for p, *_ in log.arrivals} - set(handed_out(log)) - stale
    assert not pending
    # the next seq waits for every upstream (each started and owes it)
    assert assembly.waiting_for() == set(scenario["streams"])


@given(scenarios(gaps=True))
def test_a_seq_an_upstream_skipped_is_never_handed_out(scenario: dict) -> None:
    _, log = run(scenario)
    check_order_and_conservation(scenario, log)
    check_no_mixing(scenario, log)
    for out, expected, arrived in log.assembled:
        for upstream in expected:
            seqs = [p.seq for p in arrived if p.upstream == upstream]
            if seqs and min(seqs) < out.stamp[1]:
                has = {p.seq for p in scenario["streams"][upstream]}
                assert out.stamp[1] in has or out.restamp, (upstream, out.stamp)


@given(scenarios(losses=True))
def test_an_upstream_lost_and_replaced_stops_nothing(scenario: dict) -> None:
    assembly, log = run(scenario)
    check_order_and_conservation(scenario, log)
    check_no_mixing(scenario, log)
    victim, _ = scenario["lost"]
    at = log.forgotten[victim]
    for piece, *_ in log.arrivals[at:]:
        if piece.upstream == victim:
            assert piece in log.stale, "a forgotten upstream's pieces are dropped"
    # the others' streams (and the replacement's) end at LAST: all is handed out
    assert assembly.last == (0, LAST)
    assert assembly.waiting_for() == assembly.expected()


def test_a_started_upstream_holds_the_next_seq_back_until_its_piece_comes() -> None:
    assembly: Assembly[str] = Assembly()
    assembly.expect("a")
    assembly.expect("b")
    assert [o.stamp for o in assembly.add("a", (0, 1), "a1", snapshots=False).assembled] == [(0, 1)]
    assert assembly.add("b", (0, 1), "b1", snapshots=False).stale == ["b1"]  # too late
    assert not assembly.add("a", (0, 2), "a2", snapshots=False).assembled
    assert assembly.waiting_for() == {"b"}
    out = assembly.add("b", (0, 2), "b2", snapshots=False).assembled
    assert [(o.stamp, o.pieces) for o in out] == [((0, 2), ("a2", "b2"))]


def test_a_first_snapshot_one_seq_behind_goes_out_re_stamped() -> None:
    assembly: Assembly[str] = Assembly()
    assembly.expect("a")
    assembly.add("a", (0, 5), "a5", snapshots=False)
    assembly.expect("b")
    out = assembly.add("b", (0, 5), "b5", snapshots=True).assembled
    assert [(o.stamp, o.pieces, o.restamp) for o in out] == [((0, 5), ("b5",), True)]
    assert assembly.waiting_for() == {"a", "b"}


def test_a_new_epoch_is_not_a_gap() -> None:
    assembly: Assembly[str] = Assembly()
    assembly.expect("a")
    assembly.expect("b")
    for upstream in "ab":
        assembly.add(upstream, (0, 7), f"{upstream}7", snapshots=False)
    assembly.add("a", (1, 0), "a0", snapshots=True)
    out = assembly.add("b", (1, 0), "b0", snapshots=True).assembled
    assert [(o.stamp, o.pieces) for o in out] == [((1, 0), ("a0", "b0"))]


def test_a_piece_older_than_its_upstreams_last_is_refused() -> None:
    assembly: Assembly[str] = Assembly()
    assembly.expect("a")
    assembly.add("a", (0, 3), "a3", snapshots=False)
    with pytest.raises(ProtocolError, match="out of order"):
        assembly.add("a", (0, 2), "a2", snapshots=False)
