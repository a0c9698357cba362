"""``fanout.testing.processes``: a real process tree, started here."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from fanout.testing.processes import descendants


def test_a_grandchild_is_found_with_its_command_line_and_strangers_are_not():
    # The child's own command line must not hold the marker its child's holds.
    script = (
        "import subprocess, sys;"
        " subprocess.run([sys.executable, '-c', 'import time; time.sleep(30)  # grand' + 'child'])"
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        for _ in range(200):
            found = descendants(os.getpid())
            if any("# grandchild" in line for line in found.values()):
                break
            time.sleep(0.05)
        assert child.pid in found
        grandchildren = [pid for pid, line in found.items() if "# grandchild" in line]
        assert len(grandchildren) == 1 and grandchildren[0] != child.pid
        assert 1 not in found and os.getpid() not in found
    finally:
        for pid in descendants(child.pid):
            os.kill(pid, 9)
        child.kill()
        child.wait()
