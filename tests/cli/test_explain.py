"""``fanout explain --relay``'s rendering of a relay's answer (``cli.explain.render``): a relay
with workers adds each worker's coverage and which process each fitted link is on."""

from __future__ import annotations

from typing import Any

from fanout.cli.explain import render

ANSWER: dict[str, Any] = {
    "dataset": "agents",
    "view": "box:0,0,20,10",
    "narrowed": False,
    "held": [{"prim": 3, "dataset": "agents", "view": "box:0,0,10,10", "ready": True}],
    "covered_by": [3],
    "covered": False,
    "residual": [{"dataset": "agents", "view": "box:10,0,20,10"}],
    "cost": {"rows": 4, "bytes_per_push": 96, "pushes_per_second": 10.0, "bytes_per_second": 960},
    "links": {"needs_bytes_per_second": 960.0, "probed": 1, "fitted": 0, "fitted_links": []},
}


def test_one_process_is_rendered_without_workers() -> None:
    text = render(ANSWER)
    assert "result: not covered" in text and "  agents box:10,0,20,10" in text
    assert "worker" not in text


def test_a_relay_with_workers_renders_each_workers_coverage_and_links() -> None:
    link = {"client": 7, "paced_bytes_per_second": 500.0, "pushes_per_second": 5.0}
    said = {
        **ANSWER,
        "links": {
            "needs_bytes_per_second": 960.0,
            "probed": 3,
            "fitted": 2,
            "fitted_links": [{**link, "detail": "full", "worker": 2}, {**link, "worker": 0}],
        },
        "workers": [
            {"worker": 1, "held": [], "covered_by": [], "covered": False, "residual": [{}]},
            {"worker": 2, "held": [], "covered_by": [5, 6], "covered": True, "residual": []},
        ],
        "workers_unanswered": [3],
    }
    said["links"]["fitted_links"][1]["detail"] = "coarse"
    lines = render(said).splitlines()
    assert "  client 7 on worker 2: ~500 bytes/s, 5 pushes/s of this view, full detail" in lines
    assert "  client 7 on the leader: ~500 bytes/s, 5 pushes/s of this view, coarse detail" in lines
    assert "worker 1: not covered (by nothing), would ask the leader for 1 piece" in lines
    assert "worker 2: covered (by #5, #6), would ask the leader for 0 pieces" in lines
    assert "workers that did not answer: [3]" in lines
