"""docs/extending.md's examples are a doctest: the files they open, and where they come from."""

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
