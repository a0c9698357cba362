"""Link-aware delivery (relay/core/links.py): the estimates against a brute-force reading of every
probe and ack, the fitting against a brute-force token bucket, a simulated link that slows and
recovers, and a relay's core sending a fitted subscriber its creations and deletions first."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st
from tests.relay.core.conversations import batch, keys, ready_relay, rows

from fanout.relay.core import links as rules
from fanout.relay.core.explaining import explain
from fanout.relay.core.links import Fit, Links
from fanout.views import Box
from fanout.wire.columns import decode_columns
from fanout.wire.messages import Push, Subscribe

C = 7  # the client


# -- the estimates against every probe and ack -----------------------------------------------

probes = st.lists(
    st.tuples(
        st.floats(0.0, 1.0),  # seconds from the last ack to the next probe
        st.integers(0, 200_000),  # bytes sent meanwhile
        st.floats(0.001, 3.0),  # the probe's time to its ack
        st.booleans(),  # whether bytes were sent behind the probe before its ack
    ),
    min_size=1,
    max_size=40,
)


def drain_at(kept: list[tuple[float, float]], now: float) -> float | None:
    """Rule 2 read from every sample kept: the most in the window, else the last."""
    recent = [rate for at, rate in kept if at >= now - rules.DRAIN_WINDOW]
    return max(recent) if recent else (kept[-1][1] if kept else None)


@given(probes=probes, later=st.floats(0.0, 3.0))
def test_the_estimates_are_those_read_from_every_probe_and_ack(
    probes: list[tuple[float, int, float, bool]], later: float
) -> None:
    links, now, sent = Links(), 0.0, 0
    acks: list[tuple[float, float, int, bool]] = []  # (at, probe time, bytes marked, behind)
    for gap, more, time, behind in probes:
        now += gap
        sent += more
        links.probed(C, sent, now)
        links.acked(C, now + time, sent + behind)
        acks.append((now + time, (now + time) - now, sent, behind))
        now += time
    now += later
    # The oracle: the least probe time in the window ending at the last ack; a drain sample
    # between consecutive acks (a later ack never precedes an earlier: one probe in flight)
    # kept if bytes were behind its probe, or if it is no less than the estimate it comes to.
    last = acks[-1][0]
    rtt = min(time for at, time, _, _ in acks if at >= last - rules.RTT_WINDOW)
    kept: list[tuple[float, float]] = []
    for a, b in itertools.pairwise(acks):
        if b[0] > a[0]:
            rate = (b[2] - a[2]) / (b[0] - a[0])
            if b[3] or rate >= (drain_at(kept, b[0]) or 0.0):
                kept.append((b[0], rate))
    delay = acks[-1][1] - rtt
    assert links.report(C, now)["round_trip_seconds"] == rtt
    assert math.isclose(links.queue_delay(C, now), delay, abs_tol=1e-12)
    assert links.drain(C, now) == drain_at(kept, max(now, last))


def test_a_probe_in_flight_longer_than_the_last_counts_as_queue_delay() -> None:
    links = Links()
    links.probed(C, 0, 0.0)
    links.acked(C, 0.01, 0)
    links.probed(C, 0, 0.5)
    assert links.unread_for(C, 0.6) == 0.0  # a free link's pings: the transport's limit
    links.acked(C, 0.51, 0)  # a drain sample: the link is measured
    links.probed(C, 5000, 1.0)
    assert not links.pushed(C, 1.1)  # one in flight at a time
    assert C not in links.fitted
    assert math.isclose(links.queue_delay(C, 1.5), 0.49)
    assert not links.pushed(C, 1.5)
    assert C in links.fitted  # its queue delay passed ENTER_DELAY before the ack came
    assert math.isclose(links.unread_for(C, 1.5), 0.5)  # what it was sent is that long unread
    links.acked(C, 1.6, 5000)
    assert links.pushed(C, 1.6)
    links.probed(C, 6000, 1.6)
    assert not links.pushed(C, 1.605)  # one in flight at a time
    links.acked(C, 1.61, 6000)
    assert C in links.fitted  # until no push was held back for FREE_AFTER
    assert not links.pushed(C, 1.6 + rules.PROBE_GAP / 2)  # probes go PROBE_GAP apart
    links.probed(C, 7000, 1.6 + rules.FREE_AFTER)
    links.acked(C, 1.61 + rules.FREE_AFTER, 7000)
    assert C not in links.fitted  # its queue drained, and no push waited
    assert not links.pushed(C, 1.7 + rules.FREE_AFTER)  # FREE_PROBE_GAP apart now


# -- the fitting against a brute-force token bucket ------------------------------------------


pushes = st.lists(
    st.tuples(st.floats(0.0, 0.2), st.integers(1, 40_000), st.integers(0, 40_000)),
    max_size=40,
)


@given(drain=st.floats(2_000.0, 500_000.0), pushes=pushes)
def test_fitted_pushes_follow_a_brute_force_token_bucket(
    drain: float, pushes: list[tuple[float, int, int]]
) -> None:
    links = Links()
    links.probed(C, 0, 0.0)
    links.acked(C, 0.01, 0)
    links.probed(C, int(drain), 0.1)
    links.acked(C, 1.1, int(drain))  # drain bytes in 1.09 s, 0.99 s of queue delay: fitted
    # Its view asks ten times what it drains (a push put off: nothing spent).
    assert links.fit(C, 1, 10.0, whole=int(drain), important=0, now=1.1)[0] is Fit.WAIT
    links.probed(C, int(drain), 1.1)
    links.acked(C, 1.11, int(drain))  # the queue drained: under TARGET_DELAY from now on
    start = 1.11
    rate = rules.GAIN * max(rules.FLOOR, links.drain(C, start) or 0.0)
    cap = max(rules.MIN_CAP, rules.CAP_SECONDS * (links.drain(C, start) or 0.0))
    spent: list[tuple[float, float]] = []  # (at, bytes)

    def level(now: float) -> float:
        """The bucket as a brute force reads it: empty when fitted (at 1.1), refilled at
        ``rate``, never above ``cap``: the least over every moment it may last have been full."""
        candidates = [0.0 + rate * (now - 1.1) - sum(b for _, b in spent)]
        for j, (at, _) in enumerate(spent):
            candidates.append(cap + rate * (now - at) - sum(b for _, b in spent[j:]))
        return min(candidates)

    now = start
    for gap, whole, creations in pushes:
        now += gap
        if now > 1.1 + rules.DRAIN_WINDOW:  # the drain sample expires: another rate
            break
        important = min(creations, whole - 1)
        before = level(now)
        until = links.until(C, now)
        if before < 0:
            assert until is not None and math.isclose(until, now - before / rate, rel_tol=1e-9)
            continue
        assert until is None
        verdict, again = links.fit(C, 1, 10.0, whole=whole, important=important, now=now)
        # Levels are compared within ``SLACK`` bytes (the bucket's refills are floats).
        if whole <= before + rules.SLACK or before >= cap - rules.SLACK:
            assert verdict is Fit.WHOLE
        elif important:  # creations and deletions first, never held back
            assert verdict is Fit.IMPORTANT
            need = min(whole - important, cap)
            assert math.isclose(again, now + max(0.0, need - (before - important)) / rate)
        else:
            assert verdict is Fit.WAIT
            assert math.isclose(again, now + (min(whole, cap) - before) / rate, rel_tol=1e-9)
        sent = {Fit.WHOLE: whole, Fit.IMPORTANT: important, Fit.WAIT: 0}[verdict]
        if sent:
            spent.append((now, sent))


# -- a simulated link that slows down and recovers -------------------------------------------


def simulate(links: Links, phases: list[tuple[float, float]], whole: int, rate: float) -> list:
    """One subscriber asking ``rate`` pushes a second of ``whole`` bytes (a third of them
    creations and deletions) behind a link draining each phase's (seconds, bytes a second),
    probed as the shell does; every 10 ms. Returns (time, queued bytes, fitted, coarse)."""
    dt, now, sent, delivered, base = 0.01, 0.0, 0, 0.0, 0.02
    probe: tuple[int, float] | None = None  # bytes marked, delivered at
    due, seen, owed = 0.0, [], False
    for seconds, capacity in phases:
        for _ in range(int(seconds / dt)):
            now += dt
            delivered = min(float(sent), delivered + capacity * dt)
            if probe is not None and delivered >= probe[0] and now >= probe[1]:
                links.acked(C, now, sent)
                probe = None
            if now >= due and links.until(C, now) is None:
                size = whole // 2 if links.coarse(C) else whole
                important = 0 if owed else size // 3  # creations sent, only moves owed
                verdict, again = (
                    links.fit(C, 1, rate, whole=size, important=important, now=now)
                    if C in links.fitted
                    else (Fit.WHOLE, now)
                )
                sent += {Fit.WHOLE: size, Fit.IMPORTANT: important, Fit.WAIT: 0}[verdict]
                owed = verdict is Fit.IMPORTANT or (owed and verdict is Fit.WAIT)
                due = now + 1 / rate if verdict is Fit.WHOLE else again
                if verdict is not Fit.WAIT and links.pushed(C, now):
                    links.probed(C, sent, now)
                    probe = (sent, now + base)
            seen.append((now, sent - delivered, C in links.fitted, links.coarse(C)))
    return seen


def test_a_slow_link_is_fitted_with_a_bounded_queue_and_freed_when_it_recovers() -> None:
    links = Links()
    whole, rate = 10_000, 10.0  # 100 kB/s asked
    seen = simulate(links, [(2.0, 1e6), (8.0, 30_000.0), (6.0, 1e6)], whole, rate)
    fast = [s for s in seen if s[0] < 2.0]
    slow = [s for s in seen if 4.0 <= s[0] < 10.0]
    after = [s for s in seen if s[0] >= 14.0]
    assert not any(fitted for _, _, fitted, _ in fast)
    assert all(fitted for _, _, fitted, _ in slow)
    assert any(coarse for *_, coarse in slow)
    # Never an unbounded queue: a second of the slow link's drain at most, once fitted.
    assert max(queued for _, queued, _, _ in slow) < 2 * 30_000  # unfitted: 560 kB by 10 s
    assert max(queued for at, queued, _, _ in slow if at > 7.0) < 30_000
    assert not any(fitted or coarse for _, _, fitted, coarse in after)


# -- a relay's core: creations and deletions first ------------------------------------------


def apply(held: dict[int, tuple[float, float]], push: Push) -> None:
    for key in keys(push.left):
        held.pop(key)
    for section in (push.entered, push.updated):
        columns = decode_columns(section)
        if "id" in columns:
            for key, x, y in zip(*(columns[c].tolist() for c in ("id", "x", "y")), strict=True):
                held[key] = (x, y)


def test_a_fitted_subscriber_gets_its_creations_and_deletions_first_and_its_moves_later() -> None:
    core = ready_relay(**{f"k{i}": (float(i % 10), 1.0) for i in range(1, 201)})
    core.on_subscribe(C, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=100.0))
    held: dict[int, tuple[float, float]] = {}
    ((_, first),) = ((s.to, s.message()) for s in core.pushes(1.0, lambda client: True))
    apply(held, first)
    links = core.serving.links
    links.probed(C, 0, 1.0)
    links.acked(C, 1.01, 0)
    links.probed(C, 4_000, 1.2)
    links.acked(C, 1.7, 4_000)  # 4 kB took half a second: fitted, near 4 kB/s
    links.probed(C, 4_000, 1.7)
    links.acked(C, 1.71, 4_000)
    assert C in links.fitted
    # Every agent moves, one leaves and one comes: more than the link takes at once.
    moved = {f"k{i}": (float(i % 10), 2.0) for i in range(2, 201)}
    core.on_batch(batch(1, rows(**moved, k500=(5.0, 5.0)), deletes=[1]))
    pushed = [s.message() for s in core.pushes(1.8, lambda client: True)]
    assert len(pushed) == 1 and isinstance(pushed[0], Push)
    assert keys(pushed[0].entered) == [500] and keys(pushed[0].left) == [1]
    assert keys(pushed[0].updated) == []  # the moves wait
    apply(held, pushed[0])
    assert links.fitted_pushes == 1
    later = 1.8
    while any(y != 2.0 for key, (_, y) in held.items() if key != 500):
        later += 0.5
        assert later < 30.0, "the moves never came"
        for send in core.pushes(later, lambda client: True):
            apply(held, send.message())  # type: ignore[arg-type]
    assert set(held) == set(range(2, 201)) | {500}


def test_coarse_detail_goes_as_float32_and_full_detail_sends_every_held_row_again() -> None:
    core = ready_relay(k1=(1.1, 1.1), k2=(2.2, 2.2))
    core.on_subscribe(C, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=100.0))
    (first,) = [s.message() for s in core.pushes(1.0, lambda client: True)]
    assert decode_columns(first.entered)["x"].dtype == "float64"  # type: ignore[attr-defined]
    links = core.serving.links
    links.probed(C, 0, 1.0)
    links.acked(C, 1.01, 0)
    links.probed(C, 4_000, 1.2)
    links.acked(C, 1.7, 8_000)  # fitted; more bytes sent behind its probe
    assert links.fit(C, 1, 100.0, whole=400, important=0, now=1.7)[0] is Fit.WAIT
    links.probed(C, 8_000, 1.8)
    links.acked(C, 3.0, 9_000)  # its queue grows, its view asks far more than it drains: coarser
    assert links.coarse(C)
    core.on_batch(batch(1, rows(k1=(1.3, 1.1))))
    (coarse,) = [s.message() for s in core.pushes(10.0, lambda client: True)]
    assert decode_columns(coarse.updated)["x"].dtype == "float32"  # type: ignore[attr-defined]
    links.probed(C, 9_000, 11.0)
    links.acked(C, 11.01, 9_000)  # the queue is gone and nothing waited for a second: free
    assert C not in links.fitted and not links.coarse(C)
    (again,) = [s.message() for s in core.pushes(12.0, lambda client: True)]
    assert keys(again.updated) == [1, 2]  # type: ignore[attr-defined]
    assert decode_columns(again.updated)["x"].tolist() == [1.3, 2.2]  # type: ignore[attr-defined]


def test_a_live_explain_says_what_each_fitted_link_would_get_of_the_view() -> None:
    core = ready_relay(k1=(1.0, 1.0), k2=(2.0, 2.0))
    core.end_epoch()
    links = core.serving.links
    links.probed(C, 0, 1.0)
    links.acked(C, 1.01, 0)
    links.probed(C, 4_000, 1.2)
    links.acked(C, 1.7, 4_000)  # fitted
    said = explain(core.parts, "agents", Box((0, 0), (10, 10)), None, 100.0, links=(links, 1.7))
    per_push, (fitted,) = said["cost"]["bytes_per_push"], said["links"]["fitted_links"]
    assert said["links"]["needs_bytes_per_second"] == 100.0 * per_push
    assert fitted["client"] == C and fitted["detail"] == "full"
    paced = fitted["paced_bytes_per_second"]
    assert paced == links.report(C, 1.7)["paced_bytes_per_second"]
    assert fitted["pushes_per_second"] == min(100.0, paced / per_push)
