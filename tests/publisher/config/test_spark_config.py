"""fanout.toml's [spark] table: the Spark UI, and Spark settings over fanout's defaults."""

from __future__ import annotations

import pytest

from fanout.errors import ConfigError
from fanout.publisher.config import parse_config
from fanout.publisher.config.settings import SparkSettings


def test_without_it_fanout_decides_the_ui_and_sets_nothing_more() -> None:
    assert parse_config("").spark == SparkSettings(ui=None, conf={})


def test_ui_and_settings_quoted_or_dotted() -> None:
    text = """
[spark]
ui = true
conf = { "spark.sql.shuffle.partitions" = 8, spark.executor.memory = "4g" }

[publisher]
master = "spark://10.0.0.1:7077"
"""
    settings = parse_config(text)
    assert settings.spark.ui is True
    assert settings.spark.conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.executor.memory": "4g",
    }
    assert settings.master == "spark://10.0.0.1:7077"


def test_a_settings_table_of_its_own_and_booleans_as_spark_spells_them() -> None:
    text = "[spark.conf]\nspark.sql.adaptive.enabled = true\nspark.ui.port = 4050\n"
    assert parse_config(text).spark.conf == {
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.port": "4050",
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[spark]\nui = "yes"\n', "spark.ui: expected true or false, not a string ('yes')"),
        ("[spark]\nweb = true\n", "spark.web: unknown key (known keys: ui, conf)"),
        ('[spark.conf]\n"sql.shuffle" = 2\n', 'spark.conf."sql.shuffle": Spark\'s settings start'),
        ("[spark.conf]\nspark.x = [1]\n", 'spark.conf."spark.x": expected a string, number or'),
        (
            '[spark.conf]\n"spark.master" = "yarn"\n',
            "the master is [publisher] master (or --master)",
        ),
        (
            '[spark]\nui = false\nconf = { "spark.ui.enabled" = true }\n',
            "spark.ui says it already",
        ),
    ],
)
def test_mistakes_name_the_key(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^fanout\.toml: ") as raised:
        parse_config(text)
    assert says in str(raised.value)
