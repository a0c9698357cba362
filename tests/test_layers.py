"""The packages' layers (docs/architecture.md): who may import whom, read from the source.

A unit is a top-level package or module of ``fanout``, and for the relay one of its subpackages
(``relay/core``, ``relay/shell``, ...): the relay's sans-I/O parts import nothing of its shell,
its front ends or the relay cluster; those plug into it from the outside.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fanout

SRC = Path(fanout.__file__).parent

#: What both servers, the relay and the publisher, may import.
SERVERS = {
    "errors",
    "connection",
    "metrics",
    "views",
    "wire",
    "auth",
    "expiry",
    "tls",
    "buckets",
    "cancelling",
    "background",
    "handoff",
    "allocator",
}
#: The shared units that do I/O (asyncio helpers): the relay's pure parts may not import them.
SHARED_IO = {"connection", "cancelling", "background", "handoff", "allocator"}
#: The relay's sans-I/O parts, and its compiled kernels.
PURE_RELAY = {"relay", "relay/core", "relay/data", "relay/kinds", "relay/kernels"}
#: The packages plugging into the relay: its front ends and the many-relay parts.
PLUG_INS = {"websocket", "http", "mqtt", "cluster", "tiers"}
#: What the front ends see of the relay: its API and the front-end interface.
API = {"relay/api"}
#: unit -> the other fanout units it may import.
ALLOWED: dict[str, set[str]] = {
    "views": {"errors"},
    "wire": {"errors", "views"},
    "client": {"errors", "connection", "views", "wire", "tls", "background"},
    "publisher": SERVERS,
    "cache": {"errors", "wire", "background"},
    **dict.fromkeys(PURE_RELAY, (SERVERS - SHARED_IO) | PURE_RELAY),
    "relay/api": (SERVERS - SHARED_IO) | PURE_RELAY,
    # The shell is the composition root: it starts the front ends and the relay cluster.
    "relay/shell": SERVERS | PURE_RELAY | PLUG_INS | API | {"relay/config", "transducers"},
    # The configuration holds the plug-ins' sections: from their settings modules only
    # (``test_the_relays_configuration_reads_only_the_plug_ins_settings``).
    "relay/config": SERVERS | PURE_RELAY | {"cluster", "mqtt"},
    "websocket": SERVERS | PURE_RELAY | API | {"relay/config"},
    "http": SERVERS | PURE_RELAY | API,
    "tiers": SERVERS | PURE_RELAY | API,
    # The relay cluster owns its configuration section and names what it needs of the shell's
    # writer as a Protocol (``cluster.sharing.Writer``): it imports neither.
    "cluster": SERVERS | PURE_RELAY,
    # The MQTT front end follows its own relay's port in mode ``every`` through the client
    # library, as a bridge beside the relay would (sessions replayed from the log, other
    # producers' messages); its cluster shares the relay cluster's Redis client.
    "mqtt": SERVERS | PURE_RELAY | API | {"client", "cluster", "relay/config"},
    # Transducers are pure too: windows and sessions over frames; the SQL one runs in DuckDB
    # under the relay's statement watchdog (``relay/data``). The relay's core hands them its
    # transduced subscriptions' frames (``relay/core/transducing.py``).
    "transducers": {"errors", "views", "wire", "relay/data"},
}
ALLOWED["relay/core"] = ALLOWED["relay/core"] | {"transducers"}
#: What the relay's sans-I/O parts may not import: they take time and bytes from their caller.
IO_MODULES = {"asyncio", "socket", "selectors", "threading", "websockets"}
#: The one exception: DuckDB statements' time limit runs on a thread of its own.
IO_ALLOWED = {"relay/data/watchdog.py": {"threading"}}


def unit_of(module: str) -> str | None:
    """The unit a dotted module name belongs to, or None outside fanout."""
    parts = module.split(".")
    if parts[0] != "fanout":
        return None
    if len(parts) < 2:
        return "fanout"
    if parts[1] == "relay" and len(parts) > 2:
        return f"relay/{parts[2]}"
    return parts[1]


def imports(path: Path) -> set[str]:
    """The dotted modules a source file imports (at any depth); ``from P import m`` gives
    ``P.m`` (a module or a name in P: ``unit_of`` reads both the same)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def imported(path: Path) -> set[str]:
    """The fanout units a source file imports."""
    return {unit for name in imports(path) if (unit := unit_of(name)) is not None}


