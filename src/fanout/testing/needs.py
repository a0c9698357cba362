"""A pytest plug-in: a test that needs a program this machine lacks skips, saying which Debian
package brings it — except on CI, where it fails, so that CI never passes without running it.

Three ways to say what a test needs, all ending in :func:`need`:

- ``need("nats-server")`` in a test or fixture;
- ``@pytest.mark.needs("mosquitto_sub", "mosquitto_pub")`` on a test or module;
- nothing: a throwaway server (``throwaway_nats``, ``throwaway_postgres``, ...) raising
  :class:`~fanout.testing.binaries.ProgramMissing` in a test or fixture is handled the same way.

Load it with ``pytest_plugins = ["fanout.testing.needs"]`` (tests/conftest.py) or ``-p``.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from fanout.testing.binaries import CI_VARIABLE, ProgramMissing, find, on_ci


def need(*programs: str) -> None:
    """Go on only if every program is installed; else skip the test, or fail it on CI.

    Raises:
        pytest.skip.Exception: a program is missing (the reason names its package).
        pytest.fail.Exception: the same, on CI (``FANOUT_CI`` set).
    """
    missing = [str(ProgramMissing(program)) for program in programs if find(program) is None]
    if not missing:
        return
    reason = "; ".join(missing)
    if on_ci():
        pytest.fail(f"{reason}: on CI ({CI_VARIABLE} is set) every test must run", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``needs`` marker (the suite runs with ``--strict-markers``)."""
    config.addinivalue_line(
        "markers", "needs(*programs): skip (fail on CI) unless these programs are installed"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Check the ``needs`` markers before any fixture starts a server; a fixture whose
    throwaway server's program is missing (now, or cached from an earlier test): :func:`need` it."""
    for marker in item.iter_markers("needs"):
        need(*marker.args)
    try:
        yield
    except ProgramMissing as missing:
        need(missing.program)
        raise  # it is installed after all: the fixture failed for another reason


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call() -> Generator[None, None, None]:
    """A test whose throwaway server's program is missing: :func:`need` it."""
    try:
        yield
    except ProgramMissing as missing:
        need(missing.program)
        raise
