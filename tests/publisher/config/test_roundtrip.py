"""fanout.toml: random valid configurations parse to the settings they declare."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fanout.publisher.config import PublisherSettings, parse_config
from fanout.publisher.datasets import (
    TYPES,
    ColumnType,
    Dataset,
    FilesSource,
    IngestSource,
    agents,
)
from fanout.publisher.sources.simulation import SimulationParams

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
