"""Issue 47, item 1: offline E from the names the task text gives (relative ones at the working directory), non-shell
tools read as the file writes and reads they are, and scripts the agent wrote and ran followed where their text
allows. Fixtures are hand-written in the shapes of public logs: Harbor's ATIF (Terminus-2, OpenHands with and
without native function calling), Terminal-Bench 1 trials, mini-swe-agent v2, OpenHands event streams, Gemini CLI
sessions, Codex patches."""

from __future__ import annotations

import json
from pathlib import Path

from depgpo.credit import compute_credit
from depgpo.inference import infer_trajectory, load_trajectories
from depgpo.inference.task_text import relative_file_names, task_records

HELLO = 'Create a file called hello.txt with "Hello, world!" as the content.\n'


def atif(agent: str, steps: list[dict]) -> dict:
    return {"schema_version": "ATIF-v1.5", "session_id": "s", "agent": {"name": agent, "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": HELLO}] + steps}


def agent_step(calls: list[tuple[str, dict]], message: str = "", results: list[str] | None = None) -> dict:
    step: dict = {"step_id": 2, "source": "agent", "message": message, "tool_calls": [
        {"tool_call_id": f"c{i}", "function_name": name, "arguments": arguments}
        for i, (name, arguments) in enumerate(calls)]}
    if results is not None:
        step["observation"] = {"results": [{"source_call_id": f"c{i}", "content": text}
                                           for i, text in enumerate(results)]}
    return step


def load_one(tmp_path: Path, document: object, name: str = "trajectory.json") -> dict:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    (trajectory,) = load_trajectories(path)
    return trajectory


def credits(trajectory: dict) -> list[float]:
    return [command.q for command in compute_credit(trajectory, num_turns=trajectory["num_turns"]).commands]


def test_relative_names_of_the_task_text_are_files_at_the_working_directory():
    text = ("Use the files `daily_temp_sf_high.csv` and 'process_data.sh' in the current directory; write "
            "./out/answer.txt, e.g. as in os.path or https://example.com/data.txt, not ../up.txt, v1.2 or /app/x.py")
    assert relative_file_names(text) == ["daily_temp_sf_high.csv", "process_data.sh", "out/answer.txt"]
    assert task_records(text, "/app") == (
        ["/app/x.py", "/app/daily_temp_sf_high.csv", "/app/process_data.sh", "/app/out/answer.txt"],
        ["daily_temp_sf_high.csv", "process_data.sh", "out/answer.txt"])


def test_terminus2_atif_gets_credit_from_a_bare_file_name(tmp_path):
    trajectory = load_one(tmp_path, atif("terminus-2", [
        agent_step([("bash_command", {"keystrokes": "printf 'Hello, world!\\n' > hello.txt\n", "duration": 0.1})]),
        agent_step([("bash_command", {"keystrokes": "cat hello.txt\n"})]),
        agent_step([("mark_task_complete", {})])]))
    assert trajectory["verifier"]["E"] == ["/app/hello.txt"]
    assert credits(trajectory)[0] == 1.0
    reading = trajectory["reading"]
    assert reading["relative_names"] == ["hello.txt"] and reading["workdir"] == "/app"
    assert reading["workdir_from"].startswith("assumed") and reading["tools"]["ignored"] == {"mark_task_complete": 1}
    assert reading["not_understood"] == []


def test_an_atif_agent_that_records_its_cwd_resolves_names_there(tmp_path):
    document = atif("claude-code", [agent_step([("Write", {"file_path": "/work/hello.txt", "content": "hi\n"})])])
    document["agent"]["extra"] = {"cwds": ["/work"]}
    trajectory = load_one(tmp_path, document)
    assert trajectory["verifier"]["E"] == ["/work/hello.txt"] and trajectory["reading"]["workdir"] == "/work"
    assert credits(trajectory) == [1.0]


