"""A publisher started from a ``fanout.toml`` text and one relay on it, in a ``Children`` scope.

Integration tests of a dataset kind or a source each need the same two processes; leaving the
scope stops them (the relay first).
"""

from __future__ import annotations

from pathlib import Path

from fanout.launch import Child, Children


async def publisher_and_relay(
    children: Children, directory: Path, config: str
) -> tuple[Child, Child]:
    """Write ``config`` to ``directory/fanout.toml``, start a publisher from it (state and logs
    in ``directory``) and a relay on it, both on free ports, logging at INFO."""
    path = directory / "fanout.toml"
    path.write_text(config)
    publisher = await children.start(
        "publisher",
        [
            *("--config", str(path), "--port", "0", "--state-dir", str(directory / "state")),
            *("--log-level", "info"),
        ],
        directory / "publisher.log",
    )
    relay = await children.start(
        "relay",
        ["--publisher", publisher.url, "--port", "0", "--log-level", "info"],
        directory / "relay.log",
    )
    return publisher, relay
