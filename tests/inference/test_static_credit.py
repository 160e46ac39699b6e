"""Static inference of command records (depgpo.inference) and the offline loaders (depgpo.inference.formats).

The expected records are what the traced sandbox reports for the same commands: paths absolute and normalised,
the lines a command wrote, deletions, and content hashes that only a real change alters.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depgpo.credit import CreditConfig, compute_credit
from depgpo.env.judging.verifier_source import extract_verifier_records
from depgpo.inference import ShellSimulator, infer_command_effects, infer_trajectory, load_trajectories, num_turns
from tests.helpers import DATA

OFFLINE = DATA / "offline"


def effects(text: str, cwd: str = "/app") -> dict:
    return infer_command_effects(text, cwd)[0]


def written(text: str, cwd: str = "/app") -> dict[str, dict]:
    return {write["path"]: write for write in effects(text, cwd)["writes"]}


def run_all(*texts: str, workdir: str = "/app") -> tuple[ShellSimulator, list[dict | None]]:
    shell = ShellSimulator(workdir)
    return shell, [shell.run(text, index) for index, text in enumerate(texts)]


# ---- redirections -----------------------------------------------------------------------------------------------

def test_truncating_redirect_writes_the_literal_content():
    write = written('echo "63841" > /app/answer.txt')["/app/answer.txt"]
    assert write["created"] and write["text"]
    assert write["lines_written"] == write["content_after"] == ["63841"]
    assert write["hash_after"].startswith("sha256:")


def test_append_is_an_edit_that_writes_only_the_new_lines():
    _, (first, second) = run_all("printf 'a\\nb\\n' > f.txt", "echo c >> f.txt")
    write = second["writes"][0]
    assert write == {**write, "path": "/app/f.txt", "created": False, "lines_written": ["c"],
                     "content_after": ["a", "b", "c"]}
    assert write["hash_after"] != first["writes"][0]["hash_after"]


def test_stderr_redirect_writes_unknown_content():
    write = written("python3 run.py 2> err.log")["/app/err.log"]
    assert write["text"] is False and write["content_after"] is None and write["lines_written"] == []
    assert write["hash_after"] == "unknown:0"


def test_both_streams_redirect_and_descriptor_duplication():
    assert set(written("echo hi &> both.log")) == {"/app/both.log"}
    assert written("echo hi &> both.log")["/app/both.log"]["content_after"] == ["hi"]
    assert set(written("make > build.log 2>&1")) == {"/app/build.log"}  # `2>&1` opens no file


def test_input_redirect_reads_and_dev_null_is_no_record():
    result = effects("sort < data.txt > /dev/null")
    assert result["reads"] == ["/app/data.txt"] and result["writes"] == []


def test_here_string_feeds_tee():
    assert written("tee /app/t.txt <<< 'hello world'")["/app/t.txt"]["content_after"] == ["hello world"]


# ---- heredocs -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "cat > /app/notes.md <<'EOF'\n# Title\nsome $text\nEOF",
    "cat <<'EOF' > /app/notes.md\n# Title\nsome $text\nEOF",
    'cat <<"EOF" >/app/notes.md\n# Title\nsome $text\nEOF',
])
def test_heredoc_body_is_the_written_content(text):
    write = written(text)["/app/notes.md"]
    assert write["lines_written"] == write["content_after"] == ["# Title", "some $text"]


def test_unquoted_heredoc_expands_known_variables_and_gives_up_on_the_rest():
    _, (_, known, unknown) = run_all("OUT=/app/out", "cat > $OUT/cfg <<EOF\nhome=$HOME \\$literal\nEOF",
                                     "cat > /app/date.txt <<EOF\n$(date)\nEOF")
    assert known["writes"][0]["path"] == "/app/out/cfg"
    assert known["writes"][0]["content_after"] == ["home=/root $literal"]
    assert unknown["writes"][0]["content_after"] is None and unknown["writes"][0]["hash_after"] == "unknown:2"


def test_heredoc_with_tab_stripping_continuation_and_pipe():
    assert written("cat <<-EOF > t.txt\n\tindented\n\tEOF")["/app/t.txt"]["content_after"] == ["indented"]
    chained = effects("cat <<'EOF' > run.sh && bash run.sh\necho ran > ran.txt\nEOF")
    assert chained["reads"] == ["/app/run.sh"]
    assert [w["path"] for w in chained["writes"]] == ["/app/run.sh", "/app/ran.txt"]  # the script is followed
    piped = written("cat <<'EOF' | tee -a log.txt\nline one\nEOF")
    assert piped["/app/log.txt"]["content_after"] == ["line one"]


def test_interpreter_heredoc_has_no_file_records():
    result = effects("python3 <<'EOF'\nprint(63841)\nEOF")
    assert not any(result.values())


# ---- echo, printf, tee ------------------------------------------------------------------------------------------

def test_echo_and_printf_content():
    assert written("echo -n partial > p")["/app/p"]["content_after"] == ["partial"]
    assert written("echo -e 'a\\tb\\nc' > e")["/app/e"]["content_after"] == ["a\tb", "c"]
    assert written("printf '%s=%d\\n' x 1 y 2 > kv")["/app/kv"]["content_after"] == ["x=1", "y=2"]
    assert written("printf '%05.1f|%-3s|\\n' 3.14159 ab > fmt")["/app/fmt"]["content_after"] == ["003.1|ab |"]


def test_non_literal_echo_content_is_unknown():
    write = written("echo $RESULT > r.txt")["/app/r.txt"]
    assert write["text"] is False and write["content_after"] is None


def test_tee_writes_its_input_and_tee_a_appends():
    _, (_, appended) = run_all("echo one | tee f.txt", "echo two | tee -a f.txt other.txt")
    by_path = {w["path"]: w for w in appended["writes"]}
    assert by_path["/app/f.txt"]["content_after"] == ["one", "two"]
    assert by_path["/app/f.txt"]["lines_written"] == ["two"]
    assert by_path["/app/other.txt"]["content_after"] == ["two"]


# ---- file commands ----------------------------------------------------------------------------------------------

def test_sed_in_place_reads_and_writes_unknown_content():
    result = effects("sed -i 's/foo/bar/g' conf.ini")
    assert result["reads"] == ["/app/conf.ini"]
    assert result["writes"][0]["path"] == "/app/conf.ini" and result["writes"][0]["content_after"] is None
    assert not result["writes"][0]["created"]  # sed reads it first, so it existed
    assert effects("sed -n '1,3p' conf.ini")["writes"] == []


def test_cp_carries_content_and_mv_deletes_its_source():
    _, (_, copied, moved) = run_all("echo data > a.txt", "cp a.txt b.txt", "mv b.txt /app/dir/")
    assert copied["reads"] == ["/app/a.txt"] and copied["writes"][0]["content_after"] == ["data"]
    assert moved["reads"] == ["/app/b.txt"] and moved["deletions"] == ["/app/b.txt"]
    assert moved["writes"][0]["path"] == "/app/dir/b.txt"
    assert moved["writes"][0]["hash_after"] == copied["writes"][0]["hash_after"]


def test_cp_of_unknown_content_keeps_one_hash():
    _, (_, copied) = run_all("python3 gen.py > raw.bin", "cp raw.bin copy.bin")
    assert copied["writes"][0]["hash_after"] == "unknown:0"  # same bytes as raw.bin right after command 0


def test_rm_recursive_deletes_what_the_directory_holds():
    _, (_, removed, again) = run_all("mkdir -p out && echo 1 > out/a && echo 2 > out/b", "rm -rf out", "rm -f out/a")
    assert removed["deletions"] == ["/app/out/a", "/app/out/b", "/app/out"]
    assert again["deletions"] == []  # already gone


def test_a_file_created_and_removed_within_a_command_is_no_record():
    result = effects("echo tmp > scratch && cat scratch && rm scratch")
    assert result["writes"] == [] and result["deletions"] == [] and result["reads"] == ["/app/scratch"]


def test_touch_and_mkdir():
    made = written("mkdir -p /app/a/b && touch /app/a/b/empty")
    assert made["/app/a/b"]["hash_after"] == "dir" and made["/app/a/b"]["text"] is False
    assert made["/app/a/b/empty"]["content_after"] == [] and made["/app/a/b/empty"]["created"]
    _, (_, retouched) = run_all("echo keep > k", "touch k")
    assert retouched["writes"] == []  # timestamps only


def test_cp_recursive_copies_what_the_directory_holds():
    _, (made, copied) = run_all("mkdir -p src/lib && echo x > src/lib/a.py", "cp -r src dst && cp /dev/null /app/e")
    assert [w["path"] for w in made["writes"]] == ["/app/src/lib", "/app/src/lib/a.py"]  # parents: may exist
    assert copied["stats"] == ["/app/src", "/app/src/lib"] and copied["reads"] == ["/app/src/lib/a.py"]
    assert [w["path"] for w in copied["writes"]] == ["/app/dst", "/app/dst/lib", "/app/dst/lib/a.py"]
    assert copied["writes"][2]["content_after"] == ["x"]


def test_functions_run_where_they_are_called():
    _, (defined, called) = run_all("save() { echo \"$1\" > \"$OUT/v\"; echo done > \"$OUT/log\"; }",
                                   "OUT=/app/o; save 3")
    assert defined["writes"] == []
    assert [(w["path"], w["content_after"]) for w in called["writes"]] == [("/app/o/v", None),
                                                                           ("/app/o/log", ["done"])]


@pytest.mark.parametrize("text, script", [
    ("python3 solve.py --fast", "/app/solve.py"),
    ("python -u scripts/x.py", "/app/scripts/x.py"),
    ("bash setup.sh", "/app/setup.sh"),
    ("./run.sh arg", "/app/run.sh"),
    ("Rscript modify_bn.R", "/app/modify_bn.R"),
    ("node build.js", "/app/build.js"),
    ("source env.sh", "/app/env.sh"),
])
def test_interpreters_read_the_script_they_run(text, script):
    assert effects(text)["reads"] == [script]


@pytest.mark.parametrize("text", ["python3 -c 'print(1)'", "python3 -m pytest -q", "node -e 'x()'", "R -e 'q()'"])
def test_inline_code_reads_no_script(text):
    assert effects(text)["reads"] == []


def test_shell_scripts_with_known_text_are_followed():
    assert set(written("bash -c 'echo hi > /app/q.txt'")) == {"/app/q.txt"}
    assert set(written("bash -lc 'mkdir -p /app/w'")) == {"/app/w"}


@pytest.mark.parametrize("text, reads", [
    ("cat a b", ["/app/a", "/app/b"]),
    ("head -n 5 data.csv", ["/app/data.csv"]),
    ("tail -n 20 log.txt", ["/app/log.txt"]),
    ("less README", ["/app/README"]),
    ("grep -n -A 2 pattern src/main.py", ["/app/src/main.py"]),
    ("grep -e one -e two f1 f2", ["/app/f1", "/app/f2"]),
    ("rg TODO notes.md", ["/app/notes.md"]),
    ("awk -F, '{print $2}' table.csv", ["/app/table.csv"]),
    ("wc -l orders.csv", ["/app/orders.csv"]),
    ("diff old.txt new.txt", ["/app/old.txt", "/app/new.txt"]),
    ("sort -k 2 -t , x.csv", ["/app/x.csv"]),
    ("jq '.items[0]' data.json", ["/app/data.json"]),
    ("jq --arg name v '.[$name]' data.json", ["/app/data.json"]),
])
def test_read_commands(text, reads):
    result = effects(text)
    assert result["reads"] == reads and result["writes"] == []


@pytest.mark.parametrize("text, stats", [
    ("ls -la", ["/app"]),
    ("ls out /etc", ["/app/out", "/etc"]),
    ("test -f answer.txt", ["/app/answer.txt"]),
    ("[ -d build ] || echo missing", ["/app/build"]),
    ("[[ -s a && -x /app/b ]]", ["/app/a", "/app/b"]),
    ("find src -name '*.py'", ["/app/src"]),
])
def test_existence_checks_are_stats(text, stats):
    assert effects(text)["stats"] == stats


def test_pipeline_and_lists():
    result = effects("cat in.txt | grep -v '#' | sort > out.txt; wc -l out.txt || true")
    assert result["reads"] == ["/app/in.txt", "/app/out.txt"]
    assert written("cat in.txt | grep -v '#' | sort > out.txt")["/app/out.txt"]["content_after"] is None


def test_background_server_ports_and_processes():
    shell, (started, probed, connected, killed) = run_all(
        "nohup python3 -m http.server 8080 > /app/server.log 2>&1 &", "pgrep -f http.server",
        "curl -s http://localhost:8080/health", "pkill -f http.server")
    assert started["ports_bound"] == ["tcp:8080"]
    assert started["processes_started"] == [{"pid": None, "name": "python3", "alive_after": True}]
    assert probed["processes_probed"] == [{"pid": None, "name": "python3", "owner": 0}]
    assert connected["ports_connected"] == ["tcp:8080"]
    assert killed["processes_killed"] == [{"pid": None, "name": "python3", "owner": 0}]
    assert shell.processes == []


@pytest.mark.parametrize("text, after_write", [
    ("cat > f <<'EOF'\na\nEOF\ncat f", ["/app/f"]),                     # written whole, then printed back
    ("cat > x.py <<'EOF' && python3 x.py\nprint(1)\nEOF", ["/app/x.py"]),  # `&& next` on the heredoc's line
    ("printf 'a\\n' > f && cat f && [ -s f ]", ["/app/f"]),
    ("rm f; test -e f", ["/app/f"]),                                      # a deletion replaces too
    ("cat f; echo new > f", []),                                          # read before the write
    ("cat f | sort > f", []),                                             # side by side: read first, as in bash
    ("echo more >> f; cat f", []),                                        # an append replaces nothing
    ("python3 -m http.server 8080 & sleep 1; curl -s http://localhost:8080/", ["tcp:8080"]),  # its own server
    ("curl -s http://localhost:8080/; python3 -m http.server 8080 &", []),
])
def test_reads_after_the_commands_own_write_in_the_order_of_its_parts(text, after_write):
    """docs/credit-decisions.md#d-order: a record the command read only after it had replaced it itself."""
    _, (_, result) = run_all("printf 'old\\n' > f", text)
    assert result["reads_after_write"] == after_write
    assert set(after_write) <= set(result["reads"] + result["stats"] + result["ports_connected"])


