"""Objects as files (issue 24): a real Spark publisher with an objects dataset, a real relay, the
library, and a real fuse3 mount driven by real ls, cat, echo and rm — started once for the module.

Needs /dev/fuse and fusermount3 (Debian's fuse3) and root, as CI has; skipped where they are not.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.client import LiveView, connect
from fanout.client.objects import Objects
from fanout.client.publisher import open_producer, open_reader
from fanout.client.subscriber import SubscriptionError, Update
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing.ports import free_port
from fanout.testing.wait import eventually
from fanout.views.objects import ObjectPath
from fanout.views.objects.reading import full_text

pytestmark = [
    pytest.mark.integration,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.needs("fusermount3"),
    pytest.mark.skipif(
        not (os.path.exists("/dev/fuse") and os.geteuid() == 0), reason="needs /dev/fuse and root"
    ),
]

CONFIG = """
[datasets.pps]
index = "objects"
source = "ingest"
"""

#: A write shows at the relay after the publisher's next micro-batch (seconds on a loaded box).
SHOWS = {"timeout": 90.0, "every": 0.3}


@dataclass
class Deployment:
    """The module's processes: publisher, relay, mount, and where they keep things."""

    children: Children
    root: Path
    publisher: Child
    relay: Child
    relay_port: int
    mount: asyncio.subprocess.Process
    mountpoint: Path

    @property
    def log(self) -> Path:
        return self.root / "mount.log"


async def start_publisher(children: Children, root: Path, port: int) -> Child:
    return await children.start(
        "publisher",
        [
            "--config",
            str(root / "fanout.toml"),
            "--port",
            str(port),
            "--state-dir",
            str(root / "state"),
            "--log-level",
            "info",
        ],
        root / "publisher.log",
    )


async def start_relay(children: Children, root: Path, publisher: str, port: int) -> Child:
    return await children.start(
        "relay",
        ["--publisher", publisher, "--port", str(port), "--log-level", "info"],
        root / "relay.log",
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(
    children: Children, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Deployment]:
    root = tmp_path_factory.mktemp("objects")
    (root / "fanout.toml").write_text(CONFIG)
    mountpoint = root / "mnt"
    mountpoint.mkdir()
    publisher = await start_publisher(children, root, free_port())
    relay_port = free_port()
    relay = await start_relay(children, root, publisher.url, relay_port)
    with (root / "mount.log").open("ab") as log:
        mount = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fanout", "mount", "--relay", relay.url, "--log-level", "info",
            "pps", str(mountpoint), stderr=log,
        )  # fmt: skip
    deployment = Deployment(children, root, publisher, relay, relay_port, mount, mountpoint)
    try:
        await eventually(lambda: mounted(mountpoint), timeout=30, what="the mount")
        # the first lookup waits for the relay's first push, after Spark's first micro-batch
        await eventually(lambda: shell(f"ls {mountpoint}"), lambda r: r[0] == 0, timeout=180)
        yield deployment
    finally:
        if mount.returncode is None:
            mount.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(mount.wait(), 20)
        if mounted(mountpoint):
            await shell(f"fusermount3 -u -z {mountpoint}")
        if mount.returncode is None:
            mount.kill()
        await deployment.relay.stop()
        await deployment.publisher.stop()


