"""Link-aware delivery (CA 3197003 [0126]), sans I/O: each connection's drain rate and round trip,
and its ``latest`` pushes fitted to them. Rules:
1. While pushes go out the shell **probes** a connection (a WebSocket ping marking the bytes sent;
   one in flight, ``PROBE_GAP`` apart, ``FREE_PROBE_GAP`` if free); its **ack** (the pong) says
   all were read. Round trip: the least probe time in ``RTT_WINDOW``; queue delay: the last
   probe's (the one in flight's age, if longer) less it; excess: less the last push's own time.
2. **Drain rate**: bytes acked between acks over their time, most in ``DRAIN_WINDOW`` (or last);
   a lower sample counts only with bytes queued behind its probe (the link was busy).
3. **Fitted** (once measured) past ``ENTER_DELAY`` of queue delay; free once under
   ``LEAVE_DELAY`` of excess delay and no push held back for ``FREE_AFTER``.
4. A fitted link's pushes spend a byte bucket (``CAP_SECONDS`` of drain, ``MIN_CAP`` at least)
   refilled at ``GAIN`` x drain (``DRAIN_GAIN`` x past ``TARGET_DELAY`` of excess delay): a push
   goes whole if it fits or the bucket is full, else its creations and deletions alone, else waits.
5. **Detail**: coarser past ``TARGET_DELAY`` of excess if asked more than the drain; full tried
   again ``COARSE_HOLD`` later, under ``LEAVE_DELAY``. Why: docs/concepts.md, "Link-aware delivery".
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

#: Seconds between probes: often on a fitted link (its estimates steer its pushes), seldom on a
#: free one (a ping costs a write; a probe in flight that long still finds a queue out).
PROBE_GAP = 0.05
FREE_PROBE_GAP = 0.5
#: Seconds the least round trip and the most drain rate are taken over.
RTT_WINDOW = 10.0
DRAIN_WINDOW = 1.0
#: Queue delays (seconds): fitted past ENTER_DELAY; draining past TARGET_DELAY of excess; free,
#: and back at full detail, under LEAVE_DELAY of excess.
ENTER_DELAY = 0.2
TARGET_DELAY = 0.1
LEAVE_DELAY = 0.05
#: Seconds without a push held back before a fitted link is free, at coarser detail before full
#: detail is tried again.
FREE_AFTER = 1.0
COARSE_HOLD = 1.0
#: The bucket: seconds of drain it holds (bytes at least), and its refill as a share of the
#: drain rate: a little more than the link took (to find out when it takes more), or less
#: (to drain a queue).
CAP_SECONDS = 0.25
MIN_CAP = 4096.0
GAIN = 1.25
DRAIN_GAIN = 0.5
#: Bytes a bucket's level is compared within (its refills are computed in floating point).
SLACK = 1.0
#: Drain rate assumed before two acks measured one (bytes a second).
FLOOR = 1024.0


class Fit(Enum):
    """What to do with a cut push of a fitted link (rule 4)."""

    WHOLE = "whole"
    IMPORTANT = "important"  # its creations and deletions alone; moves wait
    WAIT = "wait"


@dataclass(slots=True)
class Link:
    """One connection's estimates and bucket (read by ``report``; written by ``Links``)."""

    samples: deque[tuple[float, float]] = field(default_factory=deque)  # (at, bytes/s)
    #: (at, seconds): the round trips in ``RTT_WINDOW`` that may yet be the least, least first
    #: (``_keep_least``); the last probe's is always kept.
    rtts: deque[tuple[float, float]] = field(default_factory=deque)
    base_rtt: float | None = None  # the least of ``rtts`` (they change on an ack only)
    last_rtt: float = 0.0
    probe: tuple[float, int] | None = None  # in flight: (sent at, bytes marked)
    probed_at: float = -math.inf
    acked: tuple[float, int] | None = None  # the last ack: (at, bytes marked)
    fitted: bool = False
    rough: bool = False  # its pushes go at coarser detail
    demand: dict[int, float] = field(default_factory=dict)  # sub -> bytes/s asked
    coarse_at: float = -math.inf
    push: int = 0  # bytes of its last push fitted
    measured: bool = False  # a drain sample was taken (only a measured link is fitted)
    held_back_at: float = -math.inf  # when a push last waited or went without its moves
    level: float = 0.0
    level_at: float = -math.inf


