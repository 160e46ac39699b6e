"""Write small Harbor-format tasks for tests (instruction.md, task.toml, environment/, tests/, solution/)."""

from __future__ import annotations

import textwrap
from pathlib import Path

STANDARD_TEST_SH = textwrap.dedent("""\
    #!/bin/bash
    # Offline variant of Harbor's standard test.sh: pytest from the sandbox, reward.txt 1 if all tests pass.
    mkdir -p /logs/verifier
    cd /app
    PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -p no:cacheprovider -rA /tests/test_outputs.py
    if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
    """)


def make_harbor_task(root: Path, name: str, *, instruction: str, test_py: str, files: dict[str, str] | None = None,
                     solve_sh: str | None = None, dockerfile_extra: str = "", verifier_timeout: int = 60) -> Path:
    """A Harbor task directory: `files` are copied into /app; `test_py` becomes tests/test_outputs.py."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text(instruction)
    (task / "task.toml").write_text(textwrap.dedent(f"""\
        version = "1.0"
        [metadata]
        difficulty = "easy"
        category = "test"
        [verifier]
        timeout_sec = {verifier_timeout}
        [agent]
        timeout_sec = 120
        [environment]
        allow_internet = false
        """))
    copies = []
    for rel, content in (files or {}).items():
        path = task / "environment" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        copies.append(f"COPY {rel} /app/{rel}")
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /app\n" + "\n".join(copies) + "\n" + dockerfile_extra)
    (task / "tests" / "test.sh").write_text(STANDARD_TEST_SH)
    (task / "tests" / "test_outputs.py").write_text(textwrap.dedent(test_py))
    if solve_sh is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(solve_sh)
    return task
