"""Watching a real deployment: a publisher and a relay of a map of responsibility (Redis Cluster),
both logging JSON, scraped by a real Prometheus that loads the alert rules.

Shown here: ``process_*`` metrics on both ports; every metric the Grafana dashboard
(``deploy/grafana/fanout.json``) and the alert rules (``deploy/prometheus/fanout.rules.yml``)
read is one these processes export, and Prometheus runs every panel's query and every rule; both
processes' log lines are JSON.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import pytest_asyncio

from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing.binaries import find
from fanout.testing.needs import need
from fanout.testing.ports import free_port
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually

pytestmark = [pytest.mark.integration, pytest.mark.second_lane]

DEPLOY = Path(__file__).parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "fanout.json"
RULES = DEPLOY / "prometheus" / "fanout.rules.yml"
#: What Prometheus adds to every target's series itself.
PROMETHEUS_OWN = {"up"}
#: Grafana's variables in the panels' queries, as a Prometheus query takes them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s"}
#: What the JVM (not log4j) prints at start: Spark runs it with an incubator module.
JVM_NOTE = "WARNING: Using incubator modules: jdk.incubator.vector"
#: What the java launcher prints when the tests set ``JDK_JAVA_OPTIONS`` (tests/conftest.py).
HARNESS_NOTE = "NOTE: Picked up JDK_JAVA_OPTIONS:"
#: The process's own figures every port must show.
PROCESS = (
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
)


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(children: Children, tmp_path: Path) -> AsyncIterator[Child]:
    args = ["--port", "0", "--state-dir", str(tmp_path / "publisher"), "--agents", "500"]
    child = await children.start(
        "publisher", [*args, "--log-level", "info", "--log-format", "json"], tmp_path / "pub.log"
    )
    try:
        yield child
    finally:
        await child.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def relay(
    children: Children, publisher: Child, registry: str, tmp_path: Path
) -> AsyncIterator[Child]:
    """A relay of a map (the registry's figures), with a balancer that never splits (its),
    serving MQTT too (the dashboard's MQTT row)."""
    args = ["--publisher", publisher.url, "--port", "0", "--name", "watched"]
    args += ["--mqtt-port", str(free_port())]
    args += ["--registry", registry, "--split-above", "subscribers=1000000"]
    child = await children.start(
        "relay", [*args, "--log-level", "info", "--log-format", "json"], tmp_path / "relay.log"
    )
    try:
        yield child
    finally:
        await child.stop()


@pytest.fixture(scope="module")
def exported(publisher: Child, relay: Child) -> set[str]:
    """Every sample name the two processes export, once the publisher has measured its floor
    (after its second micro-batch with rows) and counted the relay."""

    def names() -> set[str]:
        found = set()
        for child in (publisher, relay):
            found |= {name.partition("{")[0] for name in scrape(child.url)}
        return found

    wanted = {"fanout_publisher_micro_batch_fastest_seconds", "fanout_publisher_relay_primitives"}
    return asyncio.run(
        eventually(names, wanted.issubset, timeout=180, in_thread=True, what="the floor")
    )


@pytest.fixture(scope="module")
def prometheus(publisher: Child, relay: Child, tmp_path: Path) -> Iterator[str]:
    """A Prometheus scraping both every second and evaluating the rules; yields its URL."""
    need("prometheus")
    binary = find("prometheus")
    assert binary is not None
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [
                    {"job_name": f"fanout-{child.role}", "static_configs": [{"targets": [host]}]}
                    for child in (publisher, relay)
                    if (host := urllib.parse.urlsplit(child.url).netloc)
                ],
            }
        )
    )
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(
            eventually(
                lambda: query(url, 'count(up{job=~"fanout.*"} == 1)'),
                lambda result: result and result[0]["value"][1] == "2",
                timeout=60,
                in_thread=True,
                retrying=(OSError,),
                what="both targets up",
            )
        )
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def api(url: str, path: str, **params: str) -> Any:
    """A Prometheus HTTP API answer's data (raises on an error answer)."""
    address = f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(address, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]


def query(url: str, expr: str) -> list[dict[str, Any]]:
    data = api(url, "query", query=expr)
    result: list[dict[str, Any]] = data["result"]
    return result


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel, Grafana's variables replaced."""
    found = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            found.append((panel["title"], expr))
    return found


def metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression reads (its selectors' names), by a PromQL parser."""
    names: set[str] = set()

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def test_both_ports_show_the_process_own_figures(publisher: Child, relay: Child) -> None:
    for child in (publisher, relay):
        values = scrape(child.url)
        assert all(values[name] > 0 for name in PROCESS), child.role
        assert values["process_open_fds"] < values["process_max_fds"]
        assert any(name.startswith("python_info{") for name in values)
        assert any(name.startswith("python_gc_collections_total{") for name in values)
    jvm = scrape(publisher.url)  # the Spark driver's JVM, where the publisher's memory goes
    assert jvm["fanout_publisher_jvm_process_resident_memory_bytes"] > 50e6
    assert jvm["fanout_publisher_jvm_process_open_fds"] > 0


def test_the_dashboard_reads_only_metrics_the_processes_export(exported: set[str]) -> None:
    queries = panel_queries()
    assert len(queries) > 20
    read = {name for _, expr in queries for name in metric_names(expr)}
    assert read - exported == set()


def test_prometheus_runs_every_panel_query_and_the_rules_read_exported_metrics(
    prometheus: str, exported: set[str]
) -> None:
    answered = {}
    for title, expr in panel_queries():
        answered[title] = query(prometheus, expr)  # raises if Prometheus refuses it
    assert answered["Upstream connected"][0]["value"][1] == "1"
    assert answered["Relays connected"]  # the relay, counted by the publisher

    def evaluated() -> list[dict[str, Any]]:
        groups = api(prometheus, "rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    rules = asyncio.run(
        eventually(
            evaluated,
            lambda rules: (
                rules and all(rule.get("lastEvaluation", "0001")[:4] != "0001" for rule in rules)
            ),
            timeout=30,
            in_thread=True,
            what="every rule evaluated",
        )
    )
    assert len(rules) == 9
    assert all(rule["health"] == "ok" for rule in rules), rules
    read = {name for rule in rules for name in metric_names(rule["query"])}
    assert read - exported - PROMETHEUS_OWN == set()
    firing = {rule["name"] for rule in rules if rule["state"] == "firing"}
    assert firing == set()  # a healthy deployment raises no alert


def test_both_processes_log_json_lines(publisher: Child, relay: Child, exported: set[str]) -> None:
    """Every record is JSON, Python's and Spark's JVM's (log4j, ``fanout/log4j2-json.properties``)
    alike; the one other line is the JVM's own note on its incubator modules."""
    loggers = set()
    for child in (publisher, relay):
        lines = child.log.read_text().splitlines()
        # The java launcher names the options tests/conftest.py gives every JVM (C1 only).
        others = [line for line in lines if not line.startswith(("{", HARNESS_NOTE))]
        assert others == ([JVM_NOTE] if child.role == "publisher" else [])
        entries = [json.loads(line) for line in lines if line.startswith("{")]
        assert all({"time", "level", "logger", "message"} <= set(entry) for entry in entries)
        loggers |= {entry["logger"] for entry in entries}
    assert any(logger.startswith("fanout.publisher") for logger in loggers)
    assert any(logger.startswith("fanout.relay") for logger in loggers)
    assert any(logger.startswith("org.apache.") for logger in loggers)  # Spark's, at start
