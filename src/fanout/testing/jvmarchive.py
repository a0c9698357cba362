"""A class-data-sharing archive of a Spark publisher's JVM, for the test suite (``make test``
builds it; ``tests/conftest.py`` gives it to every JVM the tests start).

A publisher's JVM spends most of its start loading and verifying Spark's classes; mapped from an
archive they load ready-made: a 2,000-agent publisher's start to its ready line took 6.0-6.5 s
against 9.8-12.0 s (docs/architecture.md, on the test suite). The archive is made by running one
such publisher for a few micro-batches with ``-XX:ArchiveClassesAtExit`` (a JDK 13+ dynamic
archive). A JVM whose class path or JDK differs from the one that made it runs without it.

    python -m fanout.testing.jvmarchive .venv/spark-classes.jsa
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from fanout.launch import Children

#: A publisher of the simulation: Spark's session, a streaming query and its micro-batches.
CONFIG = """
[datasets.agents]
source = { kind = "simulation", agents = 2000 }
"""
#: Where ``make test`` makes the archive: next to the interpreter (``.venv``) that runs the tests.
SUITE_ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"
#: Seconds the publisher runs after its ready line: some micro-batches' classes in the archive.
RUN_SECONDS = 5.0


def options(archive: Path) -> str:
    """The JVM options that map ``archive``: the JVM's notes on an archive it cannot use (another
    JDK, another class path) are silenced, as it then runs as it would without one."""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


async def build(archive: Path) -> bool:
    """Run a publisher whose JVM writes its loaded classes to ``archive`` at exit; True if the
    archive was written (a JDK without a base archive of its own writes none)."""
    with tempfile.TemporaryDirectory(prefix="fanout-jvmarchive-") as scratch:
        directory = Path(scratch)
        (directory / "fanout.toml").write_text(CONFIG)
        written = directory / "classes.jsa"
        given = os.environ.get("JDK_JAVA_OPTIONS")
        dump = f"-XX:ArchiveClassesAtExit={written}"
        os.environ["JDK_JAVA_OPTIONS"] = f"{given} {dump}" if given else dump
        config, state = directory / "fanout.toml", directory / "state"
        args = ["--config", str(config), "--port", "0", "--state-dir", str(state)]
        try:
            async with Children() as children:
                publisher = await children.start("publisher", args, directory / "publisher.log")
                await asyncio.sleep(RUN_SECONDS)
                await publisher.stop(timeout=60.0)
        finally:
            if given is None:
                del os.environ["JDK_JAVA_OPTIONS"]
            else:
                os.environ["JDK_JAVA_OPTIONS"] = given
        if not written.is_file():
            return False
        archive.parent.mkdir(parents=True, exist_ok=True)
        os.replace(written, archive)
        return True


def main(argv: list[str]) -> int:
    """Build the archive named in ``argv``; say so when the JDK wrote none (the tests then start
    every JVM without it, a few seconds slower each)."""
    if len(argv) != 1:
        print("usage: python -m fanout.testing.jvmarchive ARCHIVE", file=sys.stderr)
        return 2
    archive = Path(argv[0])
    if asyncio.run(build(archive)):
        size = archive.stat().st_size >> 20
        print(f"{archive}: Spark's classes for the tests' JVMs ({size} MiB)")
    else:
        print(f"{archive}: this JDK wrote no class archive; the tests' JVMs start without one")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
