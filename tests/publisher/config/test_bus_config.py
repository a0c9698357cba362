"""fanout.toml's [bus] table and a dataset's bus opt-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from fanout.errors import ConfigError
from fanout.publisher.config import parse_config
from fanout.publisher.datasets import BusOptions

ITEMS = """
[datasets.item]
key = "id"
schema = { id = "long", title = "string", category = "string", price = "double" }
source = { kind = "postgres", url = "postgresql://u@127.0.0.1/db", table = "items" }
"""


def test_a_dataset_opts_in_with_its_label_column() -> None:
    text = '[bus]\nurl = "nats://127.0.0.1:4222"\ndomain = "auction"\n' + ITEMS
    text += 'bus = { label = "category" }\n'
    settings = parse_config(text)
    assert settings.bus is not None
    assert (settings.bus.url, settings.bus.domain) == ("nats://127.0.0.1:4222", "auction")
    assert settings.datasets["item"].bus == BusOptions(label="category")


def test_bus_true_publishes_without_labels_and_datasets_without_it_are_not_published() -> None:
    settings = parse_config('[bus]\nurl = "nats://h:4222"\n' + ITEMS + "bus = true\n")
    assert settings.datasets["item"].bus == BusOptions()
    assert parse_config('[bus]\nurl = "nats://h:4222"\n' + ITEMS).datasets["item"].bus is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (ITEMS + "bus = true\n", "datasets.item.bus: publishing on the bus needs a [bus] table"),
        ('[bus]\nurl = "http://x"\n', "bus.url: expected nats://host:port"),
        ('[bus]\ndomain = "a"\n', "bus.url: missing"),
        ('[bus]\nurl = "nats://h:1"\ndomain = "auction.com"\n', "bus.domain: the domain"),
        ('[bus]\nurl = "nats://h:1"\nfragment_bytes = 10\n', "bus.fragment_bytes"),
        ('[bus]\nurl = "nats://h:1"\n' + ITEMS + 'bus = { label = "price" }\n', "bus.label"),
        ('[bus]\nurl = "nats://h:1"\n' + ITEMS + 'bus = { label = "nope" }\n', "bus.label"),
        ('[bus]\nurl = "nats://h:1"\n' + ITEMS + "bus = 3\n", "datasets.item.bus: expected"),
        ('[bus]\nurl = "nats://h:1"\nport = 1\n', "bus.port: unknown key"),
    ],
)
def test_every_bus_mistake_names_the_key(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    assert says in str(raised.value)


def test_the_auction_examples_configuration_reads() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "auction" / "fanout.toml"
    text = example.read_text().replace("DSN", "postgresql://fanout@127.0.0.1:5432/postgres")
    settings = parse_config(text, str(example))
    assert settings.bus is not None and settings.bus.domain == "auction"
    assert settings.datasets["item"].bus == BusOptions(label="category")
    assert settings.datasets["bid"].bus == BusOptions()