def test_unparseable_commands_have_no_records_and_keep_the_directory():
    for text in ["echo 'unclosed > /app/x", "cat > /app/x <<'EOF'\nno end", "if then fi (("]:
        assert infer_command_effects(text, "/srv") == (infer_command_effects("", "/srv")[0], "/srv")
        assert ShellSimulator().run(text) is None


# ---- cd tracking ------------------------------------------------------------------------------------------------

def test_cd_persists_across_commands_and_within_and_chains():
    shell, (_, second, third) = run_all("cd /app/data && cat input.csv", "cat ../notes.txt", "cd .. ; cd - ; ls")
    assert second["reads"] == ["/app/notes.txt"]
    assert third["stats"] == ["/app/data"] and shell.cwd == "/app/data"


def test_subshells_pipelines_and_substitutions_do_not_leak_cd():
    shell, (result,) = run_all("(cd /tmp && touch t) ; echo $(cd /etc; cat hostname) | cd /var ; touch here")
    assert set(w["path"] for w in result["writes"]) == {"/tmp/t", "/app/here"}
    assert result["reads"] == ["/etc/hostname"] and shell.cwd == "/app"


def test_cd_to_an_unknown_directory_drops_relative_paths_until_an_absolute_cd():
    shell, (lost, _, found) = run_all("cd $WORK && echo x > rel.txt", "echo y > /app/abs.txt", "cd /app && cat rel.txt")
    assert lost["writes"] == [] and shell.cwd == "/app"
    assert found["reads"] == ["/app/rel.txt"]


