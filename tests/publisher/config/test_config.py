"""fanout.toml: datasets and publisher settings, their defaults and spellings, the example file."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from tests.publisher.config.tables import (
    AGENTS_SCHEMA,
    error,
    orders,
    orders_with_source,
    sensors,
    simulation,
)

from fanout.cli import main as cli
from fanout.errors import ConfigError
from fanout.publisher.config import PublisherSettings, load_config, parse_config
from fanout.publisher.datasets import (
    Dataset,
    FilesSource,
    IngestSource,
    PostgresSource,
    SimulationSource,
    agents,
)
from fanout.publisher.sources.simulation import SimulationParams

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "fanout.toml"

# -- defaults ------------------------------------------------------------------------------------


def test_an_empty_file_serves_the_builtin_agents_with_the_command_lines_defaults() -> None:
    settings = parse_config("")
    flags = cli._parser().parse_args(["publisher"])
    assert settings.datasets == {"agents": agents(SimulationParams())}
    # flags not given are None, so the file (or these defaults) decide; the help says them
    unset = (flags.host, flags.port, flags.master, flags.state_dir, flags.trigger, flags.log)
    assert unset == (None,) * 6
    assert settings.override(host=None, port=None) == settings
    assert (settings.host, settings.port, settings.state_dir) == (
        "127.0.0.1",
        7700,
        Path("var/publisher"),
    )
    assert (settings.log, settings.retention_seconds) == (None, 600.0)
    assert settings.log_url() == f"sqlite:///{Path('var/publisher/log.db').resolve()}"
    assert settings == PublisherSettings()
    assert parse_config("[datasets]\n[publisher]\n") == settings
    # the relays' tables, in a file both read, are theirs (``cli.settings``, ``cluster.settings``)
    assert parse_config("[relay]\nmqtt_port = 1883\n[cluster]\nlease = 5\n") == settings


def test_publisher_settings_are_read() -> None:
    settings = parse_config(
        '[publisher]\nhost = "0.0.0.0"\nport = 0\nmaster = "spark://m:7077"\n'
        'state_dir = "/srv/fanout"\ntrigger = 1\nlog = "postgresql://db/fanout"\n'
        "retention_seconds = 600\nmirror_rows = 0\nmax_primitives = 50\n"
    )
    assert settings == replace(
        PublisherSettings(),
        host="0.0.0.0",
        port=0,
        master="spark://m:7077",
        state_dir=Path("/srv/fanout"),
        trigger=1.0,
        log="postgresql://db/fanout",
        retention_seconds=600.0,
        mirror_rows=0,
        max_primitives=50,
    )


def test_flags_given_override_the_file_and_flags_not_given_do_not() -> None:
    settings = parse_config('[publisher]\nport = 7800\nhost = "0.0.0.0"')
    merged = settings.override(port=7900, host=None, master=None, trigger=0.5)
    assert (merged.port, merged.host, merged.master, merged.trigger) == (7900, "0.0.0.0", None, 0.5)
    with pytest.raises(TypeError):
        settings.override(prot=1)


def test_a_simulation_dataset_defaults_to_the_builtin_layout() -> None:
    settings = parse_config(
        '[datasets.swarm]\nsource = { kind = "simulation", dims = 3, world = 400 }'
    )
    params = SimulationParams(dims=3, world=400.0)
    assert settings.datasets == {"swarm": replace(agents(params), name="swarm")}
    swarm = settings.datasets["swarm"]
    assert (swarm.key, swarm.order, swarm.time_column) == ("id", "tick", "ts")
    assert (swarm.index, swarm.index_columns, swarm.cell_size) == ("space", ("x", "y", "z"), 20.0)


def test_a_simulation_may_repeat_its_layout_and_choose_its_index() -> None:
    text = simulation(
        'key = "id"',
        'order = "tick"',
        'time = "ts"',
        AGENTS_SCHEMA,
        'index = { kind = "sql", columns = ["kind", "x"] }',
    )
    dataset = parse_config(text).datasets["agents"]
    assert dataset == replace(agents(SimulationParams()), index="sql", index_columns=("kind", "x"))


def test_declared_datasets_default_to_sql_over_every_column_and_topic_over_the_key() -> None:
    settings = parse_config(orders() + "\n" + sensors('index = "topic"'))
    orders_, sensors_ = settings.datasets["orders"], settings.datasets["sensors"]
    assert (orders_.index, orders_.index_columns) == ("sql", tuple(orders_.schema))
    assert orders_.source == FilesSource(path="data/orders")
    assert (orders_.order, orders_.time_column, orders_.cell_size) == (None, None, 50.0)
    assert (sensors_.index, sensors_.index_columns, sensors_.source) == (
        "topic",
        ("topic",),
        IngestSource(),
    )


def test_reader_options_reach_spark_as_strings() -> None:
    options = '{ header = true, sep = ";", samplingRatio = 0.5, maxColumns = 10 }'
    source = f'source = {{ kind = "files", path = "d", format = "csv", options = {options} }}'
    dataset = parse_config(orders_with_source(source)).datasets["orders"]
    assert dataset.source == FilesSource(
        path="d",
        format="csv",
        options={"header": "true", "sep": ";", "samplingRatio": "0.5", "maxColumns": "10"},
    )


def test_a_postgres_source_names_its_database_and_table() -> None:
    url = "postgresql://fanout@db:5432/shop"
    source = f'source = {{ kind = "postgres", url = "{url}", table = "orders_v2" }}'
    dataset = parse_config(orders_with_source(source)).datasets["orders"]
    assert dataset.source == PostgresSource(url, "orders_v2")
    bare = parse_config(orders_with_source(f'source = {{ kind = "postgres", url = "{url}" }}'))
    assert bare.datasets["orders"].source == PostgresSource(url)  # the table: the dataset's name
    with pytest.raises(ConfigError, match=r"source\.url: expected a postgresql:// URL"):
        parse_config(orders_with_source('source = { kind = "postgres", url = "mysql://db" }'))
    with pytest.raises(ConfigError, match="url"):
        parse_config(orders_with_source('source = { kind = "postgres" }'))
    assert bare.datasets["orders"].source.capture == "auto"  # logical where the server allows
    logical = f'source = {{ kind = "postgres", url = "{url}", capture = "logical" }}'
    assert parse_config(orders_with_source(logical)).datasets["orders"].source == PostgresSource(
        url, capture="logical"
    )
    with pytest.raises(ConfigError, match=r"source\.capture: expected auto, logical or trigger"):
        parse_config(orders_with_source(logical.replace('"logical"', '"cdc"')))


def test_datasets_keep_the_order_they_are_declared_in() -> None:
    text = "\n".join([sensors(), simulation(), orders()])
    assert list(parse_config(text).datasets) == ["sensors", "agents", "orders"]


def test_schemas_keep_the_order_columns_are_declared_in() -> None:
    dataset = parse_config(
        sensors(schema='schema = { value = "double", zone = "int", topic = "string" }')
    )
    assert list(dataset.datasets["sensors"].schema) == ["value", "zone", "topic"]


# -- TOML's three spellings of a table -----------------------------------------------------------

INLINE = """
[datasets.orders]
key = "order_id"
schema = { order_id = "long", amount = "double", gone = "boolean" }
index = { kind = "sql", columns = ["amount"] }
source = { kind = "files", path = "o", format = "csv", options = { header = 1 }, deleted = "gone" }
"""
SUB_TABLES = """
[datasets.orders]
key = "order_id"

