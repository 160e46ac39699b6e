"""`depgpo replay` from agent logs the inference adapters read, round trip: a Harbor trial of Terminus-2 (ATIF),
OpenAI chat tool calls, a Terminus-2 conversation, and our own trajectory.json. Each replay's reward and
observations are held against the log's, and what the log holds that cannot be replayed is named, turn by turn."""

from __future__ import annotations

import json

import pytest

from depgpo.trajectory import schema
from tests.helpers import DATA
from tests.helpers.cli import depgpo
from tests.helpers.harbor_builder import make_harbor_task
from tests.trajectory.test_schema import conformance_errors

pytestmark = pytest.mark.sandbox

TRIAL = DATA / "offline" / "harbor" / "job" / "count-rows__Qm7rT2x"  # project-written, in Harbor's shapes


def count_rows_task(root):
    """The task the fixture trial ran: four data rows under a header (the trial's `cat` showed 4)."""
    return make_harbor_task(root, "count-rows", instruction="Count the data rows of /app/rows.csv.",
                            files={"rows.csv": "id,name\n1,ada\n2,bob\n3,cy\n4,dee\n"},
                            test_py="from pathlib import Path\n\ndef test_count():\n"
                                    "    assert Path('/app/count.txt').read_text().split() == ['4']\n")


def answer_task(root, name="chat-answer"):
    return make_harbor_task(root, name, instruction="Copy the number in /app/data.txt to /app/answer.txt.",
                            files={"data.txt": "count: 4821\n", "notes.txt": "draft\n"},
                            test_py="from pathlib import Path\n\ndef test_answer():\n"
                                    "    assert Path('/app/answer.txt').read_text().split() == ['4821']\n")


def replay(source, task, out) -> dict:
    proc = depgpo("replay", str(source), "--task", str(task), "--out", str(out), "--timeout", "20")
    assert f"{out / 'trajectory.json'}: reward" in proc.stdout
    return json.loads((out / "trajectory.json").read_text())


