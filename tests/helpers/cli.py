"""Run the `depgpo` command as a user would, failing the test with its output when it fails."""

import subprocess
import sys


def depgpo(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "depgpo", *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc
