"""Where a relay's time goes: a py-spy profile (``bench/relay.py --spy FILE.txt``) sorted into the
stages of a push's path, and its top frames.

Run ``.venv/bin/python bench/spystages.py bench/results/spy-relay-1000.txt --us-per-push 68``:
each sample (a stack of the relay process, its event loop or its writer thread) goes to the
first stage whose frame it holds (``STAGES``, in order); with ``--us-per-push`` (the run's
``relay_cpu_us_per_push``) each stage's share is also given in microseconds a push. Prints the
stages, the frames with the most samples of their own, and one JSON object last.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

#: (stage, a frame's text that puts a sample there): the first that matches wins.
STAGES = [
    ("writer thread: a batch written into the inert buffer", "Thread._bootstrap"),
    ("socket writes (transport.write: the kernel's send)", "Transport.write"),
    ("socket writes (transport.write: the kernel's send)", "UVStream.write"),
    ("shell: dispatch, framing, Outbound", "_dispatch"),
    ("core: schedule, cut, encode (Serving.serve)", "Serving.serve"),
    ("core: swap in, end the epoch", "_swap_in"),
    ("pump: the round's own work (clocks, checks, waiting)", "Pump.r"),  # run, round
    ("reads: subscribers' frames and the upstream's batches", "data_received"),
    ("reads: subscribers' frames and the upstream's batches", "Handoff._lifecycle"),
    ("reads: subscribers' frames and the upstream's batches", "_read_ready"),
    ("upstream link", "UpstreamLink"),
    ("housekeeping", "housekeeping"),
    ("event loop: polling, callbacks", "run_forever"),
    ("event loop: polling, callbacks", "Runner.run"),
]
#: Paths cut from frame names, for reading.
PREFIXES = re.compile(r" \((?:/[^)]*?/site-packages/|/[^)]*?/src/|/usr/lib/python3\.\d+/)")


def read(path: Path) -> list[tuple[list[str], int]]:
    """The samples of a py-spy ``raw`` (collapsed) file: each stack (outermost frame first)
    and its count."""
    samples = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples.append(([PREFIXES.sub(" (", f) for f in stack.split(";")], int(count)))
    return samples


def stages(samples: list[tuple[list[str], int]]) -> dict[str, float]:
    """Each stage's share of the samples."""
    counts: collections.Counter[str] = collections.Counter()
    for stack, count in samples:
        joined = ";".join(stack)
        stage = next((name for name, key in STAGES if key in joined), "other")
        counts[stage] += count
    total = sum(counts.values())
    return {name: count / total for name, count in counts.most_common()}


def top(samples: list[tuple[list[str], int]], count: int) -> dict[str, float]:
    """The frames with the most samples of their own (innermost), with their shares."""
    own: collections.Counter[str] = collections.Counter()
    for stack, n in samples:
        own[stack[-1]] += n
    total = sum(own.values())
    return {frame: n / total for frame, n in own.most_common(count)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy raw output (bench/relay.py --spy)")
    parser.add_argument("--us-per-push", type=float, help="the run's relay CPU per push")
    parser.add_argument("--top", type=int, default=20, help="frames listed (default: 20)")
    args = parser.parse_args()
    samples = read(args.profile)
    shares = stages(samples)
    for name, share in shares.items():
        us = f"  {share * args.us_per_push:5.1f} us/push" if args.us_per_push else ""
        print(f"{share:6.1%}{us}  {name}")
    frames = top(samples, args.top)
    print("frames with the most samples of their own:")
    for frame, share in frames.items():
        print(f"{share:6.1%}  {frame}")
    result = {
        "profile": str(args.profile),
        "samples": sum(n for _, n in samples),
        "stages": {name: round(share, 4) for name, share in shares.items()},
        "top_frames": {frame: round(share, 4) for frame, share in frames.items()},
    }
    if args.us_per_push:
        result["us_per_push"] = {k: round(v * args.us_per_push, 1) for k, v in shares.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