class Links:
    """Every connection's link (rules above). The shell feeds probes and acks; the relay's
    rounds ask ``until`` and ``fit``.

    Attributes:
        fitted_pushes: pushes cut down to their creations and deletions (rule 4).
        waited: pushes put off for their link.
    """

    def __init__(self) -> None:
        self._links: dict[int, Link] = {}
        #: Clients whose link is fitted: the one question asked per push (kept a set).
        self.fitted: set[int] = set()
        #: Clients back at full detail: their rows held coarser must go again (``take_refined``).
        self.refined: set[int] = set()
        self.fitted_pushes = 0
        self.waited = 0

    # -- estimates (rules 1-3) ------------------------------------------------------------

    def pushed(self, client: int, now: float) -> bool:
        """A push to ``client`` went out at ``now``: whether to probe its connection now (rule 1).
        A probe in flight past ``ENTER_DELAY`` of queue delay fits the link at once (rule 3):
        its ack waits behind the very queue it would measure."""
        link = self._links.get(client)
        if link is None:
            return True
        if link.probe is not None:
            if not link.fitted and _delay(link, now) > ENTER_DELAY:
                self._judge(client, link, now)
            return False
        return now - link.probed_at >= (PROBE_GAP if link.fitted else FREE_PROBE_GAP)

    def probed(self, client: int, sent: int, now: float) -> None:
        """A probe went out at ``now``, behind ``sent`` bytes written to the connection."""
        link = self._links.get(client)
        if link is None:  # not ``setdefault``: a ``Link`` made each probe is dear at 10^4 links
            link = self._links[client] = Link()
        link.probe, link.probed_at = (now, sent), now

    def acked(self, client: int, now: float, sent: int) -> None:
        """The probe in flight was acked at ``now``, ``sent`` bytes written to the connection
        by then: everything it marked was read."""
        link = self._links.get(client)
        if link is None or link.probe is None:
            return
        (sent_at, marked), link.probe = link.probe, None
        link.last_rtt = now - sent_at
        link.base_rtt = _keep_least(link.rtts, now, link.last_rtt, RTT_WINDOW)
        behind = sent > marked
        if link.acked is not None and now > link.acked[0]:
            rate = (marked - link.acked[1]) / (now - link.acked[0])
            if behind or rate >= (_drain(link, now) or 0.0):
                _keep(link.samples, now, rate, DRAIN_WINDOW)
                link.measured = True
        link.acked = (now, marked)
        self._judge(client, link, now)

    def unread_for(self, client: int, now: float) -> float:
        """Seconds the probe in flight on a fitted link has waited for its ack (0 if none, or
        the link is free): what ``client`` was sent before it is unread that long. The shell
        closes a slow consumer past its limit: a paced link's transport may never fill up."""
        link = self._links.get(client)
        if link is None or link.probe is None or not link.fitted:
            return 0.0
        return now - link.probe[0]

    def drain(self, client: int, now: float) -> float | None:
        """Bytes a second the connection drains (rule 2), None before two acks."""
        link = self._links.get(client)
        return None if link is None else _drain(link, now)

    def queue_delay(self, client: int, now: float) -> float:
        """Seconds pushes wait in the link beyond its round trip (rule 1)."""
        link = self._links.get(client)
        return 0.0 if link is None else _delay(link, now)

    def _judge(self, client: int, link: Link, now: float) -> None:
        """Fit the link, choose its detail, free it (rules 3 and 5)."""
        delay, drain = _excess(link, now), _drain(link, now) or FLOOR
        if not link.fitted and link.measured and _delay(link, now) > ENTER_DELAY:
            link.fitted, link.level, link.level_at, link.held_back_at = True, 0.0, now, now
            self.fitted.add(client)
        if not link.fitted:
            return
        if not link.rough and delay >= TARGET_DELAY and sum(link.demand.values()) > drain:
            link.rough, link.coarse_at = True, now
        elif link.rough and delay < LEAVE_DELAY and now - link.coarse_at >= COARSE_HOLD:
            link.rough = False
            self.refined.add(client)
        if not link.rough and delay < LEAVE_DELAY and now - link.held_back_at >= FREE_AFTER:
            link.fitted = False
            link.demand.clear()
            self.fitted.discard(client)

    # -- fitting pushes (rule 4) ----------------------------------------------------------

    def until(self, client: int, now: float) -> float | None:
        """When a fitted link may take a push if not ``now`` (its bucket is overdrawn)."""
        link = self._links.get(client)
        if link is None or not link.fitted:
            return None
        level = self._refill(link, now)
        if level >= 0.0:
            return None
        self.waited += 1
        link.held_back_at = now
        return now - level / _refill_rate(link, now)

    def take_refined(self) -> set[int]:
        """The clients back at full detail since the last call."""
        refined, self.refined = self.refined, set()
        return refined

    def coarse(self, client: int) -> bool:
        """Whether ``client``'s pushes go at coarser detail (rule 5)."""
        link = self._links.get(client)
        return link is not None and link.rough

    def fit(
        self, client: int, sub: int, rate: float, *, whole: int, important: int, now: float
    ) -> tuple[Fit, float]:
        """What of a push of ``whole`` bytes (``important`` of them its creations and deletions,
        0 if it has none or nothing else) to send to subscription ``sub`` asking ``rate``
        pushes a second, and when to try again with what is left (rule 4). Spends the bytes
        sent."""
        link = self._links.setdefault(client, Link())
        link.demand[sub], link.push = whole * rate, whole
        if not link.fitted:
            return Fit.WHOLE, now
        level, cap = self._refill(link, now), _cap(link, now)
        if whole <= level + SLACK or level >= cap - SLACK:
            link.level -= whole
            return Fit.WHOLE, now
        link.held_back_at = now
        if important:
            link.level -= important
            self.fitted_pushes += 1
            return Fit.IMPORTANT, self._ready_at(link, min(whole - important, cap), now)
        self.waited += 1
        return Fit.WAIT, self._ready_at(link, min(whole, cap), now)

    def _refill(self, link: Link, now: float) -> float:
        if now > link.level_at:
            gained = (now - link.level_at) * _refill_rate(link, now)
            link.level = min(_cap(link, now), link.level + gained)
            link.level_at = now
        return link.level

    def _ready_at(self, link: Link, need: float, now: float) -> float:
        return now + max(0.0, need - link.level) / _refill_rate(link, now)

    def forget(self, client: int, sub: int | None = None) -> None:
        """``client`` went away (or only its subscription ``sub`` ended)."""
        if sub is not None:
            if (link := self._links.get(client)) is not None:
                link.demand.pop(sub, None)
            return
        self._links.pop(client, None)
        self.fitted.discard(client)
        self.refined.discard(client)

    def report(self, client: int, now: float) -> dict[str, Any]:
        """What the relay knows of ``client``'s link, as plain data (the admin's listing)."""
        link = self._links.get(client)
        if link is None:
            return {"probed": False}
        return {
            "probed": link.acked is not None,
            "drain_bytes_per_second": _drain(link, now),
            "round_trip_seconds": _rtt(link),
            "queue_delay_seconds": _delay(link, now),
            "fitted": link.fitted,
            "detail": "coarse" if link.rough else "full",
            "asked_bytes_per_second": sum(link.demand.values()),
            "paced_bytes_per_second": _refill_rate(link, now) if link.fitted else None,
        }

    def fitting(self, per_push: int, rate: float, now: float, most: int = 20) -> dict[str, Any]:
        """What the fitted links would get of a view pushing ``per_push`` bytes ``rate`` times
        a second (a live EXPLAIN's ``links``): the drain a link needs to take it all, and for
        (at most ``most``) fitted links the pushes a second they would take of it."""
        fitted = []
        for client in sorted(self.fitted)[:most]:
            link = self._links[client]
            paced = _refill_rate(link, now)
            pushes = rate if not per_push else min(rate, paced / per_push)
            fitted.append(
                {
                    "client": client,
                    "paced_bytes_per_second": paced,
                    "pushes_per_second": pushes,
                    "detail": "coarse" if link.rough else "full",
                }
            )
        return {
            "needs_bytes_per_second": per_push * rate,
            "probed": len(self._links),
            "fitted": len(self.fitted),
            "fitted_links": fitted,
        }


