"""Harbor trial directories and ATIF trajectories (depgpo.inference.harbor_logs), in the shapes Harbor writes."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depgpo.credit import compute_credit
from depgpo.inference import infer_trajectory
from depgpo.inference.harbor_logs import atif_steps, harbor_trial, harbor_trial_dirs, is_atif, keystrokes_command
from tests.helpers import DATA

HARBOR = DATA / "offline" / "harbor"
TERMINUS = HARBOR / "job" / "count-rows__Qm7rT2x"
CALLING = HARBOR / "job" / "write-greeting__Hd4kW9p"
MALFORMED = HARBOR / "malformed" / "broken-json__Zp0qR1s"
# In the shape of the TMax evaluation assets (github.com/hamishivi/tmax, Terminal-Bench 2.0 runs of open models):
# agent/trajectory.json is a plain list of chat messages, one `bash` tool call per turn, outputs ending
# "(exit_code=N)", the task inside a "Please solve this task:" template.
CHAT = HARBOR / "chat" / "sum-column__Kp2wQ7z"


def test_terminus2_trial():
    trial = harbor_trial(TERMINUS)
    assert trial["task_id"] == "count-rows" and trial["reward"] == 1.0 and trial["num_turns"] == 4
    assert trial["instruction"] == ("Count the data rows of /app/rows.csv (not the header line) and write the "
                                    "number to /app/count.txt.")
    steps = trial["steps"]
    assert [(s["turn"], s["text"]) for s in steps] == [
        (0, "ls -la /app"), (0, "head -n 3 /app/rows.csv"),
        (1, "tail -n +2 /app/rows.csv | wc -l > /app/count.txt"),  # C-c dropped
        (2, "cat /app/count.txt")]  # turn 3 only marks the task complete
    # The step's one result (no source_call_id) is the pane after all its commands: the last command's output.
    assert steps[0]["observation"] == "" and "2,bob" in steps[1]["observation"]
    assert steps[3]["observation"].startswith("Current terminal state:\nroot@box:/app# cat /app/count.txt\n4")
    assert all(s["exit_code"] is None for s in steps)


def test_tool_calling_trial():
    trial = harbor_trial(CALLING)
    assert trial["task_id"] == "write-greeting" and trial["reward"] == 0.0 and trial["num_turns"] == 4
    assert trial["instruction"] == "Write the word hello to /app/greeting.txt and print the file size."
    assert trial["steps"] == [
        {"text": "ls /app", "turn": 0, "observation": "notes.md\n", "exit_code": None},
        # the Write tool is read as the write it is (issue 47); results are matched by source_call_id, not by order
        {"text": 'Write {"file_path": "/app/greeting.txt", "content": "hello\\n"}', "turn": 1,
         "observation": "File created successfully at: /app/greeting.txt", "exit_code": None,
         "shell_equivalent": "cat > /app/greeting.txt <<'DEPGPO_EOF0'\nhello\nDEPGPO_EOF0"},
        {"text": "echo hello > /app/greeting.txt && cat /app/greeting.txt", "turn": 1, "observation": "hello\n",
         "exit_code": 0},
        {"text": "bash -lc 'wc -c /app/greeting.txt'", "turn": 2, "observation": "6 /app/greeting.txt\n",
         "exit_code": None}]


def test_malformed_trial_names_the_file():
    with pytest.raises(ValueError, match="cannot be read as JSON") as raised:
        harbor_trial(MALFORMED)
    assert str(MALFORMED / "agent" / "trajectory.json") in str(raised.value) and "ATIF-v1.x" in str(raised.value)


def test_job_directory_lists_its_trials_and_other_dirs_are_not_trials(tmp_path):
    assert harbor_trial_dirs(HARBOR / "job") == [TERMINUS, CALLING]
    assert harbor_trial_dirs(TERMINUS) == [TERMINUS]
    assert harbor_trial(tmp_path) is None and harbor_trial_dirs(tmp_path) == []
    assert harbor_trial(tmp_path / "missing") is None


def test_without_result_json_the_dir_name_and_reward_txt_are_used(tmp_path):
    trial_dir = tmp_path / "count-rows__Ab12Cd3"
    shutil.copytree(TERMINUS, trial_dir)
    (trial_dir / "result.json").unlink()
    (trial_dir / "verifier" / "reward.txt").write_text("0.5\n")
    trial = harbor_trial(trial_dir)
    assert trial["task_id"] == "count-rows" and trial["reward"] == 0.5
    (trial_dir / "verifier" / "reward.txt").unlink()
    assert harbor_trial(trial_dir)["reward"] is None
    (trial_dir / "verifier" / "reward.json").write_text('{"reward": 1}')
    assert harbor_trial(trial_dir)["reward"] == 1.0


@pytest.mark.parametrize("name, content, problem", [
    ("result.json", "{oops", "cannot be read as JSON"),
    ("result.json", "[1]", "not an object"),
    ("verifier/reward.txt", "passed", "is not a number"),
    ("agent/trajectory.json", '{"schema_version": 1, "commands": []}', "not ATIF"),
    ("agent/trajectory.json", '{"schema_version": "ATIF-v1.5", "steps": {}}', "field 'steps'"),
])
def test_bad_files_raise_value_error_naming_file_and_fix(tmp_path, name, content, problem):
    trial_dir = tmp_path / "t__x"
    shutil.copytree(CALLING, trial_dir)
    if name.startswith("verifier"):
        (trial_dir / "result.json").unlink()
        (trial_dir / "verifier").mkdir()
    (trial_dir / name).write_text(content)
    with pytest.raises(ValueError, match=problem) as raised:
        harbor_trial(trial_dir)
    assert str(trial_dir / name) in str(raised.value) and "expected" in str(raised.value)


def test_is_atif_and_keystrokes():
    assert is_atif({"schema_version": "ATIF-v1.4", "steps": []})
    assert not any(is_atif(d) for d in ({"schema_version": 1}, [], None, {"steps": []}))
    assert keystrokes_command("ls\n") == "ls" and keystrokes_command("printf 'a\\n'\n\n") == "printf 'a\\n'"
    assert [keystrokes_command(k) for k in ("C-c", "Enter", "C-d C-d", "  \n", None, 3)] == [None] * 6


def test_custom_keystroke_and_exit_code_hooks():
    document = json.loads((TERMINUS / "agent" / "trajectory.json").read_text())
    _, steps, _ = atif_steps(document, keystrokes_to_command=lambda k: k.upper() if isinstance(k, str) else None,
                             exit_code_of=lambda text: 7 if "count.txt\n4" in text else None)
    assert steps[-1]["text"] == "CAT /APP/COUNT.TXT\n" and steps[-1]["exit_code"] == 7
    assert "C-C" in [s["text"] for s in steps]  # the hook decides what a keystroke batch is


def test_copied_context_steps_are_not_turns():
    document = {"schema_version": "ATIF-v1.5", "steps": [
        {"source": "user", "message": "do it", "is_copied_context": True},
        {"source": "agent", "message": "", "is_copied_context": True,
         "tool_calls": [{"tool_call_id": "a", "function_name": "bash", "arguments": {"cmd": "ls"}}]},
        {"source": "user", "message": "Here are the answers ..."},
        {"source": "agent", "message": "", "tool_calls": [
            {"tool_call_id": "b", "function_name": "execute_bash", "arguments": '{"command": "pwd"}'}]}]}
    assert atif_steps(document) == ("Here are the answers ...",
                                    [{"text": "pwd", "turn": 0, "observation": "", "exit_code": None}], 1)


def test_end_to_end_credit_from_a_harbor_trial():
    trial = harbor_trial(TERMINUS)
    trajectory = infer_trajectory(trial["steps"], instruction=trial["instruction"], num_turns=trial["num_turns"],
                                  task={"id": trial["task_id"], "path": None, "format": "harbor"})
    trajectory["verifier"].update(reward=trial["reward"], reward_source="offline")
    assert trajectory["verifier"]["E"] == ["/app/rows.csv", "/app/count.txt"]  # in the order the instruction names them
    assert trajectory["commands"][2]["writes"][0]["path"] == "/app/count.txt"
    result = compute_credit(trajectory, num_turns=trial["num_turns"])
    assert len(result.turn_credit) == 4 and len(result.commands) == 4
    writer = result.commands[2]
    assert writer.is_write and writer.direct > 0
    assert writer.direct == max(command.direct for command in result.commands)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["source", "message", "tool_calls", "function_name", "arguments",
                                          "keystrokes", "command", "cmd", "observation", "results", "content",
                                          "source_call_id", "tool_call_id", "extra", "exit_code", "text",
                                          "is_copied_context", "x"]), inner, max_size=5),
                     max_leaves=30)
_step = st.fixed_dictionaries({"source": st.sampled_from(["agent", "user", "system", 1]),
                               "tool_calls": st.lists(st.fixed_dictionaries(
                                   {"function_name": st.sampled_from(["bash_command", "Bash", "shell", "Edit"]),
                                    "tool_call_id": _json, "arguments": _json}), max_size=3) | _json,
                               "observation": st.fixed_dictionaries({"results": st.lists(_json, max_size=3)}) | _json,
                               "message": _json})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_step | _json, max_size=6) | _json, version=st.sampled_from(["ATIF-v1.6", 1, None]))
def test_arbitrary_shapes_raise_only_value_error(steps, version):
    try:
        instruction, found, turns = atif_steps({"schema_version": version, "steps": steps})
    except ValueError:
        return
    assert isinstance(instruction, str) and isinstance(turns, int)
    assert all(isinstance(s["text"], str) and isinstance(s["observation"], str) and 0 <= s["turn"] < turns
               and (s["exit_code"] is None or isinstance(s["exit_code"], int)) for s in found)


def test_trial_of_chat_messages_takes_its_task_and_reward_from_result_json():
    from depgpo.inference.formats import load_trajectories

    for source in (CHAT, CHAT / "agent" / "trajectory.json"):
        [trajectory] = load_trajectories(source)
        assert trajectory["task"]["id"] == "sum-column" and trajectory["task"]["format"] == "harbor_chat"
        assert trajectory["verifier"]["reward"] == 1.0 and trajectory["verifier"]["reward_source"] == "offline"
        assert trajectory["instruction"] == ("Sum the second column of /app/sales.csv (skip the header) and write "
                                             "the total to /app/total.txt.")
        assert [(c["turn"], c["exit_code"]) for c in trajectory["commands"]] == [(0, 0), (1, 127), (2, 0), (3, 0)]
        assert trajectory["commands"][2]["writes"][0]["path"] == "/app/total.txt"