async def shell(command: str, timeout: float = 60.0) -> tuple[int, str, str]:
    """Run ``command`` with bash; (status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def write_once(path: Path, text: str) -> int:
    """Append ``text`` to ``path`` in one write(2); its errno, 0 if it succeeded."""
    handle = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(handle, text.encode())
    except OSError as error:
        return error.errno or -1
    finally:
        os.close(handle)
    return 0


def mounted(path: Path) -> bool:
    return os.path.ismount(path)


async def cat(path: Path) -> str:
    status, out, err = await shell(f"cat '{path}'")
    return out if status == 0 else f"status {status}: {err}"


async def test_ls_cat_echo_rm_and_mkdir_on_the_mount(deployment: Deployment) -> None:
    mnt = deployment.mountpoint
    assert (await shell(f"mkdir {mnt}/cars"))[0] == 0
    status, _, err = await shell(
        f"echo 'speed:n:42' >> {mnt}/cars/c1 && echo 'state::on' >> {mnt}/cars/c1"
    )
    assert status == 0, err
    await eventually(
        lambda: cat(mnt / "cars/c1"), lambda text: text == "@c1\nspeed:n:42\nstate::on\n", **SHOWS
    )
    assert (await shell(f"ls {mnt}/cars"))[1] == "c1\n"
    assert (await shell(f"ls {mnt}"))[1] == "cars\n"
    await shell(f"echo 'x::1' >> {mnt}/cars/c2")
    await eventually(
        lambda: cat(mnt / "cars/.all"),
        lambda text: text == "@c1\nspeed:n:42\nstate::on\n@c2\nx::1\n",
        **SHOWS,
    )
    assert (await shell(f"rm {mnt}/cars/c2"))[0] == 0
    await eventually(lambda: shell(f"ls {mnt}/cars"), lambda result: result[1] == "c1\n", **SHOWS)
    await eventually(lambda: cat(mnt / "cars/.all"), lambda t: "c2" not in t, **SHOWS)


async def test_a_bad_write_is_einval_with_a_logged_reason_and_nothing_half_applied(
    deployment: Deployment,
) -> None:
    mnt = deployment.mountpoint
    await shell(f"echo 'good:n:1' >> {mnt}/bad")
    await eventually(lambda: cat(mnt / "bad"), lambda text: text == "@bad\ngood:n:1\n", **SHOWS)
    for text, reason in [
        ("good:n:2\n[q=12]other::x\n", "quality '12' must be an integer from 0 to 9"),
        ("good:n:3\nno colon here\n", "expected name:encoding:value"),
        ("[zz]good:n:4\n", "unknown option 'zz'"),
    ]:
        # one write(2) is one request: a shell's printf may split lines into several writes
        assert await asyncio.to_thread(write_once, mnt / "bad", text) == errno.EINVAL, text
        assert reason in deployment.log.read_text(), reason
    status, _, err = await shell(f"echo 'good:n:five' >> {mnt}/bad")
    assert status != 0 and "Invalid argument" in err, err
    assert "'five' is not a finite number" in deployment.log.read_text()
    status, _, err = await shell(f"echo 'x::1' >> '{mnt}/bad?bogus'")
    assert status != 0 and "Invalid argument" in err
    status, _, err = await shell(f"echo 'x::1' >> {mnt}/.hidden")  # not an object's name
    assert status != 0 and "Invalid argument" in err
    assert "special object '.hidden'" in deployment.log.read_text()
    # others go on, and the refused writes left nothing behind
    await shell(f"echo 'after::yes' >> {mnt}/bad")
    await eventually(
        lambda: cat(mnt / "bad"), lambda text: text == "@bad\nafter::yes\ngood:n:1\n", **SHOWS
    )


async def test_cat_right_after_echo_reads_the_write(deployment: Deployment) -> None:
    """Read your writes (issue 40, item 3): the relay shows a write it forwarded at once, so a
    ``cat`` just after ``echo >>`` returns has it, a Spark micro-batch (about a second) before
    the publisher's batch carries it; an attribute of lower quality is dropped at once too."""
    mnt = deployment.mountpoint
    await shell(f"echo 'v:n:0' >> {mnt}/mine")
    await eventually(lambda: cat(mnt / "mine"), lambda text: "v:n:0" in text, **SHOWS)
    for value in range(1, 4):
        status, out, err = await shell(f"echo 'v:n:{value}' >> {mnt}/mine && cat {mnt}/mine")
        assert (status, out) == (0, f"@mine\nv:n:{value}\n"), err
    status, out, err = await shell(
        f"echo '[q=5]v:n:50' >> {mnt}/mine && echo 'v:n:51' >> {mnt}/mine && cat {mnt}/mine"
    )
    assert (status, out) == (0, "@mine\nv:n:50\n"), err


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def other_relay(deployment: Deployment) -> Child:
    """A second relay on the module's publisher (no mount)."""
    return await deployment.children.start(
        "relay",
        ["--publisher", deployment.publisher.url, "--port", "0", "--log-level", "info"],
        deployment.root / "other-relay.log",
    )


def value_of(view: LiveView, cell: str) -> str | None:
    row = view.rows.get(cell)
    return None if row is None else str(row["value"])


def carries(update: Update, cell: str, value: str | None) -> bool:
    """Whether ``update`` sends ``cell`` with ``value`` (None: it leaves)."""
    if value is None:
        return cell in update.left.tolist()
    for rows in (update.entered, update.updated):
        if rows and (cell, value) in zip(
            rows["cell"].tolist(), rows["value"].tolist(), strict=True
        ):
            return True
    return False


