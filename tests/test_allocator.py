"""glibc's allocator settings (``fanout.allocator``): the mmap threshold fixed takes effect (a
large block freed no longer raises it: the next one is mapped apart too), a trim is timed,
values glibc refuses are refused, and a relay applies both from its configuration."""

from __future__ import annotations

import asyncio
import ctypes
import subprocess
import sys
from pathlib import Path

import pytest
from tests.relay.shell.deployments import running

from fanout import allocator
from fanout.errors import ConfigError
from fanout.relay.config import Process
from fanout.testing.wait import eventually

pytestmark = pytest.mark.skipif(allocator.glibc() is None, reason="glibc's allocator only")


FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks")
FIELDS += ("fordblks", "keepcost")


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (``malloc.h``): ``hblks`` counts blocks mapped apart."""

    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]


def mapped_apart(size: int) -> bool:
    """Whether glibc maps a block of ``size`` bytes apart from its heap (now)."""
    libc = allocator.glibc()
    assert libc is not None
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    try:
        return bool(libc.mallinfo2().hblks > before)
    finally:
        libc.free(block)


#: Run in a fresh process (glibc's threshold still dynamic: this one's relays fixed it):
#: whether an 8 MiB block is mapped apart, then one a little smaller after it was freed.
AFTER_A_LARGE_BLOCK = """
import sys
from pathlib import Path
from fanout import allocator
from tests.test_allocator import mapped_apart
allocator.tune(int(sys.argv[1]))
print(mapped_apart(8 << 20), mapped_apart((8 << 20) - 65536))
"""


def after_a_large_block(mmap_threshold: int) -> str:
    command = [sys.executable, "-c", AFTER_A_LARGE_BLOCK, str(mmap_threshold)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def test_a_fixed_mmap_threshold_stays_where_it_was_put() -> None:
    # glibc's dynamic threshold rises to the size of a mapped block freed: the next one a
    # little smaller comes from the heap, and stays there once freed (docs/benchmarks/memory.md)
    assert after_a_large_block(0) == "True False"
    assert after_a_large_block(131_072) == "True True"
    assert not allocator.tune(0)  # glibc's dynamic one: nothing set


def test_a_threshold_past_glibcs_documented_maximum_is_refused() -> None:
    with pytest.raises(ConfigError, match="mmap_threshold must be 0"):
        Process(mmap_threshold=allocator.MAX_MMAP_THRESHOLD + 1)
    with pytest.raises(ConfigError, match="trim_every must be >= 0"):
        Process(trim_every=-1.0)


def test_a_trim_is_timed() -> None:
    count = allocator.trim_seconds.count
    allocator.trim()
    assert allocator.trim_seconds.count == count + 1


async def test_a_relay_fixes_the_threshold_and_trims_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tuned: list[int] = []
    monkeypatch.setattr(allocator, "tune", tuned.append)
    count = allocator.trim_seconds.count
    async with running(process=Process(mmap_threshold=40 * 1024, trim_every=0.05)):
        await eventually(lambda: allocator.trim_seconds.count >= count + 2)
    assert tuned == [40 * 1024]
    count = allocator.trim_seconds.count
    async with running(process=Process(trim_every=0.0)):
        await asyncio.sleep(0.2)
    assert tuned == [40 * 1024, Process().mmap_threshold]
    assert allocator.trim_seconds.count == count  # never trimmed


def test_the_relays_flags_and_file_reach_its_process_settings(tmp_path: Path) -> None:
    from fanout.cli.main import _parser
    from fanout.cli.relay import _allocator_given
    from fanout.cli.settings import resolve

    toml = tmp_path / "fanout.toml"
    toml.write_text("[relay]\ntrim_every = 2.5\n")
    args = _parser().parse_args(["relay", "--config", str(toml), "--mmap-threshold", "65536"])
    args = resolve(args.parser, args, "relay", args.config, {})
    assert Process(**_allocator_given(args)) == Process(mmap_threshold=65_536, trim_every=2.5)
    args = _parser().parse_args(["relay"])
    assert _allocator_given(resolve(args.parser, args, "relay", None, {})) == {}


def test_the_publishers_flag_and_file_reach_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import fanout.publisher.app
    from fanout.cli.main import _parser
    from fanout.cli.publisher import run_publisher
    from fanout.publisher.config import PublisherSettings, parse_config

    seen: list[PublisherSettings] = []
    monkeypatch.setattr(fanout.publisher.app, "run", lambda settings: seen.append(settings) or 0)
    assert run_publisher(_parser().parse_args(["publisher", "--trim-every", "3"])) == 0
    assert run_publisher(_parser().parse_args(["publisher"])) == 0
    assert [settings.trim_every for settings in seen] == [3.0, 10.0]
    assert parse_config("[publisher]\ntrim_every = 0\n").trim_every == 0.0
    with pytest.raises(ConfigError, match=r"publisher\.trim_every"):
        parse_config("[publisher]\ntrim_every = -1\n")