def test_infer_command_effects_returns_the_new_directory():
    assert infer_command_effects("cd sub && cd ../other", "/app")[1] == "/app/other"
    assert infer_command_effects("cd", "/app")[1] == "/root"


# ---- trajectories: the examples of docs/credit.md#worked-examples ---------------------------------------------------------------------

ICS = "/app/meeting_scheduled.ics"
TABLE_14 = [  # constraints-scheduling, turns 4-10
    (4, f"cat <<'EOF' > {ICS}\nBEGIN:VCALENDAR\nVERSION:2.0\nBEGIN:VEVENT\nSUMMARY:Sync\nEND:VEVENT\n"
        "END:VCALENDAR\nEOF", ""),
    (5, f"cat {ICS}", "BEGIN:VCALENDAR\nVERSION:2.0\nBEGIN:VEVENT\nSUMMARY:Sync\nEND:VEVENT\nEND:VCALENDAR\n"),
    (6, f"rm {ICS}", ""),
    (7, f"printf 'BEGIN:VCALENDAR\\nVERSION:2.0\\nPRODID:-//planner//EN\\nEND:VCALENDAR\\n' > {ICS}", ""),
    (8, f"cat {ICS}", "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//planner//EN\nEND:VCALENDAR\n"),
    (10, f"cat <<'EOF' > {ICS}\nBEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//planner//EN\nBEGIN:VEVENT\n"
         "DTSTART:20240115T100000Z\nEND:VEVENT\nEND:VCALENDAR\nEOF", ""),
]