async def test_an_echo_through_one_relay_reaches_a_latest_view_on_another_at_once(
    deployment: Deployment, other_relay: Child
) -> None:
    """Issue 40: ``echo >>`` on the mount (relay A) reaches a ``latest`` view on relay B before
    Spark's micro-batch (B's ``confirmed`` view lacks it), provisional: the publisher passed the
    request on once durable and B admitted it over its cells; the batch confirms it, nothing is
    sent twice or corrected. Deleting the object leaves B's view at once too."""
    mnt, cell = deployment.mountpoint, "/across?v"
    async with connect(other_relay.url) as subscriber:
        live = await subscriber.subscribe(ObjectPath("/across"), "pps", rate=100.0)
        confirmed = await subscriber.subscribe(
            ObjectPath("/across"), "pps", rate=100.0, confirmed=True
        )
        await shell(f"echo 'v:n:0' >> {mnt}/across")
        for view in (live, confirmed):  # B holds the object upstream, wants its live writes
            await eventually(lambda v=view: value_of(v, cell), lambda got: got == "0", **SHOWS)
        before = await asyncio.to_thread(scrape, other_relay.url)
        async with asyncio.timeout(90):  # a loaded machine's micro-batch
            for value in ("1", None):
                updates = aiter(live)
                if value is None:
                    assert (await shell(f"rm {mnt}/across"))[0] == 0
                else:
                    assert (await shell(f"echo 'v:n:{value}' >> {mnt}/across"))[0] == 0
                while not carries(shown := await anext(updates), cell, value):
                    pass
                assert shown.provisional
                assert value_of(live, cell) == value
                assert value_of(confirmed, cell) != value  # no micro-batch carried it yet
                await eventually(lambda v=value: value_of(confirmed, cell) == v, **SHOWS)
                later: list[Update] = []
                while live.tick < confirmed.tick:  # its push of the state that confirmed it
                    later.append(await anext(updates))
                assert not any(carries(update, cell, value) for update in later)
    counts = await asyncio.to_thread(scrape, other_relay.url)

    def grew(name: str) -> float:
        return counts[name] - before.get(name, 0)

    assert grew("fanout_relay_live_passed_total") == 2
    assert grew("fanout_relay_live_confirmed_total") == 2
    assert grew("fanout_relay_live_corrected_total") == 0
    assert counts["fanout_relay_live_pending"] == 0


async def test_cat_delta_wait_prints_each_change_like_tail_f(deployment: Deployment) -> None:
    mnt = deployment.mountpoint
    await shell(f"echo 'speed:n:1' >> {mnt}/watched")
    await eventually(lambda: cat(mnt / "watched"), lambda t: "speed:n:1" in t, **SHOWS)
    watcher = await asyncio.create_subprocess_exec(
        "cat", f"{mnt}/watched?delta,wait", stdout=asyncio.subprocess.PIPE
    )
    assert watcher.stdout is not None
    try:
        first = await asyncio.wait_for(watcher.stdout.readuntil(b"speed:n:1\n"), 60)
        # cat read the write at once (read your writes); the delta reader starts from the
        # confirmed state, which holds the object already or gains it with the micro-batch.
        assert first == b"@watched\nspeed:n:1\n" or (
            first.startswith(b"+@watched\n") and first.endswith(b"\nspeed:n:1\n")
        ), first
        await shell(f"echo 'speed:n:2' >> {mnt}/watched")
        assert await asyncio.wait_for(watcher.stdout.readuntil(b"speed:n:2\n"), 90) == (
            b"@watched\nspeed:n:2\n"
        )
        await shell(f"echo '-speed' >> {mnt}/watched")
        assert await asyncio.wait_for(watcher.stdout.readuntil(b"-speed\n"), 90) == (
            b"@watched\n-speed\n"
        )
    finally:
        assert await interrupted(watcher) != 0  # Ctrl-C: the blocked read is interrupted


