"""The agent-log adapters (inference/agent_logs.py) on logs this project wrote in the shapes of public runs:
mini-swe-agent's `.traj.json`, a Terminal-Bench 1 trial directory of mini-swe-agent, and an OpenHands completion
log (string tool calls, `str_replace_editor`). Shapes from bench/credit_corpus.py's SOURCES."""

from __future__ import annotations

import json

import pytest

from depgpo.credit import compute_credit
from depgpo.inference import load_trajectories

PATCH = "diff --git a/pkg/stats.py b/pkg/stats.py\n--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -1 +1 @@\n-x\n+y\n"


def mini_traj() -> dict:
    return {
        "instance_id": "demo__pkg-101", "trajectory_format": "mini-swe-agent-1",
        "info": {"exit_status": "Submitted", "submission": PATCH, "config": {"environment": {"cwd": "/testbed"}}},
        "messages": [
            {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
            {"role": "user", "content": "<pr_description>\nmean() of pkg/stats.py is off by one\n</pr_description>"},
            {"role": "assistant", "content": "THOUGHT: look at the code.\n\n```bash\ncat pkg/stats.py\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\ndef mean(xs): return sum(xs)/len(xs)+1\n"
                                        "</output>"},
            {"role": "assistant", "content": "THOUGHT: fix it.\n\n```bash\ncat > pkg/stats.py <<'EOF'\n"
                                             "def mean(xs): return sum(xs)/len(xs)\nEOF\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
            {"role": "assistant", "content": "THOUGHT: two actions at once are refused.\n```bash\nls\n```\n```bash\n"
                                             "pwd\n```"},
            {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
            {"role": "assistant", "content": "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
        ]}


def test_mini_swe_agent_traj(tmp_path):
    path = tmp_path / "demo__pkg-101.traj.json"
    path.write_text(json.dumps(mini_traj()))
    (trajectory,) = load_trajectories(path)
    assert trajectory["task"] == {"id": "demo__pkg-101", "path": None, "format": "fenced_actions"}
    assert trajectory["workdir"] == "/testbed" and trajectory["num_turns"] == 4
    assert trajectory["verifier"]["E"] == ["/testbed/pkg/stats.py"]  # the submitted patch's files
    assert [(c["turn"], c["text"].split()[0], c["exit_code"]) for c in trajectory["commands"]] == [
        (0, "cat", 0), (1, "cat", 0), (3, "echo", None)]  # turn 2 held two blocks: no action
    assert trajectory["commands"][0]["observation"] == "def mean(xs): return sum(xs)/len(xs)+1\n"
    result = compute_credit(trajectory, num_turns=trajectory["num_turns"])
    assert [(c.turn, c.role, c.q) for c in result.commands] == [
        (0, "supporting read", 0.5), (1, "direct write", 1.0), (3, "no recorded dependency", 0.0)]  # cat showed
    # `sum(xs)/len(xs)`, which the rewrite kept


def test_terminal_bench_1_trial_directory(tmp_path):
    trial = tmp_path / "count-lines" / "count-lines.1-of-1.2025-08-07__20-46-16"
    (trial / "sessions").mkdir(parents=True)
    (trial / "results.json").write_text(json.dumps({
        "task_id": "count-lines", "instruction": "Write the number of lines of /app/data.txt to /app/n.txt",
        "is_resolved": True, "failure_mode": "unset"}))
    (trial / "sessions" / "agent.log").write_text(
        "root@box:/app# pip install mini-swe-agent\nINSTALL_SUCCESS\n"
        "\x1b[1;36mmini-swe-agent (step 1, $0.00):\x1b[0m\n\u280b Waiting for the LM to respond...THOUGHT: count.\n\n"
        "```bash\nwc -l < /app/data.txt\n```\n12:01:55 - LiteLLM:ERROR: noise\n\nUser:\n"
        "<returncode>0</returncode>\n<output>\n4187\n</output>\n\u2500\u2500\u2500\n"
        "mini-swe-agent (step 2, $0.01):\nTHOUGHT: write it.\n\n```bash\necho 4187 > /app/n.txt\n```\n\nUser:\n"
        "<returncode>0</returncode>\n<output>\n</output>\n")
    (trajectory,) = load_trajectories(trial)
    assert trajectory["task"]["id"] == "count-lines" and trajectory["task"]["format"] == "tb1_trial"
    assert trajectory["verifier"]["reward"] == 1.0 and trajectory["instruction"].startswith("Write the number")
    assert [c["text"] for c in trajectory["commands"]] == ["wc -l < /app/data.txt", "echo 4187 > /app/n.txt"]
    assert trajectory["commands"][0]["observation"] == "4187\n"
    result = compute_credit(trajectory, num_turns=trajectory["num_turns"])
    assert [c.q for c in result.commands] == [0.5, 1.0]  # wc revealed what the answer wrote


def test_openhands_log_with_string_tool_calls_and_editor(tmp_path):
    def call(name: str, arguments: dict, call_id: str) -> dict:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}

    calls = [[call("execute_bash", {"command": "grep -n 'def mean' /workspace/pkg/pkg/stats.py"}, "toolu_01")],
             [call("str_replace_editor", {"command": "create", "path": "/workspace/pkg/pkg/stats.py",
                                          "file_text": "def mean(xs):\n    return sum(xs) / len(xs)\n"}, "toolu_02")],
             [call("str_replace_editor", {"command": "str_replace", "path": "/workspace/pkg/pkg/stats.py",
                                          "old_str": "len(xs)", "new_str": "max(len(xs), 1)"}, "toolu_03")]]
    fncall = [{"role": "system", "content": "You are OpenHands agent."},
              {"role": "user", "content": "<uploaded_files>\n/workspace/pkg\n</uploaded_files>\nFix mean() in "
                                          "/workspace/pkg/pkg/stats.py."}]
    for number, turn_calls in enumerate(calls):
        fncall += [{"role": "assistant", "content": f"step {number}", "tool_calls": repr(turn_calls)},  # a repr
                   {"role": "tool", "tool_call_id": turn_calls[0]["id"], "name": turn_calls[0]["function"]["name"],
                    "content": "3:def mean(xs):" if number == 0 else "File edited."}]
    log = tmp_path / "Claude-1743405761.json"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": "prompt-style history"}],
                               "fncall_messages": fncall, "fncall_response": {}}))
    (trajectory,) = load_trajectories(log)
    assert trajectory["workdir"] == "/workspace/pkg" and trajectory["num_turns"] == 3
    assert trajectory["verifier"]["E"] == ["/workspace/pkg/pkg/stats.py"]  # from the instruction, tags dropped
    commands = trajectory["commands"]
    assert [c["text"].split()[0] for c in commands] == ["grep", "str_replace_editor", "str_replace_editor"]
    assert commands[0]["observation"] == "3:def mean(xs):"
    assert [w["path"] for w in commands[1]["writes"]] == ["/workspace/pkg/pkg/stats.py"]
    assert commands[1]["writes"][0]["content_after"] == ["def mean(xs):", "    return sum(xs) / len(xs)"]
    assert commands[2]["reads"] == ["/workspace/pkg/pkg/stats.py"] and commands[2]["writes"][0]["content_after"] is None
    assert '"new_str": "max(len(xs), 1)"' in commands[2]["text"]  # the call's words stay in the command text


def test_a_directory_that_is_no_trial_is_refused_with_the_shapes(tmp_path):
    with pytest.raises(ValueError, match="not a trial directory.*sessions/agent.log.*agent/trajectory.json"):
        load_trajectories(tmp_path)


def test_prose_between_two_fenced_blocks_is_no_command(tmp_path):
    reply = "THOUGHT: the old code:\n```python\nx = 1\n```\nand now the action.\n\n```bash\nls /testbed\n```"
    path = tmp_path / "t.traj.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "task"},
                                             {"role": "assistant", "content": reply},
                                             {"role": "user", "content": "<returncode>0</returncode>\n<output>\n"
                                                                         "a\n</output>"}]}))
    (trajectory,) = load_trajectories(path)
    assert [c["text"] for c in trajectory["commands"]] == ["ls /testbed"]
