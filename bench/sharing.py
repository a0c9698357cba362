"""Benchmark sharing (issue 4): the publisher's egress and CPU as subscribers grow, through
relays and directly.

Run ``.venv/bin/python bench/sharing.py`` (``--steps 100,1000,10000``, ``--duration`` seconds per
window, ``--compare-assign``, ``--assign``, ``--no-registry``, ``--registry-policy``, ``--widen``,
``--margin``, ``--overshoot``); it prints one JSON object and, with the default steps and
configuration, writes ``bench/results/sharing.json``. A real Spark publisher serves every step;
the relay case puts N box views on 4 real relays (by default sharing a map of responsibility in
a Redis Cluster, subscribers entering round robin), the direct case acquires the same boxes at
the publisher itself; each window measures the publisher's egress (``ss -ti``) and CPU.
Headline: egress at 10,000 over 1,000 subscribers, and direct over relay egress at 10,000.
docs/benchmarks/sharing.md says how in full and what it found; the parts: ``sharingclients``,
``sharingservers``, ``sharingstep``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from fanout.client.routing import DEFAULT_SIDE
from fanout.launch import Children
from fanout.relay.core.planner import IN_A_MAP, WIDENINGS, Policy
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.sharing import AGENTS, POINTS, RELAYS, VIEW_SIDE, WORLD
from sharingclients import run_clients
from sharingservers import MASTER, PERIOD, TICK_RATE, TRIGGER, relay_policy, start_publisher
from sharingstep import measure_step

RESULTS = Path(__file__).parent / "results" / "sharing.json"

DEFAULT_STEPS = (100, 1000, 10000)
# Pushes/s per subscription: the relays' pushing is not what is measured, and at 10,000
# subscriptions a higher rate would take the cores the publisher needs.
PUSH_RATE = 0.1
PER_CONNECTION = 50  # subscriptions per subscriber connection
TARGET_EGRESS_RATIO = 1.2
TARGET_SAVINGS = 50.0


def effective_policy(args: argparse.Namespace) -> Policy:
    """The policy the relays plan with (``RelayConfig.planning``)."""
    given = relay_policy(args)
    if given is not None:
        return given
    return IN_A_MAP if args.registry else Policy()


def ratio(steps: list[dict[str, Any]], key: str = "egress_bytes_per_s") -> float | None:
    """``key`` at the last step over ``key`` at the step before."""
    if len(steps) < 2 or not steps[-2][key] or steps[-1][key] is None:
        return None
    last: float = steps[-1][key]
    before: float = steps[-2][key]
    return round(last / before, 3)


def savings(
    direct: list[dict[str, Any]], relay: list[dict[str, Any]], key: str = "egress_bytes_per_s"
) -> float | None:
    """Direct egress over relay egress (``key``) at the last step."""
    if not relay[-1][key] or direct[-1][key] is None:
        return None
    alone: float = direct[-1][key]
    shared: float = relay[-1][key]
    return round(alone / shared, 2)


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every step, each case in turn (so a drift of the machine touches all of them)."""
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    compared = f"relay-by-{args.compare_assign}"
    cases = ["relay", "direct"] + ([compared] if args.compare_assign else [])
    async with Children() as children:
        publisher, port = await start_publisher(children, workdir, args)
        results: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        try:
            for count in args.steps:
                for case in cases:
                    step = await measure_step(
                        case=case,
                        count=count,
                        publisher=publisher,
                        port=port,
                        args=args,
                        workdir=workdir,
                    )
                    results[case].append(step)
        finally:
            await publisher.stop()
    relay, direct = results["relay"], results["direct"]
    ratio_relay, saved = ratio(relay), savings(direct, relay)
    per_batch = "egress_bytes_per_micro_batch"
    ratio_per_batch = ratio(relay, per_batch)
    saved_per_batch = savings(direct, relay, per_batch)
    out: dict[str, Any] = {
        "egress_ratio_relay": ratio_relay,
        "egress_ratio_direct": ratio(direct),
        "savings_at_10000": saved,
        "ratio_steps": list(args.steps[-2:]),
        "targets": {
            "egress_ratio_relay_max": TARGET_EGRESS_RATIO,
            "egress_ratio_relay_met": ratio_relay is not None
            and ratio_relay <= TARGET_EGRESS_RATIO,
            "savings_at_10000_min": TARGET_SAVINGS,
            "savings_at_10000_met": saved is not None and saved >= TARGET_SAVINGS,
        },
        # The same from bytes per micro-batch: free of differences in micro-batch rate
        # between windows (the machine is shared; Spark's pace varies with its load).
        "per_micro_batch": {
            "egress_ratio_relay": ratio_per_batch,
            "egress_ratio_direct": ratio(direct, per_batch),
            "savings_at_10000": saved_per_batch,
            "egress_ratio_relay_met": ratio_per_batch is not None
            and ratio_per_batch <= TARGET_EGRESS_RATIO,
            "savings_at_10000_met": saved_per_batch is not None
            and saved_per_batch >= TARGET_SAVINGS,
        },
        "relay": relay,
        "direct": direct,
    }
    if args.compare_assign:
        compared_steps = results[compared]
        out[compared.replace("-", "_")] = {
            "egress_ratio": ratio(compared_steps),
            "savings_at_10000": savings(direct, compared_steps),
            "per_micro_batch": {
                "egress_ratio": ratio(compared_steps, per_batch),
                "savings_at_10000": savings(direct, compared_steps, per_batch),
            },
            "steps": compared_steps,
        }
    return out


