"""docs/extending.md's examples are a doctest: the files they open, and where they come from."""

import re
import shutil
from pathlib import Path

from tests.helpers import DATA, REPO

EXTENDING = REPO / "docs" / "extending.md"
FIXTURES = {"trajectory.json": DATA / "offline" / "native_traced.json",  # a traced trajectory, 3 commands
            "terminus2.json": DATA / "offline" / "terminus2.json"}  # an agent log without a trace


def copy_fixtures(directory: Path) -> None:
    """The files the examples open, under the names they use, into the directory the doctest runs in."""
    for name, source in FIXTURES.items():
        shutil.copyfile(source, directory / name)


def trainer_example() -> tuple[str, str]:
    """The trainer example of docs/extending.md#a-group-of-rollouts-to-per-turn-advantages: its code (the Python block
    after the `trainer-example` marker) and the output the page shows for it (the text block after "prints")."""
    found = re.search(r"<!-- trainer-example\b[^>]*-->\n```python\n(.*?)```\n\nprints\n\n```text\n(.*?)```",
                      EXTENDING.read_text(), re.DOTALL)
    assert found, "docs/extending.md: no ```python block after <!-- trainer-example ... --> followed by its output"
    return found.group(1), found.group(2)
