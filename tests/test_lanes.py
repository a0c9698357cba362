"""The lanes of ``make test`` (tests/conftest.py's xdist scheduler): which test modules run one
after another in the publishers' lane, which beside it, and which work is handed out first; and
that a module marked ``no_spark_publisher`` starts none, as far as its source says."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import PUBLISHER_LANE, SECOND_LANE, lane, rank

TESTS = Path(__file__).parent
#: Sources of test modules, the markers' names spelt in two parts: the scheduler reads this
#: module's source too, and it starts no process.
MARK = "pytest.mark."
INTEGRATION = f'pytestmark = [{MARK}integration, {MARK}asyncio(loop_scope="module")]'
BESIDE = f"pytestmark = [{MARK}integration, {MARK}no_spark_publisher]"
SECOND = f"pytestmark = [{MARK}integration, {MARK}second_lane]"
#: What a module's source holds when it starts a Spark publisher: the ``publisher`` role given to
#: ``Children.start``, ``publisher_and_relay``, a ``fanout demo``, or conftest's ``publisher``.
STARTS_A_PUBLISHER = re.compile(
    r"""["']publisher["']|publisher_and_relay|["']demo["']|\bpublisher: Child\b"""
)


def test_integration_modules_go_to_the_publishers_lane_unless_they_start_no_publisher() -> None:
    assert lane(INTEGRATION) == PUBLISHER_LANE
    assert lane(f"@{MARK}integration  # one test of the module\nasync def test_a(): ...")
    assert lane(BESIDE) is None
    assert lane("def test_a() -> None: ...") is None
    assert lane(SECOND) == SECOND_LANE != PUBLISHER_LANE


def test_the_second_lane_is_handed_out_last() -> None:
    scopes = {
        SECOND_LANE: "",
        "tests/test_unit.py": "def test_a() -> None: ...",
        PUBLISHER_LANE: "",
        "tests/test_beside.py": BESIDE,
    }
    ordered = sorted(scopes, key=lambda scope: rank(scope, scopes[scope]))
    assert ordered == [PUBLISHER_LANE, "tests/test_beside.py", "tests/test_unit.py", SECOND_LANE]


def test_the_second_lane_holds_integration_modules_that_start_a_publisher() -> None:
    second = [path for path in TESTS.rglob("test_*.py") if f"{MARK}second_lane" in path.read_text()]
    assert second, "no module is marked second_lane: is the marker still read?"
    for path in second:
        source = path.read_text()
        assert lane(source) == SECOND_LANE, f"{path}: marked integration, not no_spark_publisher"
        # (or uses one another module's fixture started: ``test_objects_pps.py``'s deployment)
        uses = STARTS_A_PUBLISHER.search(source) or "deployment.publisher" in source
        assert uses, f"{path} starts no publisher: not a lane's"


def test_the_publishers_lane_is_handed_out_first_then_the_other_processes() -> None:
    scopes = {
        "tests/test_unit.py": "def test_a() -> None: ...",
        "tests/test_beside.py": BESIDE,
        PUBLISHER_LANE: "",
    }
    ordered = sorted(scopes, key=lambda scope: rank(scope, scopes[scope]))
    assert ordered == [PUBLISHER_LANE, "tests/test_beside.py", "tests/test_unit.py"]


def test_a_module_beside_the_lane_starts_no_spark_publisher() -> None:
    beside = [
        path for path in TESTS.rglob("test_*.py") if f"{MARK}no_spark_publisher" in path.read_text()
    ]
    assert beside, "no module is marked no_spark_publisher: is the marker still read?"
    for path in beside:
        source = path.read_text()
        assert f"{MARK}integration" in source, f"{path}: the marker is for integration modules"
        found = STARTS_A_PUBLISHER.search(source)
        assert found is None, f"{path} starts a Spark publisher ({found and found[0]!r})"