def test_openhands_editor_create_is_a_write_not_a_silent_drop(tmp_path):
    trajectory = load_one(tmp_path, atif("openhands", [
        agent_step([("str_replace_editor", {"command": "create", "path": "/app/hello.txt",
                                            "file_text": "Hello, world!", "security_risk": "LOW"})],
                   results=["File created successfully at: /app/hello.txt"]),
        agent_step([("finish", {"message": "done"})])]))
    (command,) = trajectory["commands"]
    assert command["writes"][0]["path"] == "/app/hello.txt" and command["writes"][0]["lines_written"] == [
        "Hello, world!"]
    assert credits(trajectory) == [1.0]
    assert trajectory["reading"]["tools"] == {"read": {"str_replace_editor": 1}, "ignored": {"finish": 1},
                                              "dropped": {}}


def test_openhands_without_function_calling_reads_its_text_calls_and_not_the_example(tmp_path):
    prompt = ("Here's a running example\n--------------------- START OF EXAMPLE ---------------------\n"
              "USER: serve app.py on port 5000\n--------------------- END OF EXAMPLE ---------------------\n"
              "--------------------- NEW TASK DESCRIPTION ---------------------\n" + HELLO +
              "--------------------- END OF NEW TASK DESCRIPTION ---------------------\n")
    document = atif("openhands", [{"step_id": 2, "source": "agent", "message": (
        "<function=execute_bash>\n<parameter=command>printf 'Hello, world!\\n' > /app/hello.txt</parameter>\n"
        "</function>")}])
    document["steps"][0]["message"] = prompt
    trajectory = load_one(tmp_path, document)
    assert trajectory["verifier"]["E"] == ["/app/hello.txt"] and credits(trajectory) == [1.0]


def test_other_tools_are_counted_as_dropped_by_name(tmp_path):
    trajectory = load_one(tmp_path, atif("some-agent", [
        agent_step([("web_search", {"query": "hello"}), ("bash", {"command": "echo hi > /app/hello.txt"})])]))
    assert trajectory["reading"]["tools"]["dropped"] == {"web_search": 1}
    assert any(note.startswith("tools dropped: web_search ×1") for note in trajectory["reading"]["not_understood"])


def test_file_tools_of_other_agents(tmp_path):
    trajectory = infer_trajectory([], instruction=HELLO)  # E from a relative name, no ATIF needed
    assert trajectory["verifier"]["E"] == ["/app/hello.txt"]
    steps = [("Edit", {"file_path": "/app/hello.txt", "old_string": "a", "new_string": "b"}),
             ("write_file", {"file_path": "/app/hello.txt", "content": "x\n"}),
             ("read_file", {"absolute_path": "/app/hello.txt"}),
             ("apply_patch", {"input": "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch"})]
    trajectory = load_one(tmp_path, atif("mixed", [agent_step([step]) for step in steps]))
    writes = [[w["path"] for w in c["writes"]] for c in trajectory["commands"]]
    assert writes == [["/app/hello.txt"], ["/app/hello.txt"], [], ["/app/hello.txt"]]
    assert trajectory["commands"][2]["reads"] == ["/app/hello.txt"]
    assert trajectory["commands"][3]["writes"][0]["lines_written"] == ["Hello, world!"]


def test_a_script_the_agent_wrote_and_ran_is_followed_through_its_literal_paths():
    steps = [{"text": "cat > /tmp/fix.py <<'EOF'\nimport pandas as pd\ndf = pd.read_csv('data.csv')\n"
                      "with open('answer.txt', 'w') as f:\n    f.write(str(len(df)))\nEOF\npython3 /tmp/fix.py"},
             {"text": "python3 -c \"open('/app/other.txt', 'w').write('1')\""},
             {"text": "cat answer.txt"}]
    trajectory = infer_trajectory(steps, instruction="Count the rows of data.csv; write the answer to answer.txt.")
    first = trajectory["commands"][0]
    assert "/app/data.csv" in first["reads"]  # pd.read_csv('data.csv') at the shell's directory
    assert "/app/answer.txt" in [w["path"] for w in first["writes"]]
    assert [w["path"] for w in trajectory["commands"][1]["writes"]] == ["/app/other.txt"]
    assert credits(trajectory)[0] == 1.0 and credits(trajectory)[1] == 0.0


