"""Bad input to `depgpo replay` and `depgpo counterfactual`: one line per trajectory on stderr naming the file and
the fix, exit code 2, and the batch goes on and writes the rest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import DATA
from tests.replay.test_sources import answer_task

pytestmark = pytest.mark.sandbox

TRIAL = DATA / "offline" / "harbor" / "job" / "count-rows__Qm7rT2x"  # a log of task count-rows
GOOD = ["grep -o '[0-9][0-9]*' /app/data.txt > /app/answer.txt"]


def depgpo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "depgpo", *args], capture_output=True, text=True, timeout=600)


def errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if ": error: " in line]


def commands_file(path, commands):
    path.write_text(json.dumps(commands))
    return path


def test_a_missing_task_directory_is_named_per_trajectory(tmp_path):
    good = commands_file(tmp_path / "good.json", GOOD)
    proc = depgpo("replay", str(good), "--task", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert line.startswith(f"depgpo replay: error: {good}: --task {tmp_path / 'nope'}: is not a directory")
    assert "pass the directory of the task the log ran" in line


def test_a_log_of_another_task_is_refused_and_the_batch_goes_on(tmp_path):
    task = answer_task(tmp_path)
    good = commands_file(tmp_path / "good.json", GOOD)
    proc = depgpo("replay", str(TRIAL), str(good), "--task", str(task), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert f"{TRIAL}: the log ran task 'count-rows', but --task {task} is task 'chat-answer'" in line
    assert line.endswith("pass the directory of task 'count-rows'")
    assert not (tmp_path / "out" / "000").exists()
    written = json.loads((tmp_path / "out" / "001" / "trajectory.json").read_text())
    assert written["verifier"]["reward"] == 1.0


def test_a_command_that_hangs_is_stopped_named_and_the_rest_replayed(tmp_path):
    source = commands_file(tmp_path / "hangs.json", ["sleep 30", *GOOD])
    proc = depgpo("replay", str(source), "--task", str(answer_task(tmp_path)), "--out", str(tmp_path / "out"),
                  "--timeout", "2")
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert f"{source}: command 0 ('sleep 30') hung and was stopped after 2 s; the rest was replayed" in line
    assert "Raise --timeout" in line
    trajectory = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert trajectory["commands"][0]["timed_out"] is True and trajectory["verifier"]["reward"] == 1.0


def test_a_replay_that_diverges_from_its_log_is_written_and_said(tmp_path):
    # The log says this earned 1.0 with output 7; in this task the same command prints 4821 and earns 0.
    messages = [{"role": "user", "content": "Copy the number."},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "bash", "arguments": json.dumps({"command": "cat /app/data.txt"})}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "count: 7\n"}]
    log = tmp_path / "diverges.json"
    log.write_text(json.dumps({"task_id": "chat-answer", "reward": 1.0, "messages": messages}))
    proc = depgpo("replay", str(log), "--task", str(answer_task(tmp_path)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert f"{log}: the replay diverges from the log (reward 0.0 replayed, 1.0 logged; 1 of 1 observations " \
           "differ); check that --task is the version of the task the log ran" in line
    fidelity = json.loads((tmp_path / "out" / "trajectory.json").read_text())["replay"]["fidelity"]
    assert fidelity["reward_matches"] is False and fidelity["differing"] == [0]


def test_a_trajectory_without_commands_is_named_and_the_batch_goes_on(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps([{"role": "user", "content": "Copy the number."},
                                 {"role": "assistant", "content": "I cannot do that."}]))
    good = commands_file(tmp_path / "good.json", GOOD)
    proc = depgpo("counterfactual", str(empty), str(good), "--task", str(answer_task(tmp_path)), "--format", "json",
                  "--timeout", "20")
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert line == (f"depgpo counterfactual: error: {empty}: no shell commands to replay; give a log or trajectory "
                    "with at least one shell command")
    (result,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert result["source"] == str(good) and result["commands"][0]["necessary"] is True


def test_an_unreadable_source_names_the_file(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    proc = depgpo("counterfactual", str(broken), "--task", str(answer_task(tmp_path)))
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert f"{broken}: not JSON" in line and "expected a trajectory.json object" in line


def test_a_hand_edited_trajectory_with_a_bad_command_names_the_field(tmp_path):
    bad = tmp_path / "trajectory.json"
    bad.write_text(json.dumps({"schema_version": 1, "task": {"id": "chat-answer"}, "source": "traced",
                               "verifier": {"reward": 1.0}, "commands": [{"index": 0, "turn": 0}]}))
    proc = depgpo("replay", str(bad), "--task", str(answer_task(tmp_path)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert f"{bad}: commands[0].text: missing or not a string; each command needs its shell text" in line
