"""Whether the running Python is an optimized build: profile-guided (PGO), link-time optimized
(LTO), or both.

Run ``python3.11 bench/interpreter.py``: it prints one JSON object (executable, version,
``optimized`` and the evidence) and exits 0 for an optimized build, 1 otherwise. ``make`` runs
it with each ``python3.11`` it finds and builds ``.venv`` from the first optimized one (the
relay's event loop is plain Python: see ``bench/interpreters.py`` and
docs/benchmarks/interpreters.md). It imports nothing outside the standard library, so any
interpreter can run it.

The evidence, in order:

1. the build's configure arguments (``sysconfig`` ``CONFIG_ARGS``) hold
   ``--enable-optimizations`` (PGO) or ``--with-lto``: python.org's installers,
   python-build-standalone (uv's), Fedora and pyenv's ``PYTHON_CONFIGURE_OPTS`` record them;
2. its compiler or linker flags hold ``-flto`` or ``-fprofile-use``;
3. it is Debian's (or Ubuntu's) own ``/usr/bin/python3.X`` on x86-64 or arm64, which Debian
   builds with PGO and LTO but whose flags it keeps out of ``sysconfig`` (the python3.11
   package's changelog: "Enable LTO/PGO builds on some architectures", "Don't propagate lto
   flags to the _sysconfigdata module", Debian bugs #934771 and #934812): the package that owns
   the executable is asked (``dpkg -S``).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig

#: Build flags that hold the compiler's and the linker's options.
FLAG_VARIABLES = ("PY_CFLAGS", "PY_CFLAGS_NODIST", "PY_LDFLAGS_NODIST", "OPT", "LDFLAGS")
#: Architectures on which Debian's python3.X packages are built with PGO and LTO.
DEBIAN_OPTIMIZED = ("x86_64", "aarch64")


def evidence() -> str | None:
    """Why this interpreter is an optimized build, or None if nothing says it is."""
    configured = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    for option in ("--enable-optimizations", "--with-lto"):
        if option in configured:
            return f"configured {option}"
    flags = " ".join(str(sysconfig.get_config_var(name) or "") for name in FLAG_VARIABLES)
    for flag in ("-flto", "-fprofile-use"):
        if flag in flags.split() or f"{flag}=" in flags:
            return f"built with {flag}"
    package = _debian_package()
    if package is not None and platform.machine() in DEBIAN_OPTIMIZED:
        return f"Debian's build ({package}), PGO and LTO; its flags are not in sysconfig"
    return None


def _debian_package() -> str | None:
    """The Debian package that installed this interpreter's executable, if one did."""
    executable = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if not os.path.exists("/etc/debian_version") or shutil.which("dpkg") is None:
        return None
    owner = subprocess.run(
        ["dpkg", "-S", executable], capture_output=True, text=True, check=False, timeout=30
    )
    if owner.returncode != 0:
        return None  # not installed by a package: built from source or by a version manager
    return owner.stdout.split(":", 1)[0].strip()


def describe() -> dict[str, object]:
    """This interpreter: its executable, version and whether it is an optimized build."""
    why = evidence()
    return {
        "executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        "version": platform.python_version(),
        "optimized": why is not None,
        "evidence": why or "no --enable-optimizations, --with-lto or -flto in its build",
    }


def main() -> int:
    description = describe()
    print(json.dumps(description))
    return 0 if description["optimized"] else 1


if __name__ == "__main__":
    sys.exit(main())