def _keep(window: deque[tuple[float, float]], now: float, value: float, span: float) -> None:
    """Add a sample; drop those older than ``span`` but the last."""
    window.append((now, value))
    while len(window) > 1 and window[0][0] < now - span:
        window.popleft()


def _keep_least(window: deque[tuple[float, float]], now: float, value: float, span: float) -> float:
    """Add a sample and return the least of those in the last ``span`` (the new one included).

    The window keeps only samples that may yet be the least: an older one no smaller than a
    newer one never will be again (it leaves the window first), so the samples kept rise from
    the least, and each ack costs what it adds and drops, not a pass over the window.
    """
    while window and window[-1][1] >= value:
        window.pop()
    window.append((now, value))
    while window[0][0] < now - span:  # the new sample is within: the loop ends at it
        window.popleft()
    return window[0][1]


def _rtt(link: Link) -> float | None:
    return link.base_rtt


def _drain(link: Link, now: float) -> float | None:
    recent = [rate for at, rate in link.samples if at >= now - DRAIN_WINDOW]
    if recent:
        return max(recent)
    return link.samples[-1][1] if link.samples else None


def _excess(link: Link, now: float) -> float:
    """The queue delay beyond the time its last push takes through the link."""
    return _delay(link, now) - link.push / (_drain(link, now) or FLOOR)


def _delay(link: Link, now: float) -> float:
    base = _rtt(link)
    if base is None:
        return 0.0
    last = link.last_rtt if link.probe is None else max(link.last_rtt, now - link.probe[0])
    return max(0.0, last - base)


def _cap(link: Link, now: float) -> float:
    return max(MIN_CAP, CAP_SECONDS * (_drain(link, now) or FLOOR))


def _refill_rate(link: Link, now: float) -> float:
    gain = GAIN if _excess(link, now) < TARGET_DELAY else DRAIN_GAIN
    return gain * max(FLOOR, _drain(link, now) or FLOOR)
