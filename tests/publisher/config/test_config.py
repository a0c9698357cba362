"""fanout.toml: datasets and publisher settings, and an error naming the key for every mistake."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cli import main as cli
from fanout.errors import ConfigError
from fanout.publisher.config import PublisherSettings, load_config, parse_config
from fanout.publisher.datasets import (
    TYPES,
    ColumnType,
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


# -- every mistake names its key -----------------------------------------------------------------

# (the TOML, how its error message starts after the file name: 'KEY PATH: PROBLEM')
MISTAKES = [
    # the document and [publisher]
    (
        "[relay]\nport = 1",
        "relay: unknown key (known keys: publisher, datasets, auth, bus, cluster)",
    ),
    ("datasets = 5", "datasets: expected a table, not an integer (5)"),
    ('publisher = "x"', "publisher: expected a table, not a string ('x')"),
    ("[publisher]\nprot = 1", "publisher.prot: unknown key (did you mean 'port'?)"),
    ('[publisher]\nport = "7700"', "publisher.port: expected an integer, not a string ('7700')"),
    ("[publisher]\nport = true", "publisher.port: expected an integer, not a boolean (true)"),
    ("[publisher]\nport = 7700.0", "publisher.port: expected an integer, not a float (7700.0)"),
    (
        "[publisher]\nport = 70000",
        "publisher.port: 70000 is out of range: expected an integer <= 65535",
    ),
    ("[publisher]\nport = -1", "publisher.port: -1 is out of range: expected an integer >= 0"),
    ('[publisher]\nhost = ""', "publisher.host: expected a non-empty string"),
    (
        "[publisher]\nhost = 1979-05-27",
        "publisher.host: expected a string, not a date/time (1979-05-27)",
    ),
    ("[publisher]\nmaster = []", "publisher.master: expected a string, not an array"),
    ("[publisher]\nstate_dir = 5", "publisher.state_dir: expected a string, not an integer (5)"),
    ("[publisher]\ntrigger = -1", "publisher.trigger: -1 is out of range: expected a number >= 0"),
    (
        "[publisher]\ntrigger = nan",
        "publisher.trigger: expected a finite number, not a float (nan)",
    ),
    ("[publisher]\ntrigger = false", "publisher.trigger: expected a number, not a boolean (false)"),
    ('[publisher]\nlog = "log.db"', "publisher.log: unsupported publisher log URL 'log.db'"),
    (
        "[publisher]\nretention_seconds = 0",
        "publisher.retention_seconds: 0 is out of range: expected a number > 0",
    ),
    (
        "[publisher]\nretention_seconds = inf",
        "publisher.retention_seconds: expected a finite number, not a float (inf)",
    ),
    (
        "[publisher]\nmirror_rows = -1",
        "publisher.mirror_rows: -1 is out of range: expected an integer >= 0",
    ),
    ("[publisher]\nmirror_rows = 1e6", "publisher.mirror_rows: expected an integer, not a float"),
    (
        "[publisher]\nmax_primitives = 0",
        "publisher.max_primitives: 0 is out of range: expected an integer >= 1",
    ),
    # dataset names
    ('[datasets.Orders]\nsource = "ingest"', "datasets.Orders: 'Orders' is not a dataset name"),
    ('[datasets.my-data]\nsource = "ingest"', "datasets.my-data: 'my-data' is not a dataset name"),
    ('[datasets."a.b"]\nsource = "ingest"', "datasets.\"a.b\": 'a.b' is not a dataset name"),
    ('[datasets._x]\nsource = "ingest"', "datasets._x: '_x' is not a dataset name"),
    ('[datasets.select]\nsource = "ingest"', "datasets.select: 'select' is an SQL keyword"),
    ('[datasets.from]\nsource = "ingest"', "datasets.from: 'from' is an SQL keyword"),
    ("[datasets]\nx = 5", "datasets.x: expected a table, not an integer (5)"),
    # dataset keys
    (orders('sorce = "x"'), "datasets.orders.sorce: unknown key (did you mean 'source'?)"),
    (
        '[datasets.orders]\nkey = "order_id"\n' + ORDERS_SCHEMA,
        "datasets.orders.source: missing: the source",
    ),
    (orders(key=""), "datasets.orders.key: missing: the name of the key column"),
    (orders(key='key = "oid"'), "datasets.orders.key: 'oid' is not a column of the schema"),
    (
        orders(key='key = "amount"'),
        "datasets.orders.key: 'amount' is a double column; the key must be long, int or string",
    ),
    (
        orders(key='key = "gone"'),
        "datasets.orders.key: 'gone' is a boolean column; the key must be",
    ),
    (orders(key="key = 1"), "datasets.orders.key: expected a string, not an integer (1)"),
    # schemas
    (orders(schema=""), "datasets.orders.schema: missing: a table of column = type"),
    (orders(schema="schema = {}"), "datasets.orders.schema: no columns"),
    (
        orders(schema='schema = ["order_id"]'),
        "datasets.orders.schema: expected a table, not an array",
    ),
    (
        orders(schema='schema = { order_id = "long", amount = "money" }'),
        "datasets.orders.schema.amount: type 'money' is not one of long, int, double, float,"
        " string, boolean, timestamp, date, bytes, decimal(p,s)",
    ),
    (
        orders(schema='schema = { order_id = "long", amount = "integer" }'),
        "datasets.orders.schema.amount: type 'integer' is not one of long, int, double, float,"
        " string, boolean, timestamp, date, bytes, decimal(p,s) (did you mean 'int'?)",
    ),
    (
        orders(schema='schema = { order_id = "long", amount = "decimal(40,2)" }'),
        "datasets.orders.schema.amount: 'decimal(40,2)': a decimal's precision is 1 to 38",
    ),
    (
        orders(schema='schema = { order_id = "long", amount = 5 }'),
        "datasets.orders.schema.amount: expected a string, not an integer (5)",
    ),
    (
        orders(schema='schema = { order_id = "long", _version = "long" }'),
        "datasets.orders.schema._version: column names starting with '_' are reserved",
    ),
    (
        orders(schema='schema = { order_id = "long", "unit price" = "double" }'),
        "datasets.orders.schema.\"unit price\": 'unit price' is not a column name",
    ),
    (
        orders(schema='schema = { order_id = "long", 1st = "double" }'),
        "datasets.orders.schema.1st: '1st' is not a column name",
    ),
    (
        orders(schema='schema = { order_id = "long", Order_ID = "long" }'),
        "datasets.orders.schema.Order_ID: 'Order_ID' and 'order_id' differ only in case",
    ),
    # order, time, cell_size
    (
        orders('order = "amount"'),
        "datasets.orders.order: 'amount' is a double column; the order column must be long or int",
    ),
    (
        orders('order = "versoin"'),
        "datasets.orders.order: 'versoin' is not a column of the schema (did you mean 'version'?)",
    ),
    (
        orders('time = "status"'),
        "datasets.orders.time: 'status' is a string column; the time column must be long, int,"
        " double or float",
    ),
    (orders("cell_size = 10"), "datasets.orders.cell_size: only a space index has a cell size"),
    (
        simulation("cell_size = 0"),
        "datasets.agents.cell_size: 0 is out of range: expected a number > 0",
    ),
    (
        simulation("cell_size = true"),
        "datasets.agents.cell_size: expected a number, not a boolean (true)",
    ),
    (
        simulation('state_store = "rocks"'),
        "datasets.agents.state_store: store 'rocks' is not one of hdfs, rocksdb"
        " (did you mean 'rocksdb'?)",
    ),
    (
        simulation('source = { kind = "simulation", admission = "eager" }', source=""),
        "datasets.agents.source.admission: simulation option admission='eager' is invalid",
    ),
    # indexes
    (
        orders('index = { kind = "geo" }'),
        "datasets.orders.index.kind: 'geo' is not one of space, sql, topic, path, objects",
    ),
    (
        orders('index = "geo"'),
        "datasets.orders.index: 'geo' is not one of space, sql, topic, path, objects",
    ),
    (
        orders("index = 1"),
        "datasets.orders.index: expected a table or a kind name, not an integer (1)",
    ),
    (orders('index = { columns = ["amount"] }'), "datasets.orders.index.kind: missing: the kind"),
    (
        orders('index = { kind = "sql", column = [] }'),
        "datasets.orders.index.column: unknown key (did you mean 'columns'?)",
    ),
    (
        orders('index = { kind = "sql", columns = "amount" }'),
        "datasets.orders.index.columns: expected an array of column names, not a string ('amount')",
    ),
    (
        orders('index = { kind = "sql", columns = ["status", "amout"] }'),
        "datasets.orders.index.columns[1]: 'amout' is not a column of the schema (did you mean"
        " 'amount'?)",
    ),
    (
        orders('index = { kind = "sql", columns = ["status", "status"] }'),
        "datasets.orders.index.columns[1]: 'status' is listed twice",
    ),
    (
        orders('index = { kind = "sql", columns = [1] }'),
        "datasets.orders.index.columns[0]: expected a string, not an integer (1)",
    ),
    (
        orders('index = { kind = "sql", columns = [] }'),
        "datasets.orders.index.columns: an sql index needs at least one column",
    ),
    (
        simulation('index = { kind = "space", columns = ["x", "yy"] }'),
        "datasets.agents.index.columns[1]: 'yy' is not a column of the schema (did you mean 'y'?)",
    ),
    (
        simulation('index = { kind = "space", columns = ["x"] }'),
        "datasets.agents.index.columns: a space index needs 2 or 3 numeric columns (x, y[, z]),"
        " not 1",
    ),
    (
        simulation('index = { kind = "space", columns = ["x", "y", "tick", "ts"] }'),
        "datasets.agents.index.columns: a space index needs 2 or 3 numeric columns (x, y[, z]),"
        " not 4",
    ),
    (
        simulation('index = "space"'),
        "datasets.agents.index.columns: missing: a space index names its 2 or 3 coordinate columns",
    ),
    (
        orders('index = { kind = "space", columns = ["amount", "status"] }'),
        "datasets.orders.index.columns[1]: 'status' is a string column; a space index needs"
        " numeric columns",
    ),
    (
        orders('index = "topic"'),
        "datasets.orders.index.columns: missing: a topic index reads one string column, and the"
        " key 'order_id' is a long column",
    ),
    (
        orders('index = { kind = "path", columns = ["customer", "status"] }'),
        "datasets.orders.index.columns: a path index reads exactly one string column, not 2",
    ),
    (
        orders('index = { kind = "topic", columns = ["amount"] }'),
        "datasets.orders.index.columns[0]: 'amount' is a double column; a topic index needs a"
        " string column",
    ),
    (
        sensors('index = { kind = "path", columns = ["value"] }'),
        "datasets.sensors.index.columns[0]: 'value' is a double column; a path index needs a"
        " string column",
    ),
    # sources
    (
        orders_with_source("source = 5"),
        "datasets.orders.source: expected a table or a kind name, not an integer (5)",
    ),
    (
        orders_with_source('source = { path = "x" }'),
        "datasets.orders.source.kind: missing: the kind",
    ),
    (
        orders_with_source('source = { kind = "kafka" }'),
        "datasets.orders.source.kind: 'kafka' is not one of simulation, files, ingest, postgres",
    ),
    (
        orders_with_source('source = "kafka"'),
        "datasets.orders.source: 'kafka' is not one of simulation, files, ingest, postgres",
    ),
    (
        orders_with_source('source = { kind = "file", path = "x" }'),
        "datasets.orders.source.kind: 'file' is not one of simulation, files, ingest, postgres"
        " (did you mean 'files'?)",
    ),
    (
        orders_with_source('source = "files"'),
        "datasets.orders.source.path: missing: the folder files are read from",
    ),
    (
        orders_with_source('source = { kind = "files", path = [] }'),
        "datasets.orders.source.path: expected a string, not an array",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", format = "xml" }'),
        "datasets.orders.source.format: 'xml' is not one of json, csv, parquet",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", max_files_per_trigger = 0 }'),
        "datasets.orders.source.max_files_per_trigger: 0 is out of range: expected an integer >= 1",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", max_files_per_trigger = 1.5 }'),
        "datasets.orders.source.max_files_per_trigger: expected an integer, not a float (1.5)",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", options = "x" }'),
        "datasets.orders.source.options: expected a table, not a string ('x')",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", options = { header = {} } }'),
        "datasets.orders.source.options.header: expected a string, number or boolean, not a table",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", deleted = "_gone" }'),
        "datasets.orders.source.deleted: column names starting with '_' are reserved",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", deleted = "is deleted" }'),
        "datasets.orders.source.deleted: 'is deleted' is not a column name",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", deleted = "Gone" }'),
        "datasets.orders.source.deleted: 'Gone' and the column 'gone' differ only in case",
    ),
    (
        orders_with_source('source = { kind = "files", path = "d", deleted = "status" }'),
        "datasets.orders.source.deleted: 'status' is a string column; a delete marker must be"
        " boolean",
    ),
    (
        orders_with_source('source = { kind = "files", pth = "d" }'),
        "datasets.orders.source.pth: unknown key (did you mean 'path'?)",
    ),
    (
        sensors().replace('source = "ingest"', 'source = { kind = "ingest", path = "x" }'),
        "datasets.sensors.source.path: unknown key (known keys: kind)",
    ),
    # simulations
    (
        simulation(source='source = { kind = "simulation", dims = 4 }'),
        "datasets.agents.source.dims: simulation option dims=4 is invalid",
    ),
    (
        simulation(source='source = { kind = "simulation", agents = 0 }'),
        "datasets.agents.source.agents: simulation option agents=0 is invalid",
    ),
    (
        simulation(source='source = { kind = "simulation", rate = 0 }'),
        "datasets.agents.source.rate: simulation option rate=0.0 is invalid",
    ),
    (
        simulation(source='source = { kind = "simulation", emit = "all" }'),
        "datasets.agents.source.emit: simulation option emit='all' is invalid",
    ),
    (
        simulation(source='source = { kind = "simulation", rate = "fast" }'),
        "datasets.agents.source.rate: expected a number, not a string ('fast')",
    ),
    (
        simulation(source='source = { kind = "simulation", agents = 10.5 }'),
        "datasets.agents.source.agents: expected an integer, not a float (10.5)",
    ),
    (
        simulation(source='source = { kind = "simulation", dims = true }'),
        "datasets.agents.source.dims: expected an integer, not a boolean (true)",
    ),
    (
        simulation(source='source = { kind = "simulation", agnets = 5 }'),
        "datasets.agents.source.agnets: unknown key (did you mean 'agents'?)",
    ),
    (
        simulation(source='source = { kind = "simulation", start_time = 5 }'),
        "datasets.agents.source.start_time: unknown key",
    ),
    (simulation('key = "uid"'), "datasets.agents.key: a simulation's key column is 'id'"),
    (simulation('order = "ts"'), "datasets.agents.order: a simulation's order column is 'tick'"),
    (simulation('time = "tick"'), "datasets.agents.time: a simulation's time column is 'ts'"),
    (
        simulation('schema = { id = "long", x = "double", y = "double" }'),
        "datasets.agents.schema: a simulation with dims = 2 produces id long, x double, y double,"
        " kind int, tick long, ts double",
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), MISTAKES, ids=[expected.split(": ")[0] for _, expected in MISTAKES]
)
def test_every_mistake_names_the_file_and_the_key(text: str, expected: str) -> None:
    assert error(text).startswith(f"fanout.toml: {expected}")


def test_invalid_toml_names_the_line_and_column() -> None:
    message = error('[datasets.orders]\nkey = "order_id"\nschema = {\n')
    assert message.startswith("fanout.toml: invalid TOML: ")
    assert re.search(r"\(at line 3, column \d+\)", message), message


def test_a_table_declared_twice_is_invalid_toml() -> None:
    # an inline table and a sub-table for the same key: TOML forbids it, tomllib says where
    text = orders_with_source('source = { kind = "ingest" }') + "\n[datasets.orders.source]\n"
    message = error(text)
    assert message.startswith("fanout.toml: invalid TOML: "), message
    assert "(at line 5, " in message, message


def test_errors_name_the_source_they_were_given() -> None:
    with pytest.raises(ConfigError, match=r"^etc/fanout\.toml: publisher\.port: "):
        parse_config("[publisher]\nport = true", source="etc/fanout.toml")


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: no such configuration file"):
        load_config(path)


def test_a_directory_or_binary_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path))}: cannot read"):
        load_config(tmp_path)
    binary = tmp_path / "fanout.toml"
    binary.write_bytes(b"[publisher]\nhost = '\xff'\n")
    with pytest.raises(ConfigError, match=r"fanout\.toml: not UTF-8 text \(byte 20"):
        load_config(binary)


def test_errors_in_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "fanout.toml"
    path.write_text(orders(key='key = "oid"'))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: datasets\.orders\.key: "):
        load_config(path)


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


# -- random valid configurations round-trip ------------------------------------------------------

COLUMN_TYPES: list[ColumnType] = [*TYPES, "decimal(12,2)", "decimal(38,0)"]
NUMERIC: list[ColumnType] = ["long", "int", "double", "float"]
# Names that are never SQL keywords (they start with d/c and a digit or '_' follows).
DATASET_NAMES = st.from_regex(r"d[0-9_][a-z0-9_]{0,6}", fullmatch=True)
COLUMN_NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,7}", fullmatch=True)
TEXT = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=12)
POSITIVE = st.floats(1e-3, 1e6, allow_nan=False)

Spec = dict[str, object]


@st.composite
def declared_dataset(draw: st.DrawFn, name: str) -> tuple[Dataset, Spec]:
    """A files or ingest dataset with a random schema, key and index, and a TOML spec of it."""
    names = draw(st.lists(COLUMN_NAMES, min_size=3, max_size=8, unique_by=str.lower))
    key = names[0]
    schema: dict[str, ColumnType] = {key: draw(st.sampled_from(["long", "int", "string"]))}
    schema |= {column: draw(st.sampled_from(COLUMN_TYPES)) for column in names[1:]}
    spec: Spec = {"key": key}
    kind, columns, index_spec = draw(index_of(schema, key))
    spec["schema"] = dict(schema)  # after index_of, which may have retyped columns
    if index_spec is not None:
        spec["index"] = index_spec
    integers = [column for column, type_ in schema.items() if type_ in ("long", "int")]
    numbers = [column for column, type_ in schema.items() if type_ in NUMERIC]
    order = draw(st.none() | st.sampled_from(integers)) if integers else None
    time = draw(st.none() | st.sampled_from(numbers)) if numbers else None
    cell_size = draw(st.none() | POSITIVE) if kind == "space" else None
    source, source_spec = draw(source_of(schema))
    spec |= {"order": order, "time": time, "cell_size": cell_size, "source": source_spec}
    dataset = Dataset(name, key, schema, kind, columns, source, order, time)
    if cell_size is not None:
        dataset = replace(dataset, cell_size=cell_size)
    return dataset, {field: value for field, value in spec.items() if value is not None}


@st.composite
def index_of(
    draw: st.DrawFn, schema: dict[str, ColumnType], key: str
) -> tuple[str, tuple[str, ...], object]:
    """(kind, columns, spec or None) of a random index that fits ``schema``; may retype columns."""
    kind = draw(st.sampled_from(["space", "sql", "topic", "path"]))
    others = [column for column in schema if column != key]
    if kind == "space":
        coordinates = draw(st.permutations(others))[: draw(st.sampled_from([2, 3]))]
        for column in coordinates:
            schema[column] = draw(st.sampled_from(NUMERIC))
        return kind, tuple(coordinates), {"kind": kind, "columns": list(coordinates)}
    if kind == "sql":
        if draw(st.booleans()):
            return kind, tuple(schema), draw(st.sampled_from([None, "sql", {"kind": "sql"}]))
        chosen = draw(st.lists(st.sampled_from(list(schema)), min_size=1, unique=True))
        return kind, tuple(chosen), {"kind": kind, "columns": chosen}
    if schema[key] == "string" and draw(st.booleans()):
        return kind, (key,), draw(st.sampled_from([kind, {"kind": kind}]))
    column = draw(st.sampled_from(list(schema)))
    schema[column] = "string"
    return kind, (column,), {"kind": kind, "columns": [column]}


@st.composite
def source_of(draw: st.DrawFn, schema: dict[str, ColumnType]) -> tuple[object, object]:
    """(source, spec) of a random files or ingest source for ``schema``."""
    if draw(st.booleans()):
        return IngestSource(), draw(st.sampled_from(["ingest", {"kind": "ingest"}]))
    # a delete marker is a boolean column of the schema or a column of the files only
    flags = [column for column, type_ in schema.items() if type_ == "boolean"]
    folded = {column.lower() for column in schema}
    flags.append(draw(COLUMN_NAMES.filter(lambda name: name.lower() not in folded)))
    source = FilesSource(
        path=draw(TEXT),
        format=draw(st.sampled_from(["json", "csv", "parquet"])),
        options=draw(st.dictionaries(COLUMN_NAMES, TEXT, max_size=3)),
        max_files_per_trigger=draw(st.integers(1, 10_000)),
        deleted=draw(st.none() | st.sampled_from(flags)),
    )
    spec: Spec = {"kind": "files", "path": source.path}
    defaults = {"format": "json", "options": {}, "max_files_per_trigger": 100, "deleted": None}
    for field, default in defaults.items():
        value = getattr(source, field)
        if value != default or (value is not None and draw(st.booleans())):
            spec[field] = value
    return source, spec


@st.composite
def simulation_dataset(draw: st.DrawFn, name: str) -> tuple[Dataset, Spec]:
    """A simulated dataset with random options, some of them left at their defaults."""
    options = {
        "agents": st.integers(1, 10**6),
        "dims": st.sampled_from([2, 3]),
        "rate": POSITIVE,
        "world": POSITIVE,
        "speed": st.floats(0, 1e4),
        "seed": st.integers(-(2**31), 2**31),
        "period": st.integers(1, 100),
        "emit": st.sampled_from(["latest", "every"]),
    }
    chosen = draw(st.dictionaries(st.sampled_from(list(options)), st.just(None)))
    values = {option: draw(options[option]) for option in chosen}
    dataset = replace(agents(SimulationParams(**values)), name=name)
    spec: Spec = {"source": {"kind": "simulation", **values}}
    if draw(st.booleans()):
        dataset = replace(dataset, cell_size=draw(POSITIVE))
        spec["cell_size"] = dataset.cell_size
    return dataset, spec


@st.composite
def configurations(draw: st.DrawFn) -> tuple[PublisherSettings, str]:
    """A random valid configuration and a TOML text that declares it."""
    names = draw(st.lists(DATASET_NAMES, max_size=4, unique=True))
    datasets: dict[str, Dataset] = {}
    sections: list[str] = []
    for name in names:
        kind = draw(st.sampled_from([declared_dataset, declared_dataset, simulation_dataset]))
        dataset, spec = draw(kind(name))
        datasets[name] = dataset
        sections.append(draw(rendered(f"datasets.{name}", spec)))
    publisher = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "host": TEXT,
                "port": st.integers(0, 65535),
                "master": TEXT,
                "state_dir": TEXT,
                "trigger": st.floats(0, 1e3),
                "log": st.sampled_from(["sqlite:///var/log.db", "postgresql://db/fanout"]),
                "retention_seconds": POSITIVE,
            },
        )
    )
    if publisher or draw(st.booleans()):
        sections.insert(0, draw(rendered("publisher", publisher)))
    settings = PublisherSettings(datasets=datasets) if datasets else PublisherSettings()
    values = {k: Path(v) if k == "state_dir" else v for k, v in publisher.items()}
    return replace(settings, **values), "\n".join(sections)


@st.composite
def rendered(draw: st.DrawFn, header: str, spec: Spec) -> str:
    """``spec`` as a TOML table, each sub-table written inline or as a section, at random."""
    lines = [f"[{header}]"]
    sections: list[str] = []
    for key, value in spec.items():
        if isinstance(value, dict) and value and draw(st.booleans()):
            sections.append(draw(rendered(f"{header}.{toml_key(key)}", value)))
        else:
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
    return "\n".join([*lines, *sections]) + "\n"


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def toml_value(value: object) -> str:
    """A value in TOML: JSON's string escapes are TOML's, and repr(float) is a TOML float."""
    match value:
        case bool():
            return "true" if value else "false"
        case int() | float():
            return repr(value)
        case str():
            return json.dumps(value, ensure_ascii=False)
        case list():
            return "[" + ", ".join(toml_value(item) for item in value) + "]"
        case dict():
            pairs = (f"{toml_key(key)} = {toml_value(item)}" for key, item in value.items())
            return "{ " + ", ".join(pairs) + " }"
    raise TypeError(value)


@given(configurations())
def test_random_configurations_round_trip(configuration: tuple[PublisherSettings, str]) -> None:
    expected, text = configuration
    settings = parse_config(text)
    assert settings == expected, text
    assert list(settings.datasets) == list(expected.datasets)
    for name, dataset in settings.datasets.items():
        assert list(dataset.schema) == list(expected.datasets[name].schema)


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
