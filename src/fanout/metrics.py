"""``GET /metrics``: a relay's and a publisher's counters in Prometheus' text format.

Both already listen on a WebSocket port; an HTTP ``GET /metrics`` (and ``/healthz``,
``/readyz``) on that same port is answered instead of being upgraded (websockets'
``process_request`` hook), so a Prometheus server, or ``curl``, reads them where the process
already listens. Any other plain HTTP request gets websockets' own answer (426: a WebSocket is
expected).

The process says what it measures as :class:`Sample` values, read afresh at each request
(nothing is sampled between requests); ``prometheus_client`` turns them into the exposition
format, beside its own collectors of the process's figures (``process_*``: memory, CPU, open
files; ``python_*``: version, garbage collector), the names every Prometheus client exports.
"""

from __future__ import annotations

import bisect
import platform
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import metadata
from ssl import SSLContext
from typing import Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString
from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from fanout import DISTRIBUTION

PATH = "/metrics"
HEALTH = "/healthz"
READY = "/readyz"
#: The probes' answers' type (as websockets' plain text responses).
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Sample:
    """One value of one metric.

    Attributes:
        name: the metric's name without the ``fanout_`` prefix (a counter's without ``_total``).
        kind: ``counter`` (only grows while the process runs) or ``gauge``.
        help: what it counts.
        value: its value now.
        labels: label name -> value (e.g. which relay).
    """

    name: str
    kind: Literal["counter", "gauge"]
    help: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


#: prometheus_client's collectors of the process's own figures, read afresh at each request:
#: ``process_resident_memory_bytes``, ``process_cpu_seconds_total``, ``process_open_fds``,
#: ``process_max_fds``, ``process_start_time_seconds``, ``python_info``, ``python_gc_*``.
PROCESS = CollectorRegistry(auto_describe=False)
ProcessCollector(registry=PROCESS)
PlatformCollector(registry=PROCESS)
GCCollector(registry=PROCESS)


#: Bucket bounds, in seconds, of latency histograms (a tick's age when it is pushed).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class Histogram:
    """Observations counted in buckets: Prometheus' histogram (cumulative buckets, sum, count).

    Attributes:
        name: the metric's name without the ``fanout_`` prefix.
        help: what it measures.
        bounds: the buckets' upper bounds, ascending (``+Inf`` is added on output).
    """

    name: str
    help: str
    bounds: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count one observation (one at a bucket's bound falls in that bucket)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def family(self) -> HistogramMetricFamily:
        """The histogram as prometheus_client exposes it."""
        cumulative, buckets = 0, []
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))  # type: ignore[no-untyped-call]
        family = HistogramMetricFamily(f"fanout_{self.name}", self.help)
        family.add_metric([], buckets, self.total)
        return family


def build_info(role: str) -> Sample:
    """``fanout_build_info``: 1, labelled with fanout's version, the Python running it and the
    process's role (``relay``, ``publisher``)."""
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # a source tree never installed
        version = "unknown"
    labels = {"version": version, "python": platform.python_version(), "role": role}
    return Sample("build_info", "gauge", "fanout's version and Python; always 1.", 1, labels)


def process_of(pid: int, prefix: str) -> Collector:
    """The ``process_*`` figures of another process of the same host, named
    ``{prefix}_process_*``: the publisher's Spark driver JVM, where its memory goes."""
    return ProcessCollector(namespace=prefix, pid=lambda: pid, registry=None)


def render(samples: Iterable[Sample | Histogram], collectors: Sequence[Collector] = ()) -> bytes:
    """The samples in Prometheus' text exposition format, one family per name, the process's
    own figures (``PROCESS``) and what ``collectors`` collect."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Samples(list(samples)))
    registry.register(PROCESS)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)


def route(
    samples: Callable[[], Iterable[Sample | Histogram]],
    unready: Callable[[], str | None] = lambda: None,
    collectors: Sequence[Collector] = (),
) -> Callable[[ServerConnection, Request], Response | None]:
    """A websockets ``process_request`` hook answering ``GET /metrics`` with ``samples()``,
    and the probes of load balancers and orchestrators.

    Args:
        samples: the process's metrics now.
        unready: why the process cannot serve now, or None if it can.
        collectors: more of prometheus_client's collectors to answer with (``render``).

    ``GET /healthz`` answers 200 while the process answers at all (liveness); ``GET /readyz``
    200 when ``unready()`` is None, else 503 with its reason (readiness: send it no one).
    """

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        answered = answer(request.path, samples, unready, collectors)
        if answered is None:
            return None  # a WebSocket handshake (or websockets' 426 for plain HTTP)
        status, content_type, body = answered
        response = connection.respond(status, body.decode())
        # ``respond``'s plain text becomes the answer's own type: for ``/metrics`` the format's
        # version 0.0.4, which every Prometheus reads (all fanout's metric names are plain
        # ones, the same in 1.0.0).
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = content_type
        return response

    return process_request


def answer(
    target: str,
    samples: Callable[[], Iterable[Sample | Histogram]],
    unready: Callable[[], str | None] = lambda: None,
    collectors: Sequence[Collector] = (),
) -> tuple[HTTPStatus, str, bytes] | None:
    """The answer to a request for ``target`` (its path and query) if it is one of these
    paths (``route``): its status, content type and body; None for another path."""
    path = target.split("?", 1)[0]
    if path == HEALTH:
        return HTTPStatus.OK, TEXT, b"ok\n"
    if path == READY:
        reason = unready()
        if reason is None:
            return HTTPStatus.OK, TEXT, b"ready\n"
        return HTTPStatus.SERVICE_UNAVAILABLE, TEXT, f"not ready: {reason}\n".encode()
    if path != PATH:
        return None
    return HTTPStatus.OK, CONTENT_TYPE_PLAIN_0_0_4, render(samples(), collectors)


def scrape(url: str, timeout: float = 10.0, ssl: SSLContext | None = None) -> dict[str, float]:
    """Read the ``GET /metrics`` of the relay or publisher at ``url`` (blocking).

    Args:
        url: where it serves, ``ws://host:port`` (as subscribers and relays connect) or
            ``http://host:port``; ``wss://`` or ``https://`` for one serving TLS.
        ssl: the TLS context to verify it with (default: the system's authorities).

    Returns:
        Each sample's value by its name as exposed, with its labels in sorted order:
        ``fanout_relay_pushes_total``,
        ``fanout_publisher_relay_bytes_sent_total{name="a",relay="1"}``.
    """
    parts = urllib.parse.urlsplit(url)
    scheme = "https" if parts.scheme in ("wss", "https") else "http"
    address = f"{scheme}://{parts.netloc}{PATH}"
    with urllib.request.urlopen(address, timeout=timeout, context=ssl) as response:
        text = response.read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


class _Samples(Collector):
    def __init__(self, samples: list[Sample | Histogram]) -> None:
        self._samples = samples

    def collect(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for sample in self._samples:
            if isinstance(sample, Histogram):
                yield sample.family()
                continue
            family = families.get(sample.name)
            if family is None:
                family = _family(sample)
                families[sample.name] = family
            family.add_metric(list(sample.labels.values()), sample.value)
        yield from families.values()


def _family(sample: Sample) -> CounterMetricFamily | GaugeMetricFamily:
    name, labels = f"fanout_{sample.name}", list(sample.labels)
    if sample.kind == "counter":
        return CounterMetricFamily(name, sample.help, labels=labels)
    return GaugeMetricFamily(name, sample.help, labels=labels)