def table_14() -> dict:
    steps = [{"turn": turn, "text": text, "observation": observation} for turn, text, observation in TABLE_14]
    return infer_trajectory(steps, instruction=f"Schedule the meeting and write it to {ICS}.", num_turns=11)


def test_table_14_records_match_the_trace():
    commands = table_14()["commands"]
    assert [c["writes"][0]["created"] for c in commands if c["writes"]] == [True, True, False]
    assert [bool(c["writes"]) for c in commands] == [True, False, False, True, False, True]
    assert [c["reads"] for c in commands] == [[], [ICS], [], [], [ICS], []]
    assert [c["deletions"] for c in commands] == [[], [], [ICS], [], [], []]
    printf_lines = commands[3]["writes"][0]["lines_written"]
    assert printf_lines == ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//planner//EN", "END:VCALENDAR"]
    assert set(printf_lines) <= set(commands[5]["writes"][0]["content_after"])  # the rewrite keeps t7's lines


def test_table_14_final_state_and_evidence():
    trajectory = table_14()
    assert trajectory["source"] == "static" and trajectory["num_turns"] == 11
    assert trajectory["verifier"]["E"] == [ICS] and trajectory["verifier"]["E_source"] == "static"
    final = trajectory["final"]["files"][ICS]
    assert final["exists"] and final["lines"] == trajectory["commands"][5]["writes"][0]["content_after"]
    assert final["hash"] == trajectory["commands"][5]["writes"][0]["hash_after"]


