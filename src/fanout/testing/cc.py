"""A benchmark's C program built at run time with the machine's ``cc`` (``bench/mqttload.c``,
``bench/wirefloor.c``): its load generators must be compiled so that they are never the limit."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path


def build(source: Path, into: Path, libraries: Sequence[str], needs: str) -> Path:
    """Compile ``source`` (``-O2``, linked with ``libraries``) into a binary in ``into``.

    Raises:
        SystemExit: no compiler, or the build failed: ``needs`` says what to install, with
            what the compiler said.
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit(f"{needs} (no cc on PATH)")
    binary = into / source.stem
    command = [compiler, "-O2", "-o", str(binary), str(source), *libraries]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise SystemExit(f"{needs}; cc said:\n{built.stderr}")
    return binary