def test_terminal_bench_1_trial_takes_its_workdir_from_the_pane_prompt(tmp_path):
    trial = tmp_path / "hello-world.1-of-1.run"
    (trial / "sessions").mkdir(parents=True)
    (trial / "results.json").write_text(json.dumps({"task_id": "hello-world", "is_resolved": True,
                                                    "instruction": "Create a file called hello.txt here."}))
    (trial / "sessions" / "agent.log").write_text(
        "\x1b[?2004hroot@f3db06c2f6c1:/srv# mini -t 'Create a file called hello.txt here.'\n"
        "mini-swe-agent (step 1, $0.01):\nTHOUGHT: write it\n```bash\necho hi > hello.txt\n```\n"
        "User:\n<returncode>0</returncode>\n<output>\n</output>\n")
    (trajectory,) = load_trajectories(trial)
    assert trajectory["workdir"] == "/srv" and trajectory["verifier"]["E"] == ["/srv/hello.txt"]
    assert trajectory["reading"]["workdir_from"] == "the pane's shell prompt" and credits(trajectory) == [1.0]


def test_mini_swe_agent_mswea_fence_and_v2_tool_calls(tmp_path):
    template = "Please solve this issue: write answer.txt\n\nYou can execute bash commands and edit files. cat > newfile.py"
    fenced = [{"role": "user", "content": template},
              {"role": "assistant", "content": "THOUGHT: ok\n\n```mswea_bash_command\necho 4 > answer.txt\n```"},
              {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"}]
    trajectory = load_one(tmp_path, fenced, "a.traj.json")
    assert trajectory["verifier"]["E"] == ["/app/answer.txt"]  # not the template's example newfile.py
    assert credits(trajectory) == [1.0]
    calling = {"info": {"config": {"environment": {"cwd": "/testbed"}}}, "messages": [
        {"role": "user", "content": "Write the answer to answer.txt"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "echo 4 > answer.txt"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "<returncode>0</returncode>"}]}
    trajectory = load_one(tmp_path, calling, "b.traj.json")
    assert trajectory["verifier"]["E"] == ["/testbed/answer.txt"] and credits(trajectory) == [1.0]
    assert trajectory["reading"]["workdir_from"] == "mini-swe-agent's info.config.environment.cwd"


def test_openhands_event_stream_and_gemini_cli_session(tmp_path):
    events = [{"id": 0, "source": "agent", "action": "system", "args": {"content": "You are OpenHands"}},
              {"id": 1, "source": "user", "action": "message", "args": {"content": HELLO}},
              {"id": 5, "source": "agent", "action": "run",
               "args": {"command": "printf 'Hello, world!\\n' > hello.txt"},
               "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "x"}},
              {"id": 6, "source": "agent", "observation": "run", "cause": 5, "content": "",
               "extras": {"metadata": {"exit_code": 0}}},
              {"id": 7, "source": "agent", "action": "finish", "args": {"final_thought": "done"}}]
    trajectory = load_one(tmp_path, events, "events.json")
    assert credits(trajectory) == [1.0] and trajectory["commands"][0]["exit_code"] == 0
    session = {"sessionId": "s", "messages": [
        {"id": "1", "type": "user", "content": HELLO},
        {"id": "2", "type": "gemini", "content": "", "toolCalls": [
            {"id": "w", "name": "write_file", "args": {"file_path": "/app/hello.txt", "content": "Hello, world!"},
             "result": [{"functionResponse": {"response": {"output": "ok"}}}]}]}]}
    trajectory = load_one(tmp_path, session, "session.json")
    assert credits(trajectory) == [1.0] and trajectory["commands"][0]["observation"] == "ok"
    assert trajectory["reading"]["format"] == "Gemini CLI session"