def test_table_14_static_credit():
    result = compute_credit(table_14(), CreditConfig(beta=0.5), num_turns=11)
    assert [c.q for c in result.commands] == [0.0, 0.0, 0.0, 1.0, 0.0, 1.0]


def table_12(computing_command: str) -> dict:
    steps = [{"text": computing_command, "observation": "63841\n"},
             {"text": 'echo "63841" > /app/answer.txt', "observation": ""},
             {"text": "cat /app/answer.txt", "observation": "63841\n"}]
    return infer_trajectory(steps, instruction="Count the tokens of the dataset; write the count to /app/answer.txt.")


def test_table_12_records_match_the_trace():
    commands = table_12("python3 <<'EOF'\nprint(63841)\nEOF")["commands"]
    assert [(c["reads"], [w["path"] for w in c["writes"]]) for c in commands] == [
        ([], []), ([], ["/app/answer.txt"]), (["/app/answer.txt"], [])]
    assert commands[1]["writes"][0]["lines_written"] == ["63841"]


def test_table_12_static_credit():
    # The paper's t17 computes the count. (With the literal `print(63841)` of the command text, the credit core
    # reads the token as already known from that text, and t17 gets 0.)
    trajectory = table_12("python3 <<'EOF'\nprint(sum(len(l.split()) for l in open('/app/data.txt')))\nEOF")
    result = compute_credit(trajectory, CreditConfig(beta=0.5))
    assert [c.q for c in result.commands] == [0.5, 1.0, 0.0]