def test_a_harbor_terminus_trial_replays_with_its_logged_reward_and_names_what_it_could_not(tmp_path):
    trajectory = replay(TRIAL, count_rows_task(tmp_path), tmp_path / "out")
    assert trajectory["source"] == "traced" and conformance_errors(trajectory, schema.Trajectory) == []
    assert [c["text"] for c in trajectory["commands"]] == [
        "ls -la /app", "head -n 3 /app/rows.csv", "tail -n +2 /app/rows.csv | wc -l > /app/count.txt",
        "cat /app/count.txt"]
    assert trajectory["verifier"]["reward"] == 1.0 and "/app/count.txt" in trajectory["verifier"]["E"]
    record = trajectory["replay"]
    assert record["source_format"] == "harbor" and record["logged_task"] == "count-rows"
    assert record["logged_index"] == [0, 1, 2, 3]
    # The pane of each turn is compared with the turn's last command (ls's turn shows it under head's).
    assert record["fidelity"] == {"reward_logged": 1.0, "reward_replayed": 1.0, "reward_matches": True,
                                  "observations_compared": 3, "observations_differing": 0, "differing_share": 0.0,
                                  "differing": []}
    assert [(u["turn"], u["kind"]) for u in record["unreplayable"]] == [
        (1, "keystrokes"), (2, "tool_call"), (3, "tool_call")]
    assert "'C-c'" in record["unreplayable"][0]["detail"]
    assert record["unreplayable"][1]["detail"] == "mark_task_complete: not a shell command"

    # Our own trajectory replays again: the same outputs, and what its log could not replay is carried along.
    again = replay(tmp_path / "out" / "trajectory.json", tmp_path / "count-rows", tmp_path / "again")
    assert again["replay"]["source_format"] == "trajectory"
    assert again["replay"]["fidelity"]["observations_compared"] == 4
    assert again["replay"]["fidelity"]["observations_differing"] == 0
    assert again["replay"]["unreplayable"] == record["unreplayable"]


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def test_chat_tool_calls_replay_with_editor_creates_and_name_other_tools(tmp_path):
    messages = [
        {"role": "system", "content": "You are a terminal agent. Use the bash tool."},
        {"role": "user", "content": "Copy the number in /app/data.txt to /app/answer.txt."},
        call("c1", "bash", {"command": "cat /app/data.txt"}),
        {"role": "tool", "tool_call_id": "c1", "content": "count: 4821\n"},
        call("c2", "web_search", {"query": "what is count"}),
        {"role": "tool", "tool_call_id": "c2", "content": "no results"},
        call("c3", "str_replace_editor", {"command": "create", "path": "/app/answer.txt", "file_text": "4821\n"}),
        {"role": "tool", "tool_call_id": "c3", "content": "File created successfully at: /app/answer.txt"},
        call("c4", "str_replace_editor", {"command": "str_replace", "path": "/app/notes.txt", "old_str": "draft",
                                          "new_str": "final"}),
        {"role": "tool", "tool_call_id": "c4", "content": "The file /app/notes.txt has been edited."},
        call("c5", "bash", {"command": "cat /app/answer.txt"}),
        {"role": "tool", "tool_call_id": "c5", "content": "4821\n[exit code: 0]"},
        {"role": "assistant", "content": "Done."},
    ]
    log = tmp_path / "chat.json"
    log.write_text(json.dumps({"task_id": "chat-answer", "reward": 1.0, "messages": messages}))
    trajectory = replay(log, answer_task(tmp_path), tmp_path / "out")
    texts = [c["text"] for c in trajectory["commands"]]
    assert texts[0] == "cat /app/data.txt" and texts[2] == "cat /app/answer.txt"
    assert texts[1].startswith("cat > /app/answer.txt <<'DEPGPO_EOF0'\n4821")  # the editor's create, as shell
    assert [c["turn"] for c in trajectory["commands"]] == [0, 2, 4] and trajectory["num_turns"] == 6
    assert trajectory["verifier"]["reward"] == 1.0
    fidelity = trajectory["replay"]["fidelity"]
    assert fidelity["reward_matches"] is True
    # The editor's answer is the tool's, not the shell's: two shell outputs compared ("[exit code: 0]" set aside).
    assert (fidelity["observations_compared"], fidelity["observations_differing"]) == (2, 0)
    assert [(u["turn"], u["kind"]) for u in trajectory["replay"]["unreplayable"]] == [
        (1, "tool_call"), (3, "editor_edit")]
    assert "str_replace of /app/notes.txt" in trajectory["replay"]["unreplayable"][1]["detail"]


def terminus(turns: list[list[dict]]) -> list[dict]:
    messages = [{"role": "user", "content": "Task Description:\nCopy the number.\n\nCurrent terminal state:\n$ "}]
    for commands in turns:
        messages.append({"role": "assistant", "content": json.dumps(
            {"analysis": "", "plan": "", "commands": commands, "task_complete": False})})
        messages.append({"role": "user", "content": "New Terminal Output:\n$ "})
    return messages