[datasets.orders.schema]
order_id = "long"
amount = "double"
gone = "boolean"

[datasets.orders.index]
kind = "sql"
columns = ["amount"]

[datasets.orders.source]
kind = "files"
path = "o"
format = "csv"
deleted = "gone"

[datasets.orders.source.options]
header = 1
"""
DOTTED = """
datasets.orders.key = "order_id"
datasets.orders.schema.order_id = "long"
datasets.orders.schema.amount = "double"
datasets.orders.schema.gone = "boolean"
datasets.orders.index.kind = "sql"
datasets.orders.index.columns = ["amount"]
datasets.orders.source.kind = "files"
datasets.orders.source.path = "o"
datasets.orders.source.format = "csv"
datasets.orders.source.options.header = 1
datasets.orders.source.deleted = "gone"
"""


def test_inline_tables_sub_tables_and_dotted_keys_declare_the_same_dataset() -> None:
    inline, sub_tables, dotted = (parse_config(text) for text in (INLINE, SUB_TABLES, DOTTED))
    assert inline == sub_tables == dotted
    assert inline.datasets["orders"] == Dataset(
        name="orders",
        key="order_id",
        schema={"order_id": "long", "amount": "double", "gone": "boolean"},
        index="sql",
        index_columns=("amount",),
        source=FilesSource("o", "csv", {"header": "1"}, deleted="gone"),
    )


def test_a_kind_alone_is_its_table() -> None:
    short = parse_config(sensors('index = "topic"'))
    long = parse_config(
        sensors('index = { kind = "topic" }').replace(
            'source = "ingest"', 'source = { kind = "ingest" }'
        )
    )
    assert short == long


# -- the example file ----------------------------------------------------------------------------


def test_the_example_file_declares_the_documented_datasets() -> None:
    settings = load_config(EXAMPLE)
    assert list(settings.datasets) == ["agents", "orders", "sensors", "objects"]
    params = SimulationParams(
        agents=10_000, dims=3, rate=10.0, world=2000.0, speed=20.0, seed=7, period=2
    )
    assert settings.datasets["agents"] == replace(agents(params), cell_size=100.0)
    assert settings.datasets["orders"] == Dataset(
        name="orders",
        key="order_id",
        schema={
            "order_id": "long",
            "customer": "string",
            "region": "string",
            "amount": "double",
            "status": "string",
            "updated_at": "long",
        },
        index="sql",
        index_columns=("customer", "region", "amount", "status"),
        source=FilesSource("data/orders", "json", max_files_per_trigger=10, deleted="is_deleted"),
        order="updated_at",
    )
    assert settings.datasets["sensors"] == Dataset(
        name="sensors",
        key="topic",
        schema={"topic": "string", "value": "double", "unit": "string", "ts": "double"},
        index="topic",
        index_columns=("topic",),
        source=IngestSource(),
        time_column="ts",
    )
    assert settings.datasets["objects"] == Dataset(
        name="objects",
        key="path",
        schema={
            "path": "string",
            "state": "string",
            "rpm": "long",
            "temperature": "double",
            "updated": "double",
        },
        index="path",
        index_columns=("path",),
        source=IngestSource(),
    )
    assert (settings.port, settings.state_dir, settings.master) == (
        7700,
        Path("var/publisher"),
        None,
    )
    assert (settings.log, settings.retention_seconds) == ("sqlite:///var/publisher/log.db", 3600.0)


def test_the_documented_example_parses() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    section = page[page.index("## fanout.toml") :]
    example = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert example is not None
    assert list(parse_config(example.group(1)).datasets) == ["agents", "orders", "sensors"]


def test_every_key_is_documented() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    section = page[page.index("## fanout.toml") :]
    publisher = ["host", "port", "master", "state_dir", "trigger", "log", "retention_seconds"]
    dataset = ["key", "schema", "index", "order", "time", "cell_size", "source", "columns", "kind"]
    files = ["path", "format", "options", "max_files_per_trigger", "deleted"]
    options = [name for name in SimulationParams.__dataclass_fields__ if name != "start_time"]
    undocumented = [
        key for key in publisher + dataset + files + options if f"`{key}`" not in section
    ]
    assert undocumented == []


# -- sources, tokens, objects and state stores ---------------------------------------------------


def test_simulation_sources_carry_their_parameters() -> None:
    dataset = parse_config(
        simulation(
            source='source = { kind = "simulation", emit = "every", max_ticks = 5, partitions = 4 }'
        )
    ).datasets["agents"]
    assert dataset.source == SimulationSource(
        SimulationParams(emit="every", max_ticks=5, partitions=4)
    )


def test_the_auth_table_configures_tokens_and_the_publisher_table_tls(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("k" * 40 + "\n")
    settings = parse_config(
        f'[auth]\nkey_file = "{secret}"\naudience = "fanout"\n'
        '[publisher]\ntls_cert = "c.pem"\ntls_key = "k.pem"\n'
    )
    assert settings.auth is not None
    assert (settings.auth.algorithm, settings.auth.key, settings.auth.audience) == (
        "HS256",
        "k" * 40,
        "fanout",
    )
    assert (settings.tls_cert, settings.tls_key) == (Path("c.pem"), Path("k.pem"))
    assert parse_config("").auth is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[auth]\n", "auth: give the key (key = ...) or the file holding it"),
        ('[auth]\nkey = "short"\n', "auth: an HS256 secret must be at least 32 bytes"),
        ('[auth]\nkey = "' + "k" * 40 + '"\nalgorithm = "none"\n', "auth algorithm must be"),
        ('[auth]\nkey_file = "/no/such/file"\n', "auth key file /no/such/file: cannot read"),
        ('[auth]\nkey = "' + "k" * 40 + '"\nalgo = "RS256"\n', "auth.algo"),
    ],
)
def test_a_bad_auth_table_is_refused_naming_the_key(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_config(text)


def test_an_objects_dataset_takes_the_fixed_cell_layout() -> None:
    settings = parse_config('[datasets.pps]\nindex = "objects"\nsource = "ingest"\n')
    pps = settings.datasets["pps"]
    assert (pps.key, pps.index, pps.index_columns) == ("cell", "objects", ("object",))
    assert list(pps.schema) == ["cell", "object", "attr", "value", "encoding", "quality", "persist"]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ('source = { kind = "files", path = "x" }', "datasets.pps.source: an objects dataset is"),
        ('source = "ingest"\nkey = "id"', "datasets.pps.key: an objects dataset's key is 'cell'"),
        (
            'source = "ingest"\nschema = { id = "long" }',
            "datasets.pps.schema: an objects dataset's schema is fixed",
        ),
        ('source = "ingest"\ntime = "quality"', "datasets.pps.time: an objects dataset orders"),
    ],
)
def test_an_objects_dataset_refuses_another_layout(lines: str, expected: str) -> None:
    assert error(f'[datasets.pps]\nindex = "objects"\n{lines}\n').startswith(
        f"fanout.toml: {expected}"
    )


def test_each_dataset_chooses_its_state_store_and_admission() -> None:
    agents = simulation(
        'state_store = "rocksdb"', source='source = { kind = "simulation", admission = "fixed" }'
    )
    settings = parse_config(agents + "\n" + orders())
    assert settings.datasets["agents"].state_store == "rocksdb"
    assert settings.datasets["orders"].state_store == "hdfs"
    assert settings.datasets["agents"].source.params.admission == "fixed"