# ---- trajectories: evidence, scope, final -------------------------------------------------------------------

def test_evidence_from_verifier_source():
    source = '''
import glob, requests
ANSWER = "/app/answer.txt"
def test_outputs():
    assert open("/app/out/result.json").read()
    assert glob.glob("/app/reports/*.csv"), "no report in /app/reports/"
    assert requests.get("http://localhost:8080/health").ok
    subprocess.run(["/usr/bin/python3", "/tests/helper.py", f"/srv/data/{name}.txt"])
server_port = 9000
'''
    assert extract_verifier_records(source) == [
        "/app/answer.txt", "/app/out/result.json", "/app/reports/*.csv", "/app/reports", "/srv/data/*.txt",
        "tcp:8080", "tcp:9000"]


def test_evidence_falls_back_to_the_instruction_and_sets_the_scope():
    trajectory = infer_trajectory([{"text": "echo 1 > /tmp/out/a.txt && echo 2 > /var/b.txt"}],
                                  instruction="Write 1 to /tmp/out/a.txt. Then serve it on port 8000.")
    assert trajectory["verifier"]["E"] == ["/tmp/out/a.txt", "tcp:8000"]
    assert trajectory["tracked_roots"] == ["/app", "/tmp/out"]
    assert [w["path"] for w in trajectory["commands"][0]["writes"]] == ["/tmp/out/a.txt"]  # /var is not tracked


def test_verifier_source_wins_over_the_instruction_and_none_found_is_none():
    trajectory = infer_trajectory([], instruction="Write /app/a.txt", verifier_source="assert True")
    assert trajectory["verifier"]["E"] == [] and trajectory["verifier"]["E_source"] == "none"


def test_final_state_lists_written_deleted_and_evidence_files():
    steps = [{"text": "echo a > keep.txt && echo b > gone.txt"}, {"text": "rm gone.txt && ./gen.sh > made.bin"}]
    trajectory = infer_trajectory(steps, instruction="Check /app/keep.txt and /app/never.txt.")
    files = trajectory["final"]["files"]
    assert files["/app/keep.txt"]["lines"] == ["a"]
    assert files["/app/gone.txt"] == {"exists": False, "hash": None, "lines": None}
    assert files["/app/made.bin"] == {"exists": True, "hash": "unknown:1", "lines": None}
    assert files["/app/never.txt"]["exists"] is False
    assert trajectory["commands"][1]["reads"] == ["/app/gen.sh"]


def test_server_left_running_is_in_the_final_state():
    trajectory = infer_trajectory([{"text": "python3 -m http.server 8080 &"}, {"text": "curl localhost:8080"}],
                                  verifier_source="requests.get('http://localhost:8080')")
    assert trajectory["final"]["alive_processes"] == [{"pid": None, "name": "python3", "owner": 0}]
    assert trajectory["final"]["listening_ports"] == [{"port": "tcp:8080", "owner": 0}]
    assert [c.q for c in compute_credit(trajectory, CreditConfig(beta=0.5)).commands] == [1.0, 0.0]


def test_unparseable_commands_are_reported_not_raised():
    trajectory = infer_trajectory([{"text": "echo 'open"}, {"text": "echo ok > /app/ok"}])
    assert trajectory["errors"] == ["command 0: its text does not parse as shell; no records inferred"]
    assert trajectory["commands"][1]["writes"][0]["path"] == "/app/ok"


