"""fanout.toml tables as the configuration tests write them, and the error one raises."""

from __future__ import annotations

import pytest

from fanout.errors import ConfigError
from fanout.publisher.config import parse_config

ORDERS_SCHEMA = (
    'schema = { order_id = "long", customer = "string", amount = "double", status = "string",'
    ' version = "long", gone = "boolean" }'
)


AGENTS_SCHEMA = (
    'schema = { id = "long", x = "double", y = "double", kind = "int", tick = "long",'
    ' ts = "double" }'
)


def orders(*lines: str, schema: str = ORDERS_SCHEMA, key: str = 'key = "order_id"') -> str:
    """A valid ``[datasets.orders]`` (files, SQL) table with ``lines`` added."""
    source = 'source = { kind = "files", path = "data/orders" }'
    return "\n".join(["[datasets.orders]", key, schema, *lines, source])


def orders_with_source(source: str) -> str:
    """``[datasets.orders]`` with its own ``source`` line."""
    return "\n".join(["[datasets.orders]", 'key = "order_id"', ORDERS_SCHEMA, source])


def sensors(*lines: str, schema: str = 'schema = { topic = "string", value = "double" }') -> str:
    """A ``[datasets.sensors]`` (ingest) table keyed by ``topic``, with ``lines`` added."""
    return "\n".join(["[datasets.sensors]", 'key = "topic"', schema, 'source = "ingest"', *lines])


def simulation(*lines: str, source: str = 'source = { kind = "simulation" }') -> str:
    """A ``[datasets.agents]`` simulation table with ``lines`` added."""
    return "\n".join(["[datasets.agents]", source, *lines])


def error(text: str) -> str:
    """The message of the ConfigError that parsing ``text`` raises."""
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    return str(caught.value)
