"""Reading a SOURCE into the commands to replay (depgpo.replay.source), without a sandbox: which commands, which
turns, what the log holds that a replay cannot redo, that any shape raises only ValueError naming the file, and
which differences between a logged and a replayed observation count."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depgpo.replay.run import same_observation
from depgpo.replay.source import SourceError, read_sources
from tests.helpers import DATA

JOB = DATA / "offline" / "harbor" / "job"


def bash(call_id: str, command: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash",
                                                         "arguments": json.dumps({"command": command})}}]}


def test_a_harbor_job_gives_one_source_per_trial_with_its_task_and_what_it_cannot_replay():
    terminus, calling = read_sources(JOB)
    assert (terminus.task_id, terminus.format, terminus.reward, terminus.pane) == ("count-rows", "harbor", 1.0, True)
    assert (calling.task_id, calling.reward, calling.pane) == ("write-greeting", 0.0, False)
    assert [s["text"] for s in calling.steps] == ["ls /app", "echo hello > /app/greeting.txt && cat /app/greeting.txt",
                                                  "bash -lc 'wc -c /app/greeting.txt'"]
    assert [(u["kind"], u["detail"]) for u in calling.unreplayable] == [("tool_call", "Write: not a shell command")]
    assert terminus.name == f"{JOB}[0]" and calling.name == f"{JOB}[1]"


def test_jsonl_conversations_are_matched_with_their_own_raw_log(tmp_path):
    first = {"task_id": "a", "messages": [{"role": "user", "content": "x"}, bash("c1", "ls"),
                                          {"role": "tool", "tool_call_id": "c1", "content": ""}]}
    second = {"messages": [{"role": "user", "content": "y"},
                           {"role": "assistant", "content": None, "tool_calls": [
                               {"id": "c9", "type": "function", "function": {"name": "browse", "arguments": "{}"}}]},
                           bash("c2", "pwd")]}
    path = tmp_path / "batch.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    a, b = read_sources(path)
    assert (a.task_id, a.unreplayable, [s["text"] for s in a.steps]) == ("a", [], ["ls"])
    assert b.task_id is None  # names no task: no check against --task
    assert [(u["turn"], u["kind"]) for u in b.unreplayable] == [(0, "tool_call")]
    assert [(s["turn"], s["text"]) for s in b.steps] == [(1, "pwd")]


def test_a_command_list_is_a_source_without_observations(tmp_path):
    path = tmp_path / "commands.json"
    path.write_text(json.dumps(["ls", "cat a.txt"]))
    (source,) = read_sources(path)
    assert source.format == "commands" and source.reward is None and source.num_turns == 2
    assert [(s["turn"], s["text"], s["observation"]) for s in source.steps] == [(0, "ls", None), (1, "cat a.txt", None)]


@pytest.mark.parametrize("content,expected", [
    ("[]", "holds no trajectory"),
    ("{not json", "not JSON"),
    ('{"schema_version": 1, "commands": "ls"}', "unknown shape"),  # said by the inference adapters
    ('{"schema_version": 1, "commands": [3]}', "commands[0].text: missing or not a string"),
])
def test_bad_sources_name_the_file_and_what_is_wrong(tmp_path, content, expected):
    path = tmp_path / "source.json"
    path.write_text(content)
    with pytest.raises(SourceError, match=re.escape(expected)) as raised:
        read_sources(path)
    assert str(path) in str(raised.value)
    with pytest.raises(SourceError, match="no such file"):
        read_sources(tmp_path / "missing.json")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["role", "content", "tool_calls", "function", "name", "arguments",
                                          "keystrokes", "duration", "commands", "messages", "schema_version",
                                          "steps", "source", "function_name", "text", "turn", "x"]),
                         inner, max_size=5), max_leaves=30)
_message = st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user", "tool"]), "content": _json,
                                  "tool_calls": _json})


_atif_step = st.fixed_dictionaries({"source": st.sampled_from(["agent", "user"]), "tool_calls": st.lists(
    st.fixed_dictionaries({"function_name": st.sampled_from(["bash_command", "Bash", "Write"]) | _json,
                           "arguments": st.fixed_dictionaries({"keystrokes": _json, "duration": _json}) | _json}),
    max_size=3) | _json})
_terminus_reply = st.builds(lambda commands: {"role": "assistant", "content": json.dumps({"commands": commands})},
                            st.lists(st.fixed_dictionaries({"keystrokes": _json, "duration": _json}) | _json,
                                     max_size=4))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(document=st.lists(_message | _terminus_reply, max_size=5) | _json
       | st.fixed_dictionaries({"messages": st.lists(_message | _terminus_reply)})
       | st.fixed_dictionaries({"schema_version": st.just("ATIF-v1.5"), "steps": st.lists(_atif_step, max_size=5)}))
def test_arbitrary_shapes_raise_only_value_error(tmp_path, document):
    path = tmp_path / "log.json"
    path.write_text(json.dumps(document))
    try:
        sources = read_sources(path)
    except ValueError as error:
        assert str(path) in str(error)
        return
    for source in sources:
        assert all(isinstance(s["text"], str) for s in source.steps)
        assert all(set(u) == {"turn", "kind", "detail"} for u in source.unreplayable)


def test_keystrokes_typed_into_a_program_are_left_out_but_the_same_text_typed_to_the_shell_is_not(tmp_path):
    reply = {"analysis": "", "plan": "", "task_complete": False, "commands": [
        {"keystrokes": "python3\n"}, {"keystrokes": "ls\n"}, {"keystrokes": "exit()\n"}, {"keystrokes": "ls\n"}]}
    path = tmp_path / "terminus.json"
    path.write_text(json.dumps([{"role": "user", "content": "Task Description:\nx\n"},
                                {"role": "assistant", "content": json.dumps(reply)},
                                {"role": "user", "content": "$ "}]))
    (source,) = read_sources(path)
    assert source.format == "terminus2" and source.pane
    assert [(s["turn"], s["text"]) for s in source.steps] == [(0, "ls")]
    assert [u["detail"] for u in source.unreplayable] == [
        "'python3' reads the terminal", "'ls\\n' typed into python3", "'exit()\\n' typed into python3"]


@pytest.mark.parametrize("changes,expected", [
    ({"commands": [{"text": "ls", "turn": "0"}]}, "commands[0].turn: expected an integer, got '0'"),
    ({"replay": {"unreplayable": [{"turn": 0, "kind": "wait"}]}}, "replay.unreplayable[0]: expected"),
    ({"replay": {"unreplayable": "C-c"}}, "replay.unreplayable[0]: expected"),
])
def test_a_hand_edited_trajectory_is_named_by_field(tmp_path, changes, expected):
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps({"schema_version": 1, "source": "traced", "commands": [{"text": "ls", "turn": 0}],
                                **changes}))
    with pytest.raises(SourceError, match=re.escape(f"{path}: {expected}")):
        read_sources(path)


def test_listing_times_are_set_aside_but_what_a_listing_shows_of_the_files_is_not():
    logged = ("total 4\ndrwxr-xr-x  2 root root   60 Oct 31 09:59 .\n"
              "-rw-r--r--  1 root root   31 Mar  3  2025 rows.csv\n"
              "-rw-r--r--  1 root root    2 2025-10-31 09:59:58.123456789 +0000 count.txt\n")
    later = logged.replace("Oct 31 09:59", "Dec  4 21:16").replace("Mar  3  2025", "Dec  4 21:16") \
        .replace("2025-10-31 09:59:58.123456789 +0000", "2026-12-04 21:16:01.000000000 +0000")
    assert same_observation(logged, later)
    assert not same_observation(logged, later.replace(" 31 Dec", " 32 Dec"))  # rows.csv's size changed
    assert not same_observation(logged, later.replace("rows.csv", "rows.tsv"))


def test_a_harness_no_output_marker_and_interleaved_blank_lines_are_not_differences():
    # In the shape of the TMax Terminal-Bench 2.0 runs (mini-swe-agent tool results): a silent command's result is
    # "(no output)" and every result ends in "(exit_code=N)"; a Python traceback after stdout comes a blank line
    # apart or not, as the two streams interleave.
    assert same_observation("(no output)\n\n(exit_code=0)", "")
    assert not same_observation("(no output)\n\n(exit_code=0)", "written\n")
    assert same_observation("=== Test 1 ===\n\nTraceback (most recent call last):\n\n(exit_code=1)",
                            "=== Test 1 ===\nTraceback (most recent call last):\n")
    assert not same_observation("Python 3.13.7\n\n(exit_code=0)", "Python 3.13.5\n")  # another build: a difference
