"""The `survival_after_rewrite` knob (docs/credit-decisions.md#d-rewrite) on real episodes: the same answer written
twice, whole, and a file built by appends. Under the definition ("content") both identical writes reach E; under
"reset" a whole rewrite replaces what came before it, as delete-and-recreate does, and an append does not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.sandbox

TEST_PY = ("def test_report():\n"
           "    assert open('/app/report.txt').read().split() == ['kelp-7841', 'tide-22']\n")
COMMANDS = [
    "printf 'kelp-7841\\ntide-22\\n' > /app/report.txt",   # 0: whole write, later rewritten whole with the same lines
    "printf 'kelp-7841\\ntide-22\\n' > /app/report.txt",   # 1: whole rewrite, identical
    "echo kelp-7841 > /app/notes.txt",                     # 2: start of a file built by appends (not inspected)
    "echo tide-22 >> /app/notes.txt",                      # 3: an append: not a whole rewrite
    "cat /app/notes.txt > /app/copy.txt",                  # 4: reads what 2 and 3 wrote (not inspected)
]


def _credit(trajectory, *overrides: str) -> list[float]:
    done = subprocess.run([sys.executable, "-m", "depgpo", "credit", str(trajectory), "--format", "json",
                           "--beta", "0.5", *overrides], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [round(c["credit"], 6) for c in json.loads(done.stdout.splitlines()[0])["commands"]]


def test_two_whole_writes_of_the_same_answer(tmp_path):
    task = make_harbor_task(tmp_path, "rewrite", instruction="Write the report.", test_py=TEST_PY)
    commands = tmp_path / "commands.json"
    commands.write_text(json.dumps(COMMANDS))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "depgpo", "run-episode", str(task), "--commands", str(commands),
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    trajectory = out / "trajectory.json"
    assert json.loads(trajectory.read_text())["verifier"]["reward"] == 1.0

    content = _credit(trajectory)
    reset = _credit(trajectory, "survival_after_rewrite=reset")
    assert content[:2] == [1.0, 1.0]  # the definition: both writes' lines are in the final file
    assert reset[:2] == [0.0, 1.0]    # reset: the rewrite replaced the first write
    assert content[2:] == reset[2:]   # appends and files outside E are untouched by the knob


def test_an_unknown_reading_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "depgpo", "credit", str(tmp_path / "t.json"),
                           "survival_after_rewrite=last"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "survival_after_rewrite" in done.stderr and "content, reset" in done.stderr
