"""The ``GET /metrics`` of a relay's leader: its workers' figures summed (``relay.shell.workers``).

Each worker answers its own ``/metrics`` on its own loopback port. The leader reads every
worker's and sums them family by family, sample by sample (counters, gauges, histograms'
buckets), so that a scrape of the relay's port (which a worker answers from the leader) or the
leader's reads the relay as one: ``fanout_relay_pushes_total`` is every worker's pushes. The
leader's own figures are kept where the workers have none (its MQTT listener's) and for its
link upstream (``relay_upstream_*``: the workers' upstream is the leader, the relay's is the
leader's; so are the seqs asked upstream for relays below). The workers' processes are summed
as ``relay_workers_cpu_seconds`` and ``relay_workers_resident_memory_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample as Observed

from fanout.metrics import Histogram, Sample

#: Families the leader reports of itself, never the workers' sum: its link upstream, and the
#: seqs it asked upstream for relays below (the workers' asks are to the leader, which merges
#: them: the relay's asks upstream are the leader's).
OWN = ("relay_upstream_", "build_info", "relay_worker", "relay_below_curiosity_passed")
#: The workers' process figures summed: prometheus_client's family -> the leader's sample.
PROCESSES = {
    "process_cpu_seconds": Sample(
        "relay_workers_cpu_seconds",
        "counter",
        "CPU seconds the relay's workers spent, summed (their process_cpu_seconds_total).",
        0.0,
    ),
    "process_resident_memory_bytes": Sample(
        "relay_workers_resident_memory_bytes",
        "gauge",
        "Resident memory of the relay's workers, summed (their process_resident_memory_bytes).",
        0.0,
    ),
}


def summed(texts: Iterable[str]) -> list[Sample | Histogram]:
    """The samples of ``texts`` (each a worker's ``/metrics``) summed over them, by family and
    labels; families of ``OWN`` and the processes' other figures left out.

    Raises:
        ValueError: a text that is not Prometheus' exposition format.
    """
    values: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
    histograms: dict[str, Histogram] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name in PROCESSES:
                value = sum(sample.value for sample in family.samples)
                _add(values, PROCESSES[family.name], value, {})
            elif family.name.startswith("fanout_") and not family.name[7:].startswith(OWN):
                name = family.name[len("fanout_") :]
                if family.type == "histogram":
                    _add_histogram(histograms, name, family.documentation, family.samples)
                elif family.type in ("counter", "gauge"):
                    kind: Literal["counter", "gauge"] = (
                        "counter" if family.type == "counter" else "gauge"
                    )
                    for sample in family.samples:
                        if sample.name.endswith("_created"):
                            continue
                        shape = Sample(name, kind, family.documentation, 0.0, sample.labels)
                        _add(values, shape, sample.value, sample.labels)
    return [*values.values(), *histograms.values()]


def merged(
    own: Sequence[Sample | Histogram], workers: Sequence[Sample | Histogram]
) -> list[Sample | Histogram]:
    """The leader's answer: ``workers`` (``summed``), and of ``own`` the families they lack and
    those of ``OWN``."""
    theirs = {sample.name for sample in workers}
    kept = [s for s in own if s.name not in theirs or s.name.startswith(OWN)]
    return [*kept, *(s for s in workers if not s.name.startswith(OWN))]


def _add(
    values: dict[tuple[str, tuple[tuple[str, str], ...]], Sample],
    shape: Sample,
    value: float,
    labels: dict[str, str],
) -> None:
    key = (shape.name, tuple(sorted(labels.items())))
    was = values.get(key)
    total = value + (0.0 if was is None else was.value)
    values[key] = Sample(shape.name, shape.kind, shape.help, total, dict(labels))


def _add_histogram(
    histograms: dict[str, Histogram], name: str, help_text: str, samples: Sequence[Observed]
) -> None:
    """Add one worker's histogram (cumulative buckets, sum, count) to ``histograms[name]``."""
    bounds: list[float] = []
    cumulative: list[float] = []
    total = count = 0.0
    for sample in samples:
        suffix = sample.name[len("fanout_") + len(name) :]
        if suffix == "_bucket":
            bounds.append(float(sample.labels["le"]))
            cumulative.append(sample.value)
        elif suffix == "_sum":
            total = sample.value
        elif suffix == "_count":
            count = sample.value
    finite = tuple(bound for bound in bounds if bound != float("inf"))
    histogram = histograms.get(name)
    if histogram is None:
        histogram = histograms[name] = Histogram(name, help_text, finite)
    if histogram.bounds != finite:
        raise ValueError(f"{name}: workers' buckets differ ({histogram.bounds} and {finite})")
    previous = 0.0
    for i, at in enumerate(cumulative):
        histogram.counts[i] += int(at - previous)
        previous = at
    histogram.total += total
    histogram.count += int(count)
