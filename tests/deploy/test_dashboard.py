"""The Grafana dashboard (``deploy/grafana/fanout.json``) as Grafana imports it: panels laid on
its 24-column grid without overlapping, each query valid PromQL (by a PromQL parser) and its data
source the dashboard's Prometheus variable. That every metric it names is exported is shown on
a live publisher and relay (tests/integration/test_monitoring.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import promql_parser

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "fanout.json"
#: Grafana's variables, as a Prometheus query takes them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s"}


def panels() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return found


def test_the_panels_tile_the_grid_without_overlapping() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in panels():
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells
    assert len({panel["id"] for panel in panels()}) == len(panels())


def test_every_panel_queries_the_chosen_prometheus_in_valid_promql() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    charts = [panel for panel in panels() if panel["type"] != "row"]
    assert len(charts) > 20
    for panel in charts:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(name, value)
            promql_parser.parse(expr)  # raises on invalid PromQL
