"""docs/extending.md#credit-in-another-trainer: its examples run, and print what the page shows."""

import doctest

from tests.helpers.extending_doc import EXTENDING, copy_fixtures


def test_the_credit_in_another_trainer_examples_run_as_written(tmp_path, monkeypatch):
    copy_fixtures(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = doctest.testfile(str(EXTENDING), module_relative=False, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of docs/extending.md's examples print something else (above)"
    assert result.attempted >= 10  # every block ran: reading, factors, advantages, num_turns, the floor, a log
