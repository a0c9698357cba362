"""fanout.toml: every mistake is an error naming the file and the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.publisher.config.tables import (
    ORDERS_SCHEMA,
    error,
    orders,
    orders_with_source,
    sensors,
    simulation,
)

from fanout.errors import ConfigError
from fanout.publisher.config import load_config, parse_config

# (the TOML, how its error message starts after the file name: 'KEY PATH: PROBLEM')
MISTAKES = [
    # the document and [publisher]
    (
        "[proxy]\nport = 1",
        "proxy: unknown key (known keys: publisher, spark, datasets, auth, bus, cluster, relay)",
    ),
    ("[relays]\nport = 1", "relays: unknown key (did you mean 'relay'?)"),
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