SHELL_FRAGMENTS = ["cp ", "mv ", "rm -rf ", "mkdir -p ", "cat ", "echo ", "printf '%s\\n' ", "tee -a ", "sed -i ",
                   "cd ", "bash -c ", "./s.sh ", "printf '%d' ", "printf '%5.2f %x %o %c %b' ", "printf %099999999d ", "7 ",
                   "0x1f ", "-3 ", "abc ", "source ", "python3 ", "pkill -f ", "ps ", "f() { ", "f; ", "X=",
                   "$X", "${X:-y}", "..", "/", "d/e", "/dev/null", "*", "~", "a", " ", "\n", "\t", "'", '"', "\\",
                   ">", ">>", "<", "<<<", "<<'EOF'\n", "<<-EOF\n", "\nEOF\n", "2>&1", "|", "&&", "||", ";", "&",
                   "(", ")", "{", "}", "$(", "`", "[ -f ", " ]", "\x00", "\u00ff", "\udc80"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(SHELL_FRAGMENTS), max_size=25).map("".join), max_size=5))
def test_arbitrary_command_text_never_raises(texts):
    shell = ShellSimulator()
    for index, text in enumerate(texts):
        result = shell.run(text, index)
        assert result is None or all(isinstance(write["path"], str) for write in result["writes"])


def test_pathological_nesting_degrades_to_no_records():
    assert ShellSimulator().run("(" * 3000 + "ls" + ")" * 3000) is None


# ---- adapters -----------------------------------------------------------------------------------------------

def test_chat_messages_list():
    (trajectory,) = load_trajectories(OFFLINE / "chat_single.json")
    assert trajectory["task"]["format"] == "chat" and num_turns(trajectory) == 4
    assert trajectory["instruction"].startswith("Count the rows of /app/data/orders.csv")
    commands = trajectory["commands"]
    assert [c["turn"] for c in commands] == [0, 1, 2]
    assert commands[1]["reads"] == ["/app/data/orders.csv"]  # the cd of the first call persists
    assert [c["exit_code"] for c in commands] == [None, 0, 0]
    assert commands[1]["observation"] == "4181 orders.csv\n"
    assert commands[2]["writes"][0]["content_after"] == ["4180"]


def test_chat_jsonl_batch():
    greet, broken, two_calls = load_trajectories(OFFLINE / "chat_batch.jsonl")
    assert greet["task"]["id"] == "greet-script" and greet["verifier"]["reward"] == 1.0
    # The editor call is a command too: its file effects are simulated through a shell equivalent (a view reads).
    assert [c["text"].split()[0] for c in greet["commands"]] == ["mkdir", "python3", "str_replace_editor"]
    assert greet["commands"][2]["reads"] == ["/app"] and greet["commands"][2]["observation"] == "/app\n/app/tools\n"
    assert greet["commands"][1]["observation"].startswith("<returncode>0")  # its own output, not the editor's
    assert greet["commands"][1]["exit_code"] == 0
    assert num_turns(broken) == 6 and [c["turn"] for c in broken["commands"]] == [1, 2, 3, 4]  # turn 0: bad JSON
    assert len(broken["errors"]) == 3 and all(not c["writes"] for c in broken["commands"])
    assert [c["turn"] for c in two_calls["commands"]] == [0, 0, 1]
    assert two_calls["commands"][1]["exit_code"] == 1
    assert two_calls["commands"][1]["writes"][0]["path"] == "/app/backup/config.ini"
    assert two_calls["commands"][2]["text"] == "bash -lc 'ls /app/backup'"


def _mutations(text: str, rng: random.Random) -> list[str]:
    cut = rng.randrange(len(text) + 1)
    return [text[:cut], text + " '", text + "\n<<EOF", "\x00\x1b[31m" + text[::-1], "", text + " | " * 3]


