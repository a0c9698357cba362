"""The connector's catalog of types, as a snoopy cache asks for it (``cache.client``), and the
errors of asking the connector."""

from __future__ import annotations

import asyncio

import msgspec
import nats
from nats.aio.client import Client

from fanout.errors import FanoutError
from fanout.wire.bus import TypeInfo, TypesReply, types_subject


class UnknownType(FanoutError):
    """A type the connector does not serve."""

    code = "unknown_type"


class LoadTimeout(FanoutError):
    """No reply to a ``LOAD`` or ``QUERY`` in time (is the publisher running?)."""

    code = "timeout"


async def fetch_types(nc: Client, domain: str, wait: float) -> dict[str, TypeInfo]:
    """The types the connector of ``domain`` serves, asked for until one answers.

    Raises:
        LoadTimeout: none answered within ``wait`` seconds.
    """
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        try:
            answer = await nc.request(types_subject(domain), b"", timeout=2)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            if asyncio.get_running_loop().time() >= deadline:
                raise LoadTimeout(
                    f"no connector answered {types_subject(domain)} in {wait:g} s (is a"
                    f" publisher with [bus] domain = {domain!r} running?)"
                ) from None
            await asyncio.sleep(0.5)
            continue
        return msgspec.msgpack.decode(answer.data, type=TypesReply).types
