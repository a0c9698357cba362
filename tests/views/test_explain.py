"""EXPLAIN for subscriptions: what ``fanout explain`` prints."""

from __future__ import annotations

import pytest

from fanout.errors import InvalidView
from fanout.views.explain import Explanation, explain, residual_share
from fanout.views.region import Box, Sphere
from fanout.views.text import parse_region


def test_a_box_half_held_explains_its_missing_half() -> None:
    explanation = explain("region", "box:0,0,10,10", ["box:0,0,5,10", "sphere:100,100,1"])
    assert isinstance(explanation, Explanation)
    assert not explanation.covered
    assert explanation.residual == [Box([5, 0], [10, 10])]
    assert explanation.render() == "\n".join(
        [
            "EXPLAIN region view box:0,0,10,10",
            "have (2):",
            "  1. box:0,0,5,10",
            "  2. sphere:100,100,1",
            "result: not covered",
            "residual (1 primitive, 50.0% of the view's area):",
            "  box:5,0,10,10",
        ]
    )


def test_a_covered_view_has_no_residual() -> None:
    explanation = explain("region", "sphere:0,0,0,5", ["box:-5,-5,-5,5,5,5"])
    assert explanation.covered
    assert explanation.residual == []
    assert explanation.render().splitlines()[-2:] == ["result: covered", "residual: none"]


def test_a_curved_view_reports_an_estimated_share_of_its_volume() -> None:
    explanation = explain("region", "sphere:0,0,0,10", ["box:-10,-10,-10,0,10,10"])
    text = explanation.render()
    assert "result: not covered" in text
    header = next(line for line in text.splitlines() if line.startswith("residual"))
    share = float(header.split("~")[1].split("%")[0])
    assert 50 <= share <= 51
    assert "of the view's volume" in header
    for line in text.splitlines()[text.splitlines().index(header) + 1 :]:
        assert parse_region(line.strip()) in explanation.residual


def test_explain_with_nothing_held_and_with_other_kinds() -> None:
    text = explain("topic", "a/#", []).render()
    assert text.splitlines() == [
        "EXPLAIN topic view a/#",
        "have: nothing",
        "result: not covered",
        "residual (1 primitive):",
        "  a/#",
    ]
    assert explain("path", "/a/b", ["/a/.all"]).covered
    assert "result: covered" in explain("sql", "select * from t", ["select * from t"]).render()


def test_a_flat_view_has_no_area_to_share() -> None:
    assert "the view has no area" in explain("region", "box:0,0,0,10", []).render()
    assert residual_share(Sphere([0, 0], 0), [Box([0, 0], [1, 1])]) is None


def test_bad_input_is_reported_by_the_parser() -> None:
    with pytest.raises(InvalidView, match="column 5"):
        explain("region", "box:x", [])
    with pytest.raises(InvalidView, match="resolve"):
        explain("region", "rel:1:sphere:0,0,5", [])


def test_json_says_what_the_text_says() -> None:
    explanation = explain("region", "sphere:0,0,0,10", ["box:-10,-10,-10,0,10,10"])
    said = explanation.as_json()
    assert said["view"] == "sphere:0,0,0,10" and said["covered"] is False
    assert said["residual_exact"] is False
    share = said["residual_share"]
    assert isinstance(share, float) and 0.50 <= share <= 0.51  # the text's ~50.x%
    assert [parse_region(text) for text in said["residual"]] == explanation.residual