def own_unit(path: Path) -> str:
    """The unit a file under ``SRC`` belongs to."""
    parts = path.relative_to(SRC).with_suffix("").parts
    module = ".".join(("fanout", *(part for part in parts if part != "__init__")))
    unit = unit_of(module)
    assert unit is not None
    return unit


@pytest.mark.parametrize("unit", sorted(ALLOWED))
def test_a_unit_imports_only_the_layers_below_it(unit: str) -> None:
    folder = SRC / unit
    paths = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]
    wrong = {
        str(path.relative_to(SRC)): sorted(imported(path) - ALLOWED[unit] - {unit})
        for path in paths
        if own_unit(path) == unit
    }
    assert {path: names for path, names in wrong.items() if names} == {}


@pytest.mark.parametrize("unit", sorted(PURE_RELAY - {"relay"} | {"transducers"}))
def test_the_relays_pure_parts_do_no_io(unit: str) -> None:
    wrong = {}
    for path in sorted((SRC / unit).rglob("*.py")):
        rel = str(path.relative_to(SRC))
        io = {name.split(".")[0] for name in imports(path)} & IO_MODULES
        if io - IO_ALLOWED.get(rel, set()):
            wrong[rel] = sorted(io)
    assert wrong == {}


def test_every_unit_has_its_rules() -> None:
    """A new package of fanout's servers or of the relay is given its layer here."""
    units = {own_unit(path) for path in SRC.rglob("*.py")}
    unchecked = {
        "fanout",
        "__main__",
        "cli",
        "demo",
        "demoload",
        "launch",
        "logs",
        "mount",
        "testing",
    }
    assert units - set(ALLOWED) - SERVERS - unchecked == set()


def test_the_library_does_not_import_its_testing_kit() -> None:
    """``fanout.testing`` is for tests, benchmarks and users' tests: nothing else imports it."""
    wrong = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if own_unit(path) != "testing" and "testing" in imported(path)
    ]
    assert wrong == []


def test_only_the_strategies_module_needs_hypothesis() -> None:
    """Hypothesis is a dev dependency: the installed library never imports it."""
    users = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if "hypothesis" in {name.split(".")[0] for name in imports(path)}
    ]
    assert users == ["testing/strategies.py"]


def test_both_forms_of_import_are_read(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text(
        "import fanout.wire.codec\nfrom fanout import tls, errors\nfrom fanout.views import Box\n"
        "from fanout.relay.core import planner\nfrom fanout.relay import kinds\n"
    )
    assert imported(path) == {"wire", "tls", "errors", "views", "relay/core", "relay/kinds"}


def test_the_composition_root_reaches_plug_ins_through_their_entry_points_only() -> None:
    """The relay's composition root starts each front end through ``relay.api.FrontEnd``: it
    imports their front-end classes (and the many-relay parts it wires), not their insides,
    and nothing of websockets (the port is the HTTP front end's)."""
    names = imports(SRC / "relay" / "shell" / "server.py")
    assert {name for name in names if name.split(".")[0] == "websockets"} == set()
    assert {name for name in names if unit_of(name) in PLUG_INS} <= {
        "fanout.websocket.server.WebSocketServer",
        "fanout.http.server.HttpFrontEnd",
        "fanout.mqtt.setup.MqttFrontEnd",
        "fanout.tiers.link.Tiers",
        "fanout.tiers.below.Relays",
        "fanout.cluster.membership.Membership",
    }


#: What the relay's configuration may import of each plug-in: the section it holds.
SETTINGS = {
    "cluster": {"fanout.cluster.settings.Cluster"},
    # MQTT's limits are its section until the MQTT work gives it a settings module.
    "mqtt": {"fanout.mqtt.actions.Limits"},
}


def test_the_relays_configuration_reads_only_the_plug_ins_settings() -> None:
    names = imports(SRC / "relay" / "config.py")
    for plug_in, allowed in SETTINGS.items():
        assert {name for name in names if unit_of(name) == plug_in} <= allowed, plug_in
    assert {unit_of(name) for name in names} & PLUG_INS <= set(SETTINGS)


#: Lines a module may take (STYLE.md item 10: a file past ~500 lines is usually two ideas).
LONGEST = 500
#: Modules past it for now, and why.
LONG_FOR_NOW: dict[str, str] = {}


def test_no_module_passes_five_hundred_lines() -> None:
    long = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > LONGEST
    }
    assert {name: n for name, n in long.items() if name not in LONG_FOR_NOW} == {}
