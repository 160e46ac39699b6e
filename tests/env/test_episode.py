"""Real commands in the real sandbox under the real tracer: what each command read and wrote, and E."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.tasks import TaskFormatError, load_task
from tests.helpers import DATA
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.sandbox

FIXTURE_TASKS = DATA / "tasks"
PASSING_TEST = "def test_ok():\n    assert True\n"


def run_episode(tmp_path, commands, *, test_py=PASSING_TEST, files=None, timeout_s=20.0, name="t"):
    task = load_task(make_harbor_task(tmp_path, name, instruction="Do the task.", test_py=test_py, files=files))
    with Episode(task, EpisodeConfig(command_timeout_s=timeout_s), out_dir=tmp_path / "out") as ep:
        for turn, command in enumerate(commands):
            ep.run_command(command, turn=turn)
        ep.verify()
    return json.loads((tmp_path / "out" / "trajectory.json").read_text())


def writes_of(command: dict) -> dict[str, dict]:
    return {w["path"]: w for w in command["writes"]}


def test_echo_then_cat(tmp_path):
    traj = run_episode(tmp_path, ["echo hello > notes.txt", "cat notes.txt"])
    echo, cat = traj["commands"]
    assert writes_of(echo)["/app/notes.txt"]["created"] is True
    assert writes_of(echo)["/app/notes.txt"]["lines_written"] == ["hello"]
    assert cat["observation"] == "hello\n" and cat["exit_code"] == 0
    assert "/app/notes.txt" in cat["reads"] and cat["writes"] == []
    assert traj["final"]["files"]["/app/notes.txt"]["lines"] == ["hello"]


def test_heredoc_script_written_then_run(tmp_path):
    traj = run_episode(tmp_path, ["cat > gen.sh <<'EOF'\necho 42 > /app/out.txt\nEOF", "bash gen.sh"])
    write, run = traj["commands"]
    assert writes_of(write)["/app/gen.sh"]["lines_written"] == ["echo 42 > /app/out.txt"]
    assert "/app/gen.sh" in run["reads"]
    assert writes_of(run)["/app/out.txt"]["lines_written"] == ["42"]


def test_sed_in_place_records_only_the_changed_line(tmp_path):
    config = "name = demo\nport = 9000\ndebug = false\n"
    traj = run_episode(tmp_path, ["sed -i 's/port = 9000/port = 8080/' config.txt"], files={"config.txt": config})
    (sed,) = traj["commands"]
    assert list(writes_of(sed)) == ["/app/config.txt"]  # sed's temporary file is folded away
    assert writes_of(sed)["/app/config.txt"]["lines_written"] == ["port = 8080"]
    assert sed["deletions"] == []


def test_mkdir_mv_rm(tmp_path):
    traj = run_episode(tmp_path, ["mkdir -p out && mv a.txt out/ && rm junk.txt"],
                       files={"a.txt": "alpha\n", "junk.txt": "junk\n"})
    (cmd,) = traj["commands"]
    assert set(cmd["deletions"]) == {"/app/a.txt", "/app/junk.txt"}
    assert writes_of(cmd)["/app/out/a.txt"]["lines_written"] == ["alpha"]


def test_cd_resolves_relative_paths(tmp_path):
    traj = run_episode(tmp_path, ["mkdir -p sub && cd sub", "echo x > rel.txt", "cd .. && cat sub/rel.txt"])
    assert "/app/sub/rel.txt" in writes_of(traj["commands"][1])
    assert "/app/sub/rel.txt" in traj["commands"][2]["reads"]


def test_pipeline(tmp_path):
    traj = run_episode(tmp_path, ["cat data.txt | sort | uniq > sorted.txt"], files={"data.txt": "b\na\nb\n"})
    (cmd,) = traj["commands"]
    assert "/app/data.txt" in cmd["reads"]
    assert writes_of(cmd)["/app/sorted.txt"]["lines_written"] == ["a", "b"]


def test_verifier_inspection_set_from_trace(tmp_path):
    test_py = """
        import os
        def test_answer():
            assert open("/app/answer.txt").read().strip() == "7"
        def test_junk_removed():
            assert not os.path.exists("/app/junk.txt")
    """
    traj = run_episode(tmp_path, ["echo 7 > /app/answer.txt", "rm /app/junk.txt", "ls"], test_py=test_py,
                       files={"junk.txt": "x\n"})
    verifier = traj["verifier"]
    assert verifier["reward"] == 1.0 and verifier["reward_source"] == "reward.txt"
    assert verifier["E_source"] == "trace"
    how = {d["record"]: d["how"] for d in verifier["E_detail"]}
    assert how["/app/answer.txt"] == "read"
    assert how["/app/junk.txt"] == "missing"
    assert not any(r.startswith(("/tests", "/logs", "/usr")) for r in verifier["E"])
    assert verifier["tests"] == {"test_answer": True, "test_junk_removed": True}


def test_background_server_answers_the_verifier(tmp_path):
    test_py = """
        import urllib.request
        def test_served():
            body = urllib.request.urlopen("http://127.0.0.1:18123/page.txt", timeout=5).read()
            assert body == b"served\\n"
    """
    traj = run_episode(tmp_path, [
        "python3 -m http.server 18123 --bind 127.0.0.1 --directory /app >/dev/null 2>&1 &",
        "echo served > /app/page.txt",
        "for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 18123))' "
        "2>/dev/null && break; sleep 0.1; done",
    ], test_py=test_py)
    server = traj["commands"][0]
    assert [p["name"] for p in server["processes_started"]] == ["python3"]
    assert server["ports_bound"] == ["tcp:18123"]
    assert traj["verifier"]["reward"] == 1.0
    assert "tcp:18123" in traj["verifier"]["E"]
    assert "/app/page.txt" in traj["verifier"]["E"]  # read by the agent's server while answering the verifier
    assert {"port": "tcp:18123", "owner": 0} in traj["final"]["listening_ports"]


def test_pkill_of_an_agent_server(tmp_path):
    traj = run_episode(tmp_path, [
        "python3 -m http.server 18124 --bind 127.0.0.1 >/dev/null 2>&1 &",
        "sleep 0.5; pkill -f 'http.server 18124'; sleep 0.2",
    ])
    pkill = traj["commands"][1]
    assert [(p["name"], p["owner"]) for p in pkill["processes_killed"]] == [("python3", 0)]
    assert traj["final"]["alive_processes"] == []


def test_command_that_never_returns_is_interrupted(tmp_path):
    traj = run_episode(tmp_path, ["sleep 1000", "echo still-here"], timeout_s=2)
    sleep, echo = traj["commands"]
    assert sleep["timed_out"] is True and sleep["exit_code"] is None and sleep["recovery"][0] == "C-c"
    assert echo["observation"] == "still-here\n" and echo["exit_code"] == 0


def test_command_eating_stdin_is_recovered(tmp_path):
    traj = run_episode(tmp_path, ["cat", "python3", "echo ok"], timeout_s=2)
    assert [c["timed_out"] for c in traj["commands"]] == [True, True, False]
    assert traj["commands"][2]["observation"] == "ok\n"


def test_crashing_verifier_is_recorded_not_raised(tmp_path):
    traj = run_episode(tmp_path, ["true"], test_py="def test_broken(:\n    pass\n")
    assert traj["verifier"]["reward"] == 0.0 and traj["verifier"]["reward_source"] == "reward.txt"
    assert "SyntaxError" in traj["verifier"]["output"]


def test_malformed_task_dir_is_a_clear_error(tmp_path):
    (tmp_path / "broken").mkdir()
    with pytest.raises(TaskFormatError, match="instruction.md"):
        load_task(tmp_path / "broken")


@pytest.mark.parametrize("name", ["offline-verifier", "weighted-sum", "write-answer"])
def test_the_fixture_tasks_oracles_score_1_in_the_judges_own_process_tree(name, tmp_path, wheel_cache):
    # wheel_cache: their builds and verifiers install from it (pyyaml, uv); filled here, not left to the user
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "depgpo.cli", "run-episode", str(FIXTURE_TASKS / name), "--oracle",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    verifier = json.loads((out / "trajectory.json").read_text())["verifier"]
    assert verifier["reward"] == 1.0 and verifier["tampering"] == [] and verifier["error"] is None, verifier


def test_cli_oracle_run(tmp_path):
    task = make_harbor_task(tmp_path, "answer", instruction="Write 5 to /app/answer.txt.",
                            test_py="def test_answer():\n    assert open('/app/answer.txt').read().strip() == '5'\n",
                            solve_sh="#!/bin/bash\necho 5 > /app/answer.txt\n")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "depgpo.cli", "run-episode", str(task), "--oracle", "--out",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    traj = json.loads((out / "trajectory.json").read_text())
    assert traj["verifier"]["reward"] == 1.0
    assert "/app/answer.txt" in traj["verifier"]["E"]


def test_cli_rejects_bad_commands_file(tmp_path):
    task = make_harbor_task(tmp_path, "t", instruction="x", test_py=PASSING_TEST)
    bad = tmp_path / "cmds.json"
    bad.write_text('{"not": "a list"}')
    proc = subprocess.run([sys.executable, "-m", "depgpo.cli", "run-episode", str(task), "--commands", str(bad),
                           "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "cmds.json" in proc.stderr and "JSON list of command strings" in proc.stderr


def test_dockerfile_env_reaches_the_shell_but_term_stays_dumb(tmp_path):
    task = load_task(make_harbor_task(tmp_path, "env", instruction="x", test_py=PASSING_TEST,
                                      dockerfile_extra="ENV GREETING=hello TERM=xterm-256color\n"))
    with Episode(task, EpisodeConfig(command_timeout_s=20), out_dir=tmp_path / "out") as ep:
        record = ep.run_command('echo "$GREETING $TERM"')
    assert record["observation"].strip() == "hello dumb"  # escape codes would garble observations


def test_a_workdir_inside_home_is_part_of_the_home_mount(tmp_path):
    # Before, the /home mount hid a separate /home/builder mount: the shell started in a missing directory.
    task = load_task(make_harbor_task(tmp_path, "wd", instruction="x", test_py=PASSING_TEST,
                                      files={"notes.txt": "seeded\n"},
                                      dockerfile_extra="WORKDIR /home/builder\nCOPY notes.txt notes.txt\n"))
    with Episode(task, EpisodeConfig(command_timeout_s=20), out_dir=tmp_path / "out") as ep:
        pwd, cat = ep.run_command("pwd"), ep.run_command("cat notes.txt > copy.txt; cat copy.txt")
    assert pwd["observation"].strip() == "/home/builder" and cat["observation"].strip() == "seeded"
    assert [w["path"] for w in cat["writes"]] == ["/home/builder/copy.txt"]


def test_a_workdir_that_is_a_sandbox_mount_is_refused_with_the_reason(tmp_path):
    task = load_task(make_harbor_task(tmp_path, "wd", instruction="x", test_py=PASSING_TEST,
                                      dockerfile_extra="WORKDIR /logs\n"))
    with pytest.raises(ValueError, match="workdir '/logs'.*not / or a system directory itself.*outside /logs, /tests"):
        with Episode(task, EpisodeConfig(command_timeout_s=20), out_dir=tmp_path / "out"):
            pass
    assert "episode failed to start" in json.loads((tmp_path / "out" / "trajectory.json").read_text())["errors"][0]


def test_a_tab_in_a_command_is_a_tab_not_a_file_name_completion(tmp_path):
    """Terminal-Bench 2's write-compressor oracle writes Rust source with TABs in a heredoc: readline's completion
    turned `out<TAB>.push` into `dout.push` before the shell disabled it."""
    task = load_task(make_harbor_task(tmp_path, "tabs", instruction="x", test_py=PASSING_TEST))
    with Episode(task, EpisodeConfig(command_timeout_s=20), out_dir=tmp_path / "out") as ep:
        record = ep.run_command("cat <<'EOF' > /tmp/src.rs\n\tout\t.push(1);\nEOF\ncat -A /tmp/src.rs")
    assert record["observation"] == "^Iout^I.push(1);$\n"
