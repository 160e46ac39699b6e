"""The trainer API type-checks: mypy --strict is clean on `depgpo.credit.trainer`, and on the example of
docs/extending.md#credit-in-another-trainer as a user's module that imports the installed package (which works
because the package ships `py.typed`). The options are `[tool.mypy]` in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.extending_doc import trainer_example

PUBLIC = REPO / "src" / "depgpo" / "credit" / "trainer.py"


def mypy(*targets: Path, cache: Path) -> subprocess.CompletedProcess:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed: it is in the test extra (pip install -e '.[test]'; envs/setup.sh test)")
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", str(REPO / "pyproject.toml"),
                           "--cache-dir", str(cache), *map(str, targets)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_the_package_says_it_is_typed():
    assert (REPO / "src" / "depgpo" / "py.typed").is_file()
    assert 'depgpo = ["py.typed"]' in (REPO / "pyproject.toml").read_text()  # shipped as package data


def test_mypy_strict_is_clean_on_the_trainer_api(tmp_path):
    checked = mypy(PUBLIC, cache=tmp_path / "cache")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Success: no issues found in 1 source file" in checked.stdout


def test_mypy_strict_is_clean_on_the_example_as_a_user_module(tmp_path):
    """Checked on its own, the example sees depgpo as an installed package: without py.typed mypy would refuse to
    read it ("missing library stubs or py.typed marker") and every call would be untyped."""
    example = tmp_path / "trainer_example.py"
    example.write_text(trainer_example()[0] + "\nreveal_type(turn_advantages)\n")
    checked = mypy(example, cache=tmp_path / "cache")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'Revealed type is "def (group: typing.Sequence[' in checked.stdout, checked.stdout  # typed, not Any


def test_mypy_reports_a_misuse_of_the_api(tmp_path):
    """The check has teeth: a wrong argument type in a user's code is an error, from the package's annotations."""
    misuse = tmp_path / "misuse.py"
    misuse.write_text("from depgpo.credit.trainer import turn_advantages\n\nturn_advantages([[]], rewards='1.0')\n")
    checked = mypy(misuse, cache=tmp_path / "cache")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert 'Argument "rewards" to "turn_advantages" has incompatible type "str"' in checked.stdout, checked.stdout
