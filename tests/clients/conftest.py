"""The integration tests' module-wide process scope and directory, shared with tests/integration."""

from tests.integration.conftest import children, tmp_path

__all__ = ["children", "tmp_path"]
