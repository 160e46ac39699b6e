"""docs/extending.md#credit-in-another-trainer: its examples run, and print what the page shows."""

import doctest
import subprocess
import sys

from tests.helpers.extending_doc import EXTENDING, copy_fixtures, trainer_example


def test_the_credit_in_another_trainer_examples_run_as_written(tmp_path, monkeypatch):
    copy_fixtures(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = doctest.testfile(str(EXTENDING), module_relative=False, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of docs/extending.md's examples print something else (above)"
    assert result.attempted >= 10  # every block ran: reading, factors, advantages, num_turns, the floor, a log


def test_the_trainer_example_prints_what_the_page_shows(tmp_path):
    code, shown = trainer_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 22  # an example to read, not a program
    script = tmp_path / "trainer_example.py"
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == shown
