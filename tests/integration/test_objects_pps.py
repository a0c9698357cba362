"""The PPS details of objects as files (issue 44, part 5), on a real Spark publisher, relay and
fuse3 mount (``test_objects``'s deployment): delta readers get every change of an attribute in
order, a full backlog says ``|@name``, ``select`` and ``poll`` on two mounted objects wake for the
one that changed, ``critical``, ``deltadir``, and the refused options.

Needs /dev/fuse and fusermount3 (Debian's fuse3) and root, as CI has; skipped where they are not.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import textwrap

import pytest
from tests.integration.test_objects import (  # noqa: F401 (the module's deployment fixture)
    SHOWS,
    Deployment,
    cat,
    deployment,
    interrupted,
    shell,
)

from fanout.client import connect
from fanout.client.objects import Objects
from fanout.client.publisher import open_producer
from fanout.errors import InvalidView
from fanout.testing.wait import eventually
from fanout.views.objects.reading import full_text

pytestmark = [
    pytest.mark.integration,
    pytest.mark.second_lane,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(
        not (os.path.exists("/dev/fuse") and os.geteuid() == 0),
        reason="needs /dev/fuse and root",
    ),
]


async def test_a_delta_reader_gets_every_change_of_an_attribute_in_order(
    deployment: Deployment,  # noqa: F811 (the imported fixture)
) -> None:
    async with (
        connect(deployment.relay.url) as relay,
        open_producer(deployment.publisher.url) as producer,
    ):
        objects = Objects(relay, producer, "pps")
        await objects.write("/seq/x", "n:n:0\n")
        latest = await objects.open("/seq/x?wait")
        await eventually(latest.read, lambda text: "n:n:0" in text, **SHOWS)
        reader = await objects.open("/seq/x?delta")
        small = await objects.open("/seq/x?delta,backlog=1")  # 1 KB queued at most
        assert await reader.read() == "@x\nn:n:0\n"
        assert await small.read() == "@x\nn:n:0\n"
        values = [str(n) for n in range(1, 7)]
        for value in values:  # each in a later micro-batch than the one before: its own seq
            await objects.write("/seq/x", f"n:n:{value}\nbig::{'x' * 300}{value}\n")
            await eventually(  # the delta reader's copy: the batches' (latest shows it at once)
                lambda: full_text(reader.store, "/seq/x"),
                lambda text, v=value: f"n:n:{v}\n" in text,
                **SHOWS,
            )
        # each open is its own subscription, pushed at its own pace: wait until the delta
        # readers' copies hold the last value too (a full read of a copy consumes nothing)
        for watch in (reader, small):
            await eventually(
                lambda w=watch: full_text(w.store, "/seq/x"),
                lambda text: "n:n:6\n" in text,
                **SHOWS,
            )
        # the reader read nothing meanwhile: its next read has every change, in order
        text = await reader.read()
        assert [line for line in text.splitlines() if line.startswith("n:")] == [
            f"n:n:{value}" for value in values
        ]
        assert await reader.read() == ""  # without wait, nothing new is end of file
        # past 1 KB the small reader's queue was dropped: it is told, then reads in full
        assert await small.read() == f"|@x\n@x\nbig::{'x' * 300}6\nn:n:6\n"
        assert small.status.overflows == 1
        for watch in (latest, reader, small):
            await watch.close()


SELECT_PROGRAM = textwrap.dedent(
    """
    import os, select, sys
    a, b = (os.open(sys.argv[1] + name + "?delta,wait", os.O_RDONLY) for name in ("a", "b"))
    names = {a: "a", b: "b"}
    for fd in (a, b):
        os.read(fd, 65536)  # the first read: each object in full
    ready, _, _ = select.select([a, b], [], [], 2.0)
    print("idle" if not ready else "early " + ",".join(names[fd] for fd in ready), flush=True)
    ready, _, _ = select.select([a, b], [], [], 120.0)
    print("select " + ",".join(names[fd] for fd in ready), flush=True)
    print(os.read(ready[0], 65536).decode(), end="", flush=True)
    poller = select.poll()
    for fd in (a, b):
        poller.register(fd, select.POLLIN)
    print("poll " + ",".join(names[fd] for fd, _ in poller.poll(120_000)), flush=True)
    """
)


async def test_select_and_poll_on_two_mounted_objects_wake_for_the_one_that_changed(
    deployment: Deployment,  # noqa: F811
) -> None:
    mnt = deployment.mountpoint
    assert (await shell(f"mkdir -p {mnt}/sel && echo 'v::0' >> {mnt}/sel/a"))[0] == 0
    assert (await shell(f"echo 'v::0' >> {mnt}/sel/b"))[0] == 0
    # in the confirmed state (a delta reader's first read; plain cat shows the writes at once)
    await eventually(lambda: cat(mnt / "sel/.all?delta"), lambda t: t.count("v::0") == 2, **SHOWS)
    program = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SELECT_PROGRAM, f"{mnt}/sel/", stdout=asyncio.subprocess.PIPE
    )
    assert program.stdout is not None
    try:
        line = await asyncio.wait_for(program.stdout.readline(), 60)
        assert line == b"idle\n"  # nothing changed: select waited its 2 s
        await shell(f"echo 'v::1' >> {mnt}/sel/b")
        assert await asyncio.wait_for(program.stdout.readline(), 120) == b"select b\n"
        assert await asyncio.wait_for(program.stdout.readuntil(b"v::1\n"), 10) == b"@b\nv::1\n"
        await shell(f"echo 'v::2' >> {mnt}/sel/a")
        assert await asyncio.wait_for(program.stdout.readline(), 120) == b"poll a\n"
        assert await asyncio.wait_for(program.wait(), 20) == 0
    finally:
        if program.returncode is None:
            program.kill()
            await program.wait()


async def test_closing_a_critical_writer_deletes_the_non_persistent_attributes(
    deployment: Deployment,  # noqa: F811
) -> None:
    mnt = deployment.mountpoint
    writer = os.open(f"{mnt}/crit?critical", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(writer, b"[n]temp::hot\nkeep::yes\n")
        await eventually(lambda: cat(mnt / "crit"), lambda t: "temp::hot" in t, **SHOWS)
    finally:
        os.close(writer)
    await eventually(lambda: cat(mnt / "crit"), lambda t: t == "@crit\nkeep::yes\n", **SHOWS)
    # a reader is no critical publisher; neither in the library
    assert await asyncio.to_thread(open_errno, f"{mnt}/crit?critical") == errno.EINVAL
    assert "'critical' marks a writer" in deployment.log.read_text()
    async with connect(deployment.relay.url) as relay:
        with pytest.raises(InvalidView, match="a reader takes no 'critical'"):
            await Objects(relay, None, "pps").open("/crit?critical")


async def test_deltadir_gives_the_names_created_and_deleted(
    deployment: Deployment,  # noqa: F811
) -> None:
    mnt = deployment.mountpoint
    assert (await shell(f"mkdir -p {mnt}/dd && echo 'v::0' >> {mnt}/dd/one"))[0] == 0
    await eventually(lambda: cat(mnt / "dd/one"), lambda t: "v::0" in t, **SHOWS)
    watcher = await asyncio.create_subprocess_exec(
        "cat", f"{mnt}/dd/.all?deltadir,wait", stdout=asyncio.subprocess.PIPE
    )
    assert watcher.stdout is not None
    try:
        assert await asyncio.wait_for(watcher.stdout.readline(), 60) == b"+@one\n"
        await shell(f"echo 'v::1' >> {mnt}/dd/one && echo 'v::0' >> {mnt}/dd/two")
        assert await asyncio.wait_for(watcher.stdout.readline(), 120) == b"+@two\n"
        await shell(f"rm {mnt}/dd/one")
        assert await asyncio.wait_for(watcher.stdout.readline(), 120) == b"-@one\n"
    finally:
        await interrupted(watcher)


async def test_a_notification_group_says_which_of_its_objects_has_something_to_read(
    deployment: Deployment,  # noqa: F811
) -> None:
    mnt = deployment.mountpoint
    assert (await shell(f"mkdir -p {mnt}/ng && echo 'v::0' >> {mnt}/ng/fish"))[0] == 0
    assert (await shell(f"echo 'v::0' >> {mnt}/ng/birds"))[0] == 0
    await eventually(lambda: cat(mnt / "ng/.all"), lambda t: t.count("v::0") == 2, **SHOWS)
    notify = os.open(f"{mnt}/.notify", os.O_RDONLY)
    members: list[int] = []
    try:
        group = os.read(notify, 16).decode()  # the first read: the group's id, as in PPS
        assert group.isdigit()
        for name, value in (("fish", "water"), ("birds", "air")):
            members.append(os.open(f"{mnt}/ng/{name}?delta,wait,notify={group}:{value}", 0))

        async def lines(*wanted: str) -> None:
            got: set[str] = set()
            while not set(wanted) <= got:
                text = await asyncio.wait_for(asyncio.to_thread(os.read, notify, 4096), 120)
                got |= set(text.decode().splitlines())

        await lines(f"{group}:water", f"{group}:air")  # each has its first (full) read waiting
        for member in members:
            os.read(member, 65536)
        await shell(f"echo 'v::1' >> {mnt}/ng/birds")
        await lines(f"{group}:air")
        assert os.read(members[1], 65536) == b"@birds\nv::1\n"
        os.close(members.pop())
        await lines(f"-{group}:air")  # a member closed
    finally:
        for member in members:
            os.close(member)
        os.close(notify)


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ("server", "point-to-point messages"),
        ("notify=99:water", "no notification group '99' is open on this mount"),
        ("flow", "configures the PPS server"),
    ],
)
async def test_refused_options_fail_the_open_with_a_logged_reason(
    deployment: Deployment,  # noqa: F811
    option: str,
    reason: str,
) -> None:
    mnt = deployment.mountpoint
    assert (await shell(f"echo 'x::1' >> {mnt}/refused"))[0] == 0
    assert await asyncio.to_thread(open_errno, f"{mnt}/refused?{option}") == errno.EINVAL
    writing = os.O_WRONLY | os.O_APPEND  # (notify= on a writer: refused for that too)
    assert await asyncio.to_thread(open_errno, f"{mnt}/refused?{option}", writing) == errno.EINVAL
    assert reason in deployment.log.read_text()


def open_errno(path: str, flags: int = os.O_RDONLY) -> int:
    """Open ``path`` (for reading) and close it; its errno, 0 if it opened."""
    try:
        os.close(os.open(path, flags))
    except OSError as error:
        return error.errno or -1
    return 0
