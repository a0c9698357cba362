"""Draw the benchmarks' key figures from the committed results into ``docs/img/``.

Run ``.venv/bin/python bench/plots.py`` (matplotlib, from the ``dev`` extra). It reads
``bench/results/*.json`` and writes three PNG images that ``docs/benchmarks.md`` shows:

* ``relay.png``: one relay process, p99 latency and relay CPU per push against subscribers for
  a few runs, and the largest passing number of subscribers of every run (``relay*.json``);
* ``sharing.png``: the publisher's egress against subscribers, direct and through relays, and
  every measured relay configuration against the two sharing targets (``sharing*.json``);
* ``publisher.png``: the pipeline against Spark's floor under it (``pipeline.json``,
  ``state.json``), snapshots from the state store or the mirror (``snapshots*.json``) and the
  log's durable appends (``log.json``).

It runs no benchmark. The same results give the same bytes with the same matplotlib: the style
is matplotlib's defaults plus fixed sizes and the DejaVu Sans font it ships, whatever the
user's ``matplotlibrc`` says, and the images carry no date and no software version.
"""

from __future__ import annotations

import argparse
import io
import json
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter
from PIL import Image

if TYPE_CHECKING:  # matplotlib.typing is provisional: not imported when the script runs
    from matplotlib.typing import RcKeyType

RESULTS = Path(__file__).parent / "results"
IMAGES = Path(__file__).parent.parent / "docs" / "img"

# Runs of bench/relay.py drawn in full: the first committed run, one per machine and stage of the
# relay since, and the committed (relay.json) and latest runs. The rest are in the third panel.
RELAY_RUNS = (
    "relay-d31cf84.json",
    "relay-b47b4f9.json",
    "relay-c6253ca.json",
    "relay.json",
    "relay-f3b7283.json",
)

STYLE: dict[RcKeyType, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "svg.hashsalt": "fanout",
    "path.simplify": False,
}

TARGET = {"color": "0.35", "linestyle": "--", "linewidth": 1.0}


def load(results: Path, name: str) -> dict[str, Any]:
    """Read one results file.

    Args:
        results: the results folder.
        name: the file's name, e.g. ``relay.json``.

    Returns:
        The file's JSON object.

    Raises:
        FileNotFoundError: the file is not there (its benchmark has not been run).
    """
    path = results / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file (run its benchmark first)")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def run_date(data: dict[str, Any]) -> datetime:
    """When a benchmark ran, from its results' ``machine.date``."""
    return datetime.fromisoformat(data["machine"]["date"])


def cpu_name(data: dict[str, Any]) -> str:
    """The machine's CPU as a short name: ``Intel Xeon`` or ``AMD EPYC``."""
    cpu = str(data["machine"]["cpu"])
    return "Intel Xeon" if "Xeon" in cpu else cpu


def run_label(name: str, data: dict[str, Any]) -> str:
    """A legend label for one run: its date, its machine, and its commit when the file names it.

    Args:
        name: the results file's name; ``relay-3298ade.json`` names commit ``3298ade``.
        data: the file's JSON object.

    Returns:
        E.g. ``2026-11-25 12:59, Intel Xeon, c6253ca``, or the file's name when it names no
        commit (``relay.json``).
    """
    label = f"{run_date(data):%Y-%m-%d %H:%M}, {cpu_name(data)}"
    commit = re.match(r"^[a-z]+-([0-9a-f]{7})\b", name)
    return f"{label}, {commit.group(1) if commit else name}"