async def interrupted(reader: asyncio.subprocess.Process) -> int:
    """Send a blocked reader Ctrl-C (SIGINT) and return its exit status; one still there 20 s
    later fails the test with its state (signals pending, blocked, ignored; where it waits)."""
    reader.send_signal(signal.SIGINT)
    try:
        return await asyncio.wait_for(reader.wait(), 20)
    except TimeoutError:
        proc = Path(f"/proc/{reader.pid}")
        fields = ("State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
        status = [s for s in (proc / "status").read_text().splitlines() if s.startswith(fields)]
        wchan = (proc / "wchan").read_text()
        reader.kill()
        raise AssertionError(
            f"a reader sent SIGINT still runs: {status}, waits in {wchan}"
        ) from None


async def test_two_producers_merge_quality_orders_and_two_delta_readers_each_see_changes(
    deployment: Deployment,
) -> None:
    mnt = deployment.mountpoint
    async with (
        connect(deployment.relay.url) as subscriber,
        open_producer(deployment.publisher.url) as one,
        open_producer(deployment.publisher.url) as two,
    ):
        first = Objects(subscriber, one, "pps")
        second = Objects(None, two, "pps")
        await first.write("/fleet/t1", "speed:n:10\n[q=5]owner::ann\n")
        await second.write("/fleet/t1", "fuel:n:80\n")
        early = await first.open("/fleet/t1?delta")
        await eventually(early.read, lambda text: "fuel:n:80" in text, **SHOWS)
        late = await first.open("/fleet/t1?delta")
        await late.started()
        await second.write("/fleet/t1", "[q=2]owner::bob\n")  # lower quality: dropped
        await first.write("/fleet/t1", "speed:n:11\n")
        await eventually(
            lambda: cat(mnt / "fleet/t1"),
            lambda text: text == "@t1\nfuel:n:80\nowner::ann\nspeed:n:11\n",
            **SHOWS,
        )
        # Delta readers follow in mode every: their seq may come a little after the mount's.
        assert await early.read(wait=True) == "@t1\nspeed:n:11\n"
        await eventually(  # the late reader's own copy (a full read of it consumes nothing)
            lambda: full_text(late.store, "/fleet/t1"), lambda t: "speed:n:11" in t, **SHOWS
        )
        assert await late.read() == "@t1\nfuel:n:80\nowner::ann\nspeed:n:11\n"
        await second.write("/fleet/t1", "[q=5]owner::cy\n-fuel\n")  # equal quality replaces
        assert await early.read(wait=True) in ("@t1\n-fuel\nowner::cy\n",)
        assert await late.read(wait=True) == "@t1\n-fuel\nowner::cy\n"
        assert await early.read() == ""  # non-blocking, nothing new
        # f= filters and the directory proxy keep working on the objects kind
        await first.write("/fleet/t2", "speed:n:99\n")
        fast = await first.open("/fleet/.all?f=speed>50")
        await eventually(fast.read, lambda text: text == "@t2\nspeed:n:99\n", **SHOWS)
        notices = await first.open("/fleet/.all?delta")
        seen: list[str] = []

        async def read_more() -> str:  # the two changes may come in two reads
            seen.append(await notices.read())
            return "".join(seen)

        # fast was shown t2 at once (the publisher passed the producer's write): the delta
        # reader (mode every) may start from a state without it and get it as +@t2 later
        await eventually(read_more, lambda text: "@t1" in text and "@t2" in text, **SHOWS)
        seen.clear()
        await first.delete("/fleet/t2")
        await first.write("/fleet/t3", "a::1\n")

        text = await eventually(read_more, lambda text: "+@t3" in text and "-@t2" in text, **SHOWS)
        assert "-@t2\n" in text and "+@t3\n@t3\na::1\n" in text
        with pytest.raises(SubscriptionError, match="not a finite number"):
            await second.producer.publish(  # type: ignore[union-attr]
                "pps",
                [{"cell": "/fleet/t1?x", "object": "/fleet/t1", "attr": "x", "value": "no",
                  "encoding": "n", "quality": 0, "persist": True}],
            )  # fmt: skip


#: Well-formed writes the fuzzer mutates.
VALID_WRITES = [
    b"speed:n:42\n",
    b"[q=3]state::on\n",
    b"[n]temp:n:-1.5e3\n",
    b"-speed\n",
    b"note::a value: with colons\n",
    b"a::1\nb:n:2\n-c\n",
]
#: What a write or a name may be answered besides success: a refusal naming the caller's
#: mistake (never EIO: the relay is up; an unexpected failure would be EIO or a traceback).
REFUSED = {errno.EINVAL, errno.ENOENT, errno.EISDIR, errno.ENAMETOOLONG, errno.ENOTDIR}


def fuzzed_write(rng: random.Random) -> bytes:
    roll = rng.random()
    data = bytearray(rng.choice(VALID_WRITES))
    if roll < 0.4:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif roll < 0.6:
        data[rng.randrange(len(data)) :] = b""
    elif roll < 0.8:
        data = bytearray(rng.randbytes(rng.randrange(1, 120)))
    elif roll < 0.85:
        data = bytearray(b"big::" + b"x" * rng.randrange(100_000, 400_000) + b"\n")
    return bytes(data)


def write_bytes(path: Path, data: bytes) -> int:
    """Append ``data`` to ``path`` (creating it) in one write(2); its errno, 0 if it worked."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError as error:
        return error.errno or -1
    try:
        os.write(handle, data)
    except OSError as error:
        return error.errno or -1
    finally:
        os.close(handle)
    return 0


async def test_fuzzed_writes_and_names_are_refused_or_applied_and_the_mount_goes_on(
    deployment: Deployment,
) -> None:
    # The mount's entry point under fuzzing (issue 31): mutated and random writes, huge ones,
    # and odd names, each one write(2) through the real mount.
    mnt = deployment.mountpoint
    await shell(f"mkdir -p {mnt}/fz")
    logs = [deployment.log, deployment.root / "relay.log", deployment.root / "publisher.log"]
    rng = random.Random(31)
    names = ["o1", "o2", "o?x", ".all", "..", "a" * 300, "é\u00e9", "o1?delta", "fz", "x\ty"]
    answers: dict[int, int] = {}
    for _ in range(120):
        name = rng.choice(names)
        result = await asyncio.to_thread(write_bytes, mnt / "fz" / name, fuzzed_write(rng))
        answers[result] = answers.get(result, 0) + 1
    assert set(answers) - {0} <= REFUSED, answers
    assert answers.get(0) and answers.get(errno.EINVAL), answers  # some applied, some refused
    assert mounted(mnt)
    await shell(f"echo 'after::fuzz' >> {mnt}/fz/good")
    await eventually(lambda: cat(mnt / "fz/good"), lambda t: t == "@good\nafter::fuzz\n", **SHOWS)
    for log in logs:
        assert "Traceback" not in log.read_text(errors="replace"), log


async def test_reads_fail_with_eio_while_the_relay_is_away(deployment: Deployment) -> None:
    mnt = deployment.mountpoint
    await shell(f"echo 'v::1' >> {mnt}/away")
    await eventually(lambda: cat(mnt / "away"), lambda t: "v::1" in t, **SHOWS)
    await deployment.relay.stop()
    await eventually(
        lambda: shell(f"cat {mnt}/away"),
        lambda result: result[0] != 0 and "Input/output error" in result[2],
        timeout=60,
    )
    status, _, err = await shell(f"echo 'v::2' >> {mnt}/away")  # written through the relay
    assert status != 0 and "Input/output error" in err, err
    deployment.relay = await start_relay(
        deployment.children, deployment.root, deployment.publisher.url, deployment.relay_port
    )
    await eventually(lambda: shell(f"echo 'v::3' >> {mnt}/away"), lambda r: r[0] == 0, **SHOWS)
    await eventually(lambda: cat(mnt / "away"), lambda t: t == "@away\nv::3\n", **SHOWS)


async def test_after_a_publisher_restart_persistent_objects_are_back_and_n_ones_gone(
    deployment: Deployment,
) -> None:
    mnt = deployment.mountpoint
    await shell(
        f"mkdir -p {mnt}/keep && echo 'a::1' >> {mnt}/keep/o && echo '[n]b::2' >> {mnt}/keep/o"
    )
    await shell(f"echo 'c::3' >> '{mnt}/keep/gone?nopersist'")
    await eventually(lambda: cat(mnt / "keep/.all"), lambda t: "c::3" in t and "b::2" in t, **SHOWS)
    port = int(deployment.publisher.url.rsplit(":", 1)[1])
    assert await deployment.publisher.stop() == 0
    deployment.publisher = await start_publisher(deployment.children, deployment.root, port)
    # The writes above were shown at once; the micro-batch that had taken some of them when
    # the publisher stopped runs again first, with its own offsets, so the state may be read
    # between it and the next one (the rest of the writes and the restart's deletes, together).
    async with open_reader(deployment.publisher.url) as reader:
        await eventually(
            lambda: reader.read("pps", ObjectPath("/keep/.all")),
            lambda result: sorted(result[1]["cell"].tolist()) == ["/keep/o?", "/keep/o?a"],
            **SHOWS,
        )
    await eventually(lambda: cat(mnt / "keep/.all"), lambda t: t == "@o\na::1\n", **SHOWS)
    # the relay forwards the mount's writes to the restarted publisher
    await eventually(lambda: shell(f"echo 'd::4' >> {mnt}/keep/o"), lambda r: r[0] == 0, **SHOWS)
    await eventually(lambda: cat(mnt / "keep/o"), lambda t: t == "@o\na::1\nd::4\n", **SHOWS)


async def test_sigterm_unmounts_cleanly(deployment: Deployment) -> None:
    deployment.mount.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(deployment.mount.wait(), 30) == 0
    assert not mounted(deployment.mountpoint)
    assert "Traceback" not in deployment.log.read_text()
