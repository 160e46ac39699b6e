"""The package's declared structure holds: layers that point one way, and no module grown past a readable size."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

MAX_MODULE_LINES = 500


def test_imports_follow_the_declared_layers():
    # The contract is [tool.importlinter] in pyproject.toml, checked by import-linter (a maintained tool).
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    proc = subprocess.run([lint, "--config", str(REPO / "pyproject.toml"), "--no-cache"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 2 kept, 0 broken." in proc.stdout


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {str(path.relative_to(REPO)): n for path in (REPO / "src" / "depgpo").rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules by responsibility: {long}"