def relay_runs(results: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every ``bench/relay.py`` results file, oldest run first.

    Args:
        results: the results folder.

    Returns:
        ``(file name, JSON object)`` pairs sorted by the date of the run.
    """
    # relaycore*.json are bench/relaycore.py's (and bench/interpreters.py's), not runs of relay.py
    names = sorted(
        p.name for p in results.glob("relay*.json") if not p.name.startswith("relaycore")
    )
    runs = [(name, load(results, name)) for name in names]
    # Other files share the prefix (profiles, A/Bs, notes): a run has its date and its result.
    runs = [(n, d) for n, d in runs if "date" in d.get("machine", {}) and "max_subscribers" in d]
    return sorted(runs, key=lambda run: run_date(run[1]))


def plot_relay(results: Path) -> Figure:
    """The relay figure: latency and CPU per push against subscribers, and each run's result.

    Args:
        results: the results folder.

    Returns:
        The figure, three panels side by side.
    """
    fig, (lat, cpu, runs) = plt.subplots(1, 3, figsize=(12.5, 4.4), layout="constrained")
    colors = plt.get_cmap("viridis")
    for i, name in enumerate(RELAY_RUNS):
        data = load(results, name)
        trials = sorted(
            (t for t in data["trials"] if t["group"] == 1), key=lambda t: t["subscribers"]
        )
        color = colors(i / (len(RELAY_RUNS) - 1) * 0.9)
        n = [t["subscribers"] for t in trials]
        for ax, key in ((lat, "p99_ms"), (cpu, "relay_cpu_us_per_push")):
            ax.plot(
                n, [t[key] for t in trials], color=color, linewidth=1.2, label=run_label(name, data)
            )
            for t in trials:
                ax.plot(
                    t["subscribers"],
                    t[key],
                    "o",
                    markersize=4.5,
                    color=color,
                    markerfacecolor=color if t["passed"] else "white",
                )
    committed = load(results, "relay.json")
    target_n = committed["target_max_subscribers"]
    lat.axhline(committed["criteria"]["p99_ms_max"], **TARGET)
    for ax in (lat, cpu):
        ax.axvline(target_n, **TARGET)
        ax.set_xlabel("subscribers on one relay")
        ax.set_xlim(0, 4200)
    lat.set_ylim(0, 300)
    lat.set_ylabel("p99 tick-swap to receipt, ms")
    lat.set_title(f"p99 latency (target: {target_n:,} subscribers, ≤ 100 ms)")
    cpu.set_ylabel("relay CPU per push, µs")
    cpu.set_ylim(0, 320)
    cpu.set_title("Relay CPU per push")
    handles, labels = lat.get_legend_handles_labels()
    handles += [
        Line2D([], [], marker="o", color="0.3", linestyle="", label="trial passed"),
        Line2D(
            [],
            [],
            marker="o",
            color="0.3",
            markerfacecolor="white",
            linestyle="",
            label="trial failed",
        ),
    ]
    labels += ["trial passed", "trial failed"]
    lat.legend(handles, labels, loc="upper left")

    markers = {"Intel Xeon": "s", "AMD EPYC": "o"}
    every = relay_runs(results)
    for cpu_kind, marker in markers.items():
        mine = [(run_date(d), d["max_subscribers"]) for _, d in every if cpu_name(d) == cpu_kind]
        runs.plot(
            [when for when, _ in mine],
            [m for _, m in mine],
            marker,
            color="C0",
            markersize=5,
            label=f"a run on {cpu_kind}",
        )
    runs.plot(
        run_date(committed),
        committed["max_subscribers"],
        "*",
        color="C3",
        markersize=11,
        label="the committed run (relay.json)",
    )
    runs.axhline(target_n, **TARGET)
    runs.set_ylim(0, 2600)
    runs.set_ylabel("max_subscribers")
    runs.set_title("Largest passing subscribers, every run")
    # matplotlib.dates has no annotations or stubs.
    runs.xaxis.set_major_locator(mdates.DayLocator())  # type: ignore[no-untyped-call]
    runs.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d"))  # type: ignore[no-untyped-call]
    runs.set_xlabel("date of the run (2026, UTC)")
    runs.legend(loc="upper left")
    return fig


def configuration(setup: dict[str, Any], assign: str | None) -> tuple[str, str]:
    """A ``bench/sharing.py`` configuration as (widening, assignment) names.

    Args:
        setup: the results' ``setup``; missing or null options are the defaults of the
            benchmark before it ran relays in a map by default (``tiles``, margin 0.5, no
            overshoot, subscribers spread round robin, no map).
        assign: the assignment of this case, when not the setup's own (the by-point or
            by-area comparison run beside it).

    Returns:
        E.g. ``("enclose, margin 0, overshoot 0.75", "by key")``; subscribers spread round
        robin over relays in a map are ``"map: redirected"`` (or ``forwarded``).
    """
    widen = setup.get("widen") or "tiles"
    if widen in ("enclose", "fit"):
        margin = setup.get("margin")
        widen += f", margin {0.5 if margin is None else margin:g}"
        if setup.get("overshoot"):
            widen += f", overshoot {setup['overshoot']:g}"
    how = assign or setup.get("assign") or "spread"
    if how == "spread" and setup.get("registry"):
        forward = setup.get("registry_policy") == "forward"
        return widen, "map: forwarded" if forward else "map: redirected"
    return widen, "spread round robin" if how == "spread" else f"by {how}"


def sharing_points(results: Path) -> list[tuple[str, str, float, float]]:
    """Every relay case of every ``bench/sharing.py`` results file.

    Args:
        results: the results folder.

    Returns:
        ``(widening, assignment, egress ratio 10,000 / 1,000, savings at 10,000)`` for each
        case, in file order, from bytes per micro-batch (free of Spark's pace, which a shared
        machine makes differ between windows).
    """
    points = []
    for path in sorted(results.glob("sharing*.json")):
        data = load(results, path.name)
        if "relay" not in data:  # sharingmodel.json: bench/sharingmodel.py's rows, no run
            continue
        widen, how = configuration(data["setup"], None)
        batch = data["per_micro_batch"]
        points.append((widen, how, batch["egress_ratio_relay"], batch["savings_at_10000"]))
        for key in ("relay_by_point", "relay_by_area"):
            if key in data:
                widen, how = configuration(data["setup"], key.removeprefix("relay_by_"))
                case = data[key]["per_micro_batch"]
                points.append((widen, how, case["egress_ratio"], case["savings_at_10000"]))
    return points


def plot_sharing(results: Path) -> Figure:
    """The sharing figure: egress against subscribers, and every configuration's two numbers.

    Args:
        results: the results folder.

    Returns:
        The figure, two panels side by side.
    """
    fig, (egress, targets) = plt.subplots(1, 2, figsize=(12.5, 4.8), layout="constrained")
    default = load(results, "sharing.json")
    alone = load(results, "sharing-alone.json")
    best = load(results, "sharing-key-overshoot-0.75.json")
    points = sharing_points(results)
    # One colour per widening in both panels, the default (tiles) first.
    widenings = sorted({p[0] for p in points}, key=lambda w: (w != "tiles", len(w), w))
    assignments = [
        "spread round robin",
        "by point",
        "by area",
        "by key",
        "map: redirected",
        "map: forwarded",
    ]
    markers = dict(zip(assignments, ("o", "s", "^", "D", "P", "X"), strict=True))
    lines = [(default["direct"], "direct: each subscriber's box at the publisher", "k", "o")]
    for data in (default, alone, best):
        widen, how = configuration(data["setup"], None)
        color = f"C{widenings.index(widen)}"
        lines.append((data["relay"], f"4 relays: {widen}; {how}", color, markers[how]))
    for steps, label, color, marker in lines:
        n = [s["subscribers"] for s in steps]
        egress.plot(
            n,
            [s["egress_bytes_per_micro_batch"] / 1000 for s in steps],
            marker=marker,
            color=color,
            label=label,
        )
    egress.set_xscale("log")
    egress.set_yscale("log")
    egress.set_xlabel("subscribers")
    egress.set_ylabel("publisher egress, kB per micro-batch")
    egress.set_title("Publisher egress (20,000 agents, 50 points of interest)")
    egress.legend(loc="upper left")

    ratio_max = default["targets"]["egress_ratio_relay_max"]
    savings_min = default["targets"]["savings_at_10000_min"]
    targets.fill_between([0.95, ratio_max], savings_min, 100, color="C2", alpha=0.1)
    targets.axvline(ratio_max, **TARGET)
    targets.axhline(savings_min, **TARGET)
    for widen, how, ratio, savings in points:
        color = f"C{widenings.index(widen)}"
        targets.plot(ratio, savings, markers[how], color=color, markersize=6, alpha=0.85)
    targets.set_yscale("log")
    targets.set_xlim(0.95, 1.7)
    targets.set_ylim(2, 100)
    targets.set_xlabel("egress at 10,000 / at 1,000 subscribers (target ≤ 1.2)")
    targets.set_ylabel("direct egress / relay egress at 10,000 (target ≥ 50)")
    targets.set_title("Every relay configuration (both targets: shaded)")
    handles = [
        Line2D([], [], marker="o", color=f"C{i}", linestyle="", label=w)
        for i, w in enumerate(widenings)
    ]
    handles += [
        Line2D([], [], marker=markers[a], color="0.3", linestyle="", label=a) for a in assignments
    ]
    targets.legend(handles=handles, loc="lower right")
    return fig


def plot_publisher(results: Path) -> Figure:
    """The publisher figure: pipeline and Spark's floor, snapshots, the log.

    Args:
        results: the results folder.

    Returns:
        The figure, four panels in two rows.
    """
    fig, axes = plt.subplots(2, 2, figsize=(12.5, 8.4), layout="constrained")
    (rate, micro), (snap, log) = axes
    pipeline = load(results, "pipeline.json")
    state = load(results, "state.json")
    steps = pipeline["throughput_steps"]
    cases = (
        ("source", "source alone", "C7"),
        ("hdfs", "source + state, HDFS-backed store", "C0"),
        ("rocksdb", "source + state, RocksDB", "C1"),
    )
    for case, label, color in cases:
        sizes = state["cases"][case]["sizes"]
        rows = [s["rows_per_batch"] for s in sizes]
        if case != "source":
            rate.plot(
                rows,
                [s["rows_per_s"] for s in sizes],
                "o-",
                color=color,
                label=f"Spark floor: {label}",
            )
        micro.plot(
            rows,
            [s["trigger_ms_median"] for s in sizes],
            "o-",
            color=color,
            label=f"Spark floor: {label}",
        )
    for ax, key in ((rate, "processed_updates_per_s"), (micro, "latency_p50_ms")):
        for s in steps:
            ax.plot(
                s["rows_per_micro_batch"],
                s[key],
                "D",
                markersize=6,
                color="C3",
                markerfacecolor="C3" if s["sustained"] else "white",
            )
        ax.plot([], [], "D", color="C3", label="fanout publisher (hollow: not sustained)")
        ax.set_xscale("log")
        ax.set_xlabel("rows per micro-batch")
    rate.axhline(pipeline["targets"]["updates_per_s"], **TARGET)
    rate.set_ylim(0, 330_000)
    rate.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k"))
    rate.set_ylabel("rows (updates) per second")
    rate.set_title("Throughput on Spark local[2] (target 300k/s)")
    rate.legend(loc="upper left")
    micro.axhline(pipeline["targets"]["latency_p50_ms"], **TARGET)
    micro.set_yscale("log")
    micro.set_ylabel("ms")
    micro.set_title("Micro-batch time; tick-to-relay p50 (target 300 ms)")
    micro.legend(loc="upper left")

    kinds = (("box primitives", "snapshots.json"), ("SQL primitives", "snapshots-sql.json"))
    for i, (_, name) in enumerate(kinds):
        data = load(results, name)
        store, mirror = data["state_store_ms_median"], data["mirror_ms_median"]
        snap.bar(i - 0.2, store, 0.4, color="C0", label="state store" if i == 0 else None)
        snap.bar(i + 0.2, mirror, 0.4, color="C2", label="driver's mirror" if i == 0 else None)
        snap.annotate(
            f"{data['speedup_median']:g}x faster",
            (i + 0.2, mirror),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
        )
        snap.annotate(
            f"{store:,.0f} ms",
            (i - 0.2, store),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
        )
    snap.set_xticks([0, 1], [k for k, _ in kinds])
    snap.set_yscale("log")
    snap.set_ylim(10, 20_000)
    snap.set_ylabel("ms per micro-batch (median)")
    snap.set_title("Snapshots of 20 new primitives, 1M rows in state")
    snap.legend(loc="upper left")

    data = load(results, "log.json")
    backends = (("sqlite", "SQLite", "C0"), ("postgresql", "PostgreSQL", "C1"))
    groups = (("append_per_s", "10,000-row entries"), ("small_append_per_s", "10-row entries"))
    for j, (backend, label, color) in enumerate(backends):
        values = [data[backend][key] for key, _ in groups]
        where = [i + (j - 0.5) * 0.4 for i in range(len(groups))]
        log.bar(where, values, 0.4, color=color, label=label)
        for x, v in zip(where, values, strict=True):
            log.annotate(
                f"{v:,.0f}", (x, v), xytext=(0, 3), textcoords="offset points", ha="center"
            )
    log.set_xticks(range(len(groups)), [g for _, g in groups])
    log.set_ylim(0, 3600)
    log.set_ylabel("durable appends per second")
    log.set_title("The publisher's log: fsynced appends")
    log.legend(loc="upper left")
    return fig


def save(fig: Figure, path: Path) -> None:
    """Write a figure as a PNG of at most 256 colours, without metadata, and close it.

    The palette makes the files about a third of the size; the figures use a dozen colours
    and their anti-aliased edges, which 256 hold. Nothing in the file depends on when or with
    which software version it was written.

    Args:
        fig: the figure.
        path: where to write it.
    """
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", metadata={"Software": None})
    plt.close(fig)
    with Image.open(rendered) as image:
        paletted = image.convert("RGB").quantize(256, method=Image.Quantize.MAXCOVERAGE)
    paletted.save(path, format="PNG", optimize=True)


def draw(results: Path, images: Path) -> list[Path]:
    """Draw every figure.

    Args:
        results: the folder of results files.
        images: the folder to write the images in (made if missing).

    Returns:
        The images written.

    Raises:
        FileNotFoundError: a results file a figure needs is missing.
    """
    mpl.use("Agg")  # files only: no display, and the same renderer everywhere
    images.mkdir(parents=True, exist_ok=True)
    written = []
    with plt.style.context("default"), mpl.rc_context(STYLE):
        for name, plot in (
            ("relay", plot_relay),
            ("sharing", plot_sharing),
            ("publisher", plot_publisher),
        ):
            path = images / f"{name}.png"
            save(plot(results), path)
            written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder for the images")
    args = parser.parse_args()
    for path in draw(args.results, args.out):
        print(path)


if __name__ == "__main__":
    main()