def test_terminus_keystrokes_into_a_program_waits_and_keys_are_named_not_run(tmp_path):
    messages = terminus([
        [{"keystrokes": "python3\n", "duration": 1}, {"keystrokes": "open('/app/answer.txt', 'w')\n"},
         {"keystrokes": "exit()\n"}],
        [{"keystrokes": "", "duration": 5}, {"keystrokes": "C-c"}],
        [{"keystrokes": "grep -o '[0-9][0-9]*' /app/data.txt > /app/answer.txt\n", "duration": 0.1},
         {"keystrokes": "cat /app/answer"}],  # typed without Enter: never ran
    ])
    log = tmp_path / "terminus.json"
    log.write_text(json.dumps({"task_id": "chat-answer", "messages": messages}))
    trajectory = replay(log, answer_task(tmp_path), tmp_path / "out")
    assert [c["text"] for c in trajectory["commands"]] == ["grep -o '[0-9][0-9]*' /app/data.txt > /app/answer.txt"]
    assert trajectory["verifier"]["reward"] == 1.0
    assert trajectory["replay"]["source_format"] == "terminus2"
    assert trajectory["replay"]["fidelity"]["reward_logged"] is None  # unlabelled: nothing to match
    assert trajectory["replay"]["fidelity"]["reward_matches"] is None
    assert [(u["turn"], u["kind"]) for u in trajectory["replay"]["unreplayable"]] == [
        (0, "interactive"), (0, "interactive"), (0, "interactive"), (1, "wait"), (1, "keystrokes"),
        (2, "keystrokes")]
    assert "typed into python3" in trajectory["replay"]["unreplayable"][1]["detail"]
    assert "typed without Enter" in trajectory["replay"]["unreplayable"][5]["detail"]


def test_a_terminal_bench_1_trial_of_mini_swe_agent_replays_and_its_counterfactual_runs(tmp_path):
    trial = tmp_path / "count-lines" / "count-lines.1-of-1.2025-08-07__20-46-16"  # the shape of tests/inference's
    (trial / "sessions").mkdir(parents=True)
    (trial / "results.json").write_text(json.dumps({
        "task_id": "count-lines", "instruction": "Write the number of lines of /app/data.txt to /app/n.txt",
        "is_resolved": True, "failure_mode": "unset"}))
    (trial / "sessions" / "agent.log").write_text(
        "root@box:/app# pip install mini-swe-agent\nINSTALL_SUCCESS\n"
        "\x1b[1;36mmini-swe-agent (step 1, $0.00):\x1b[0m\nTHOUGHT: count.\n\n"
        "```bash\nwc -l < /app/data.txt\n```\n\nUser:\n<returncode>0</returncode>\n<output>\n4187\n</output>\n"
        "mini-swe-agent (step 2, $0.01):\nTHOUGHT: write it.\n\n```bash\necho 4187 > /app/n.txt\n```\n\nUser:\n"
        "<returncode>0</returncode>\n<output>\n</output>\n")
    task = make_harbor_task(tmp_path / "tasks", "count-lines", instruction="Write the line count to /app/n.txt.",
                            files={"data.txt": "x\n" * 4187},
                            test_py="from pathlib import Path\n\ndef test_n():\n"
                                    "    assert Path('/app/n.txt').read_text().split() == ['4187']\n")
    trajectory = replay(trial, task, tmp_path / "out")
    assert trajectory["replay"]["source_format"] == "tb1_trial" and trajectory["replay"]["unreplayable"] == []
    # mini-swe-agent's <output> is the command's own output: both compared, exit codes too.
    assert trajectory["replay"]["fidelity"] == {
        "reward_logged": 1.0, "reward_replayed": 1.0, "reward_matches": True, "observations_compared": 2,
        "observations_differing": 0, "differing_share": 0.0, "differing": []}

    proc = depgpo("counterfactual", str(trial), "--task", str(task), "--format", "json", "--timeout", "20", "--out",
                  str(tmp_path / "kept"))
    result = json.loads(proc.stdout)
    kept = json.loads((tmp_path / "kept" / "trajectory.json").read_text())  # (a), for scoring other credit configs
    assert result["trajectory"] == str(tmp_path / "kept" / "trajectory.json")
    assert kept["replay"]["source_format"] == "tb1_trial" and kept["verifier"]["reward"] == result["reward"]
    assert [(c["text"], c["necessary"], c["credit"] > 0) for c in result["commands"]] == [
        ("wc -l < /app/data.txt", False, True),  # revealed the number the answer typed: credited, not necessary
        ("echo 4187 > /app/n.txt", True, True)]
    (wc, _) = result["commands"]
    assert wc["credited_read"] is True and wc["reward_perturbed"] is None  # not a generated task