METHOD = (
    "One real Spark publisher (fanout publisher, local[2], micro-batch every {trigger:g} s) for"
    " every step. Relay case: {relays} real relays (RelayServer, fanout relay's defaults) in"
    " processes of their own; N subscriptions (Subscribe at {rate:g} pushes/s) over"
    " WebSocket connections of {per_connection} subscriptions each, from one client process,"
    " subscribers on relays by {assign}. Direct case: the same N boxes acquired at the"
    " publisher over relay-role connections (Hello role=relay, one Acquire per box), the k-th"
    " subscriber of each point of interest on connection k, so no connection holds two boxes"
    " that meet and every box's rows are sent in full; this leaves out the per-connection cost of"
    " N connections, which favours the direct case. Egress: bytes_acked of every TCP connection"
    " of the publisher's control-plane port (ss -ti), delta over the window. Publisher CPU:"
    " utime+stime of the publisher process and its descendants (Spark's JVM) from /proc."
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=lambda text: [int(v) for v in text.split(",")],
        default=list(DEFAULT_STEPS),
        help="subscriber counts, comma-separated (default: 100,1000,10000)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=30.0,
        help=f"seconds per window, rounded to whole micro-batches ({TRIGGER:g} s each)",
    )
    parser.add_argument("--settle", type=float, default=4.0, help="seconds before a window")
    parser.add_argument("--rate", type=float, default=PUSH_RATE, help="pushes/s per subscription")
    parser.add_argument("--per-connection", type=int, default=PER_CONNECTION)
    parser.add_argument("--agents", type=int, default=AGENTS)
    assignments = ("spread", "point", "area", "key")
    parser.add_argument(
        "--compare-assign",
        nargs="?",
        const="point",
        choices=assignments,
        help="also run the relay case with this assignment (default: point)",
    )
    parser.add_argument(
        "--assign",
        choices=assignments,
        default="spread",
        help=(
            "how the relay case puts subscribers on relays: round robin (a load balancer), each"
            " point's on one relay (p mod relays), fanout's routing by area, or fanout's routing"
            " by key, the key being the point of interest (default: spread)"
        ),
    )
    parser.add_argument(
        "--area",
        type=float,
        default=DEFAULT_SIDE,
        help=f"routing grid side for --assign area (default: {DEFAULT_SIDE:g})",
    )
    parser.add_argument(
        "--widen",
        choices=list(WIDENINGS),
        help="the relays' widening policy (default: fanout relay's, fit in a map of"
        " responsibility, tiles with --no-registry)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        help=f"the relays' widening margin (default: fanout relay's, {IN_A_MAP.margin} with fit"
        f" in a map, {Policy().margin} otherwise)",
    )
    parser.add_argument(
        "--overshoot",
        type=float,
        help="with --widen enclose: the relays' overshoot (default: 0, as fanout relay)",
    )
    parser.add_argument(
        "--registry",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the relays share a map of responsibility in a Redis Cluster started for the run"
        " (grid side --area) and redirect subscriptions to the responsible relay, the client"
        " following the redirects (default); --no-registry: relays alone",
    )
    parser.add_argument(
        "--registry-policy",
        choices=("redirect", "forward"),
        default="redirect",
        help="in a map: redirect subscriptions to the responsible relay (default), or"
        " forward: serve them where they entered, the parts other relays are responsible for"
        " acquired from those relays",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the results here (default: bench/results/sharing.json for the default"
        " configuration and steps, sharing-forward.json for the same with --registry-policy"
        " forward, sharing-alone.json with --no-registry; other configurations: none)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="logs and state go here")
    args = parser.parse_args()
    if shutil.which("ss") is None:
        sys.exit("bench/sharing.py needs ss (iproute2) to read the publisher's socket counters")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fanout-bench-sharing-"))
    workdir.mkdir(parents=True, exist_ok=True)
    before, calibration = describe(), calibrate()
    with contextlib.ExitStack() as redis:
        args.registry_url = None
        if args.registry:
            host, port = redis.enter_context(throwaway_redis_cluster())[0]
            args.registry_url = f"redis://{host}:{port}"
        results = asyncio.run(bench(args, workdir))
    results["method"] = METHOD.format(
        trigger=TRIGGER,
        relays=RELAYS,
        rate=args.rate,
        per_connection=args.per_connection,
        assign={
            "spread": f"subscriber i on relay i mod {RELAYS}",
            "point": "point of interest (each point's subscribers on one relay)",
            "area": f"fanout.client.rank, routing grid side {args.area:g}",
            "key": "fanout.client.rank by routing key, the subscriber's point of interest",
        }[args.assign]
        + (
            ", entering round robin and redirected by the relays' shared map of responsibility"
            f" (Redis Cluster, grid side {args.area:g})"
            if args.registry and args.registry_policy == "redirect"
            else ""
        )
        + (
            ", served where they entered, each relay acquiring the parts another is responsible"
            " for from that relay (forward policy of the shared map of responsibility, Redis"
            f" Cluster, grid side {args.area:g})"
            if args.registry and args.registry_policy == "forward"
            else ""
        ),
    )
    planning = effective_policy(args)
    results["setup"] = {
        "steps": args.steps,
        "agents": args.agents,
        "world": WORLD,
        "tick_rate": TICK_RATE,
        "period": PERIOD,
        "trigger_s": TRIGGER,
        "master": MASTER,
        "points_of_interest": POINTS,
        "view_side": [VIEW_SIDE / 2, VIEW_SIDE],
        "relays": RELAYS,
        # What the relays planned with, and which of it the flags gave.
        "widen": planning.widen,
        "margin": planning.margin,
        "overshoot": planning.overshoot,
        "policy_flags": {
            name: getattr(args, name)
            for name in ("widen", "margin", "overshoot")
            if getattr(args, name) is not None
        },
        "assign": args.assign,
        "registry": args.registry,
        "registry_policy": args.registry_policy,
        "compare_assign": args.compare_assign,
        "area": args.area,
        "push_rate": args.rate,
        "subscriptions_per_connection": args.per_connection,
        "settle_s": args.settle,
        "duration_s": args.duration,
        "logs": str(workdir),
    }
    results["machine"] = before | {"load_average_1m_at_end": round(os.getloadavg()[0], 2)}
    results["calibration"] = calibration
    default = relay_policy(args) is None and args.assign == "spread"
    named = {"redirect": "sharing.json", "forward": "sharing-forward.json"}
    path: Path | None = RESULTS.with_name(
        named[args.registry_policy] if args.registry else "sharing-alone.json"
    )
    if args.out is not None:
        path = args.out
    elif args.steps != list(DEFAULT_STEPS) or not default:
        path = None
    write_results(results, path)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "clients":
        spec = json.loads(Path(sys.argv[2]).read_text())
        recorded = asyncio.run(run_clients(spec))
        Path(sys.argv[3]).write_text(json.dumps(recorded))
    else:
        main()