def test_many_damaged_chat_trajectories_load(tmp_path):
    rng = random.Random(7)
    conversations = [json.loads(line) for line in (OFFLINE / "chat_batch.jsonl").read_text().splitlines()]
    conversations.append({"messages": json.loads((OFFLINE / "chat_single.json").read_text())})
    variants = []
    for conversation in conversations:
        for message in (m for m in conversation["messages"] if m.get("tool_calls")):
            for call in message["tool_calls"]:
                arguments = call["function"]["arguments"]
                text = json.loads(arguments) if isinstance(arguments, str) and arguments.endswith("}") else {}
                for damaged in _mutations(str(text.get("command", text.get("cmd", ""))), rng):
                    variant = json.loads(json.dumps(conversation))
                    target = next(m for m in variant["messages"] if m.get("tool_calls") == message["tool_calls"])
                    target["tool_calls"][0]["function"]["arguments"] = json.dumps({"command": damaged})
                    variants.append(variant)
        variants.append({"messages": conversation["messages"] + [
            {"role": "assistant", "tool_calls": [{"function": {"name": "bash", "arguments": "{not json"}}, "oops"]},
            {"role": "tool", "content": None}, 42]})
    path = tmp_path / "damaged.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in variants) + "\n")
    trajectories = load_trajectories(path)
    assert len(trajectories) == len(variants) >= 20
    assert all(t["schema_version"] == 1 and t["source"] == "static" for t in trajectories)


def test_terminus2_conversation():
    (trajectory,) = load_trajectories(OFFLINE / "terminus2.json")
    assert trajectory["task"] == {"id": "tabs-to-spaces", "path": None, "format": "terminus2"}
    assert trajectory["instruction"].startswith("Replace every tab in /app/notes.txt")
    assert num_turns(trajectory) == 5
    commands = trajectory["commands"]
    assert [(c["turn"], c["text"].split("\n")[0]) for c in commands] == [
        (0, "ls -la /app"), (0, "head -n 5 notes.txt"), (1, "sed 's/\\t/    /g' notes.txt > notes_clean.txt"),
        (3, "cat > check.sh <<'EOF'"), (3, "bash check.sh")]  # C-c dropped; turn 2 was not JSON
    assert commands[0]["observation"] == "" and "buy\tmilk" in commands[1]["observation"]
    assert commands[2]["writes"][0]["path"] == "/app/notes_clean.txt"
    assert commands[4]["reads"] == ["/app/check.sh", "/app/notes_clean.txt"]  # the script's grep is followed
    assert trajectory["verifier"]["E"] == ["/app/notes.txt", "/app/notes_clean.txt"]


def test_native_trajectory_as_is_or_reinferred():
    path = OFFLINE / "native_traced.json"
    (as_is,) = load_trajectories(path)
    assert as_is == json.loads(path.read_text())
    (static,) = load_trajectories(path, static=True)
    assert static["source"] == "static" and static["verifier"] == as_is["verifier"]
    assert static["task"] == as_is["task"] and static["tracked_roots"] == ["/app"]
    assert static["commands"][0]["writes"][0]["lines_written"] == as_is["commands"][0]["writes"][0]["lines_written"]
    # make.py's text is known (its heredoc): its open('/app/out.txt', 'w') is a write of unknown content
    assert [(w["path"], w["hash_after"]) for w in static["commands"][1]["writes"]] == [("/app/out.txt", "unknown:1")]
    assert static["commands"][2]["reads"] == ["/app/out.txt"]


def test_list_of_native_trajectories(tmp_path):
    native = json.loads((OFFLINE / "native_traced.json").read_text())
    path = tmp_path / "two.json"
    path.write_text(json.dumps([native, native]))
    assert load_trajectories(path) == [native, native]
    assert num_turns(native) == 3


@pytest.mark.parametrize("content, problem", [
    (None, "cannot read"),
    ("", "empty"),
    ("{not json", "not JSON"),
    ('{"a": 1}\n{oops', "line 2 is not JSON"),
    ('{"schema_version": "ATIF-v1.2", "steps": {}}', "field 'steps' is dict, not a list"),
    ("[1, 2]", "unknown shape"),
])
def test_bad_files_raise_value_error_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "input.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=problem) as raised:
        load_trajectories(path)
    assert str(path) in str(raised.value) and "expected" in str(raised.value)
