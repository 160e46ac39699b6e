"""Issue 47, item 2: every partial reading said, per trajectory, in the table, the JSON and the corpus report;
fallbacks keep their parsed commands and are worded for offline logs; the CLI's help and parse errors name every
shape it reads."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from depgpo.cli import main
from depgpo.credit import CreditConfig
from depgpo.credit.explain import NOT_CREDITED
from depgpo.report.corpus import corpus_report

# A Terminus-2 ATIF log whose task names no file: the command is parsed, the credit falls back.
NO_TARGET = {"schema_version": "ATIF-v1.5", "agent": {"name": "terminus-2"}, "steps": [
    {"step_id": 1, "source": "user", "message": "Say hello."},
    {"step_id": 2, "source": "agent", "message": "", "tool_calls": [
        {"tool_call_id": "a", "function_name": "bash_command", "arguments": {"keystrokes": "echo hello\n"}},
        {"tool_call_id": "b", "function_name": "browser", "arguments": {"url": "http://x"}}]}]}
# A Terminal-Bench 1 trial whose agent kept its steps out of the pane (an installed OpenHands, say).
PANE = "root@c8eed1ca2e5b:/app# openhands --task 'Create a file called hello.txt'\nINFO agent started\nexit\n"


def credit_json(capsys, *argv: object) -> list[dict]:
    status = main(["credit", "--format", "json", *map(str, argv)])
    assert status == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def tb1_trial(root: Path, name: str, log: str) -> Path:
    trial = root / name
    (trial / "sessions").mkdir(parents=True)
    (trial / "results.json").write_text(json.dumps({"task_id": name, "is_resolved": True,
                                                    "instruction": "Create a file called hello.txt."}))
    (trial / "sessions" / "agent.log").write_text(log)
    return trial


def test_a_fallback_keeps_its_parsed_commands_and_says_why_in_offline_words(tmp_path, capsys):
    path = tmp_path / "no-target.json"
    path.write_text(json.dumps(NO_TARGET))
    (result,) = credit_json(capsys, path)
    assert result["diagnostics"]["commands"] == 1
    assert [(c["text"], c["role"], c["credit"]) for c in result["commands"]] == [("echo hello", NOT_CREDITED, None)]
    assert "an offline log has no verifier trace" in result["fallback"]
    assert "were not captured" not in result["fallback"]
    reading = result["reading"]
    assert reading["tools"]["dropped"] == {"browser": 1}
    assert [note.split(":")[0] for note in reading["not_understood"]] == ["tools dropped", "no target named"]


def test_the_table_shows_what_was_read_and_what_not(tmp_path, capsys):
    path = tmp_path / "no-target.json"
    path.write_text(json.dumps(NO_TARGET))
    assert main(["credit", str(path)]) == 0
    table = capsys.readouterr().out
    assert "echo hello" in table and NOT_CREDITED in table
    assert "read: 1 command in 1 turn (ATIF (terminus-2)); tool calls read: bash_command ×1" in table
    assert "not read: tools dropped: browser ×1" in table


def test_a_trial_without_steps_says_so(tmp_path, capsys):
    (result,) = credit_json(capsys, tb1_trial(tmp_path, "hello-world.1-of-1", PANE))
    (why,) = result["reading"]["not_understood"]
    assert why.startswith("no commands: sessions/agent.log shows no `mini-swe-agent (step N)` block")
    assert result["reading"]["target"] == ["/app/hello.txt"]


def test_help_names_every_format_and_says_what_static_does(capsys):
    with pytest.raises(SystemExit):
        main(["credit", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for shape in ("trajectory.json", "chat messages", "Terminus-2", "mini-swe-agent", "OpenHands completion log",
                  "event stream", "Gemini CLI", "ATIF", "Harbor trial or job directory", "Terminal-Bench 1 trial"):
        assert shape in help_text
    assert "agent logs have no trace and are always read from their text" in help_text


def test_a_parse_error_names_every_shape_it_accepts(tmp_path, capsys):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"hello": 1}))
    assert main(["credit", str(path)]) == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert error.startswith(f"depgpo credit: error: {path}: unknown shape")
    for shape in ("trajectory.json", "mini-swe-agent", "ATIF", "OpenHands event stream", "Terminus-2"):
        assert shape in error


def test_the_corpus_report_leaves_out_trajectories_without_commands_and_says_why(tmp_path):
    logs = tmp_path / "logs"
    tb1_trial(logs, "empty.1-of-1", PANE)
    tb1_trial(logs, "solved.1-of-1", "root@x:/app# mini\nmini-swe-agent (step 1, $0.01):\n```bash\n"
                                     "echo hi > hello.txt\n```\nUser:\n<returncode>0</returncode>\n")
    report = corpus_report([logs], tmp_path / "out", "tb1", CreditConfig(), static=False)
    assert report["trajectories"] == 2
    left_out = "1 of 2 trajectories have no command"
    notes = {name: notes for name, _, notes in report["produced"]}
    assert any(left_out in note for note in notes["fig1d"]) and any(left_out in note for note in notes["table11"])
    table = pd.read_csv(tmp_path / "out" / "table11.csv").set_index("statistic")
    assert table.loc["Commands per trajectory", "value"] == 1.0  # over the one trajectory with a command
    rows = pd.read_csv(tmp_path / "out" / "trajectories.csv").set_index("task")
    assert rows.loc["empty.1-of-1", "not_read"].startswith("no commands: sessions/agent.log")
    assert pd.isna(rows.loc["solved.1-of-1", "not_read"])
    index = (tmp_path / "out" / "index.md").read_text()
    assert "## Read in part" in index and "empty.1-of-1" in index.split("## Read in part")[1]
