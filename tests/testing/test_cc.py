"""A benchmark's C program built with the machine's cc: it runs, and a build that fails says
what to install and what the compiler said."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fanout.testing import cc


def test_a_program_is_built_and_runs(tmp_path: Path) -> None:
    source = tmp_path / "hello.c"
    source.write_text('#include <stdio.h>\nint main(void) { puts("built"); return 0; }\n')
    binary = cc.build(source, tmp_path, [], "install a C compiler")
    assert binary == tmp_path / "hello"
    assert subprocess.run([binary], check=True, capture_output=True, text=True).stdout == "built\n"


def test_a_failed_build_says_what_is_needed_and_why(tmp_path: Path) -> None:
    source = tmp_path / "broken.c"
    source.write_text("int main(void) { return missing; }\n")
    with pytest.raises(SystemExit, match=r"(?s)install a C compiler; cc said:\n.*missing"):
        cc.build(source, tmp_path, [], "install a C compiler")
