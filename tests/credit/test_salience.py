"""Salience on outputs of the shapes real agent logs show (credit/salience.py, docs/credit-decisions.md#d-incidental).

Each false or missing credit found on real Terminal-Bench trajectories has a regression test here, rebuilt from
commands this project wrote in the same shape: the clock in `ls -la`, a build date in a version banner, and a
value a script computed after `cat` had displayed it.
"""

from __future__ import annotations

import pytest

from depgpo.credit import CreditConfig
from depgpo.credit.salience import INCIDENTAL_RULES, displays_only, revealing_tokens
from tests.credit.test_credit_spec import credits, episode
from tests.helpers.credit_examples import command, text_write

LS_LA = """total 24
drwxr-xr-x 1 root root 4096 Dec  1 08:05 .
drwxr-xr-x 1 root root 4096 Dec  1 08:04 ..
-rw-r--r-- 1 root root  310 Jan 17  2024 access.log
-rw-r--r-- 1 root root 1287 2026-12-01 08:05:33.000000000 +0000 notes.txt
"""


def _write(turn: int, text: str, path: str, line: str) -> dict:
    return command(turn, text, writes=(text_write(path, [line], [line]),))


def test_a_clock_time_in_ls_does_not_support_a_regex_that_contains_its_digits():
    trajectory = episode([
        command(0, "ls -la /app", observation=LS_LA, stats=("/app",)),
        _write(1, r"echo '^\d{2}:05 ERROR' > /app/pattern.txt", "/app/pattern.txt", r"^\d{2}:05 ERROR"),
    ], ["/app/pattern.txt"])
    assert credits(trajectory) == [0.0, 1.0]
    assert credits(trajectory, incidental_rules=()) == [0.5, 1.0]  # the paper's salience alone: 05 is revealed


def test_ls_still_reveals_the_names_it_lists():
    trajectory = episode([
        command(0, "ls -la /app", observation=LS_LA, stats=("/app",)),
        _write(1, "grep -c ERROR access.log > /app/count.txt", "/app/count.txt", "3"),
    ], ["/app/count.txt"])
    assert credits(trajectory) == [0.5, 1.0]


def test_the_build_date_of_a_version_banner_supports_nothing():
    banner = "OpenSSL 3.5.1 1 Jul 2026 (Library: OpenSSL 3.5.1 1 Jul 2026)\n"
    trajectory = episode([
        command(0, "openssl version", observation=banner),
        _write(1, "openssl req -x509 -days 365 -subj /CN=app -out /app/cert.pem", "/app/cert.pem",
               "Not Before: Jul  1 00:00:00 2026 GMT"),
    ], ["/app/cert.pem"])
    assert credits(trajectory) == [0.0, 1.0]
    assert credits(trajectory, incidental_rules=()) == [0.5, 1.0]


def test_a_value_a_script_computed_credits_the_script_over_an_earlier_display():
    calendar = "BEGIN:VEVENT\nDTSTART:20240117T110000Z\nSUMMARY:standup\nEND:VEVENT\n"
    trajectory = episode([
        command(0, "cat alice_calendar.ics", observation=calendar, reads=("/app/alice_calendar.ics",)),
        command(1, "python3 /tmp/find_slot.py", observation="20240117T110000Z\n"),
        _write(2, "echo 20240117T110000Z > /app/slot.txt", "/app/slot.txt", "20240117T110000Z"),
    ], ["/app/slot.txt"])
    assert credits(trajectory) == [0.0, 0.5, 1.0]
    assert credits(trajectory, prefer_computed=False) == [0.5, 0.0, 1.0]  # the first reveal, as configured before
    assert credits(trajectory, reveal_once=False) == [0.5, 0.5, 1.0]


def test_a_computing_first_reveal_keeps_its_credit():
    trajectory = episode([
        command(0, "python3 count.py", observation="63841\n"),
        command(1, "python3 count.py --check", observation="63841\n"),
        _write(2, "echo 63841 > /app/answer.txt", "/app/answer.txt", "63841"),
    ], ["/app/answer.txt"])
    assert credits(trajectory) == [0.5, 0.0, 1.0]


@pytest.mark.parametrize(("rule", "command_text", "output", "incidental", "kept"), [
    ("clock_time", "date", "Tue Dec  1 22:13:21 UTC 2026", {"22", "13", "21", "2026"}, set()),
    ("clock_time", "curl -s localhost:8080/h", "up at 127.0.0.1:8080 (x.py:12:5)", set(), {"127.0.0.1", "8080"}),
    ("date", "git log -1", "Date:   Wed Jan 17 11:00:00 2024 +0000\n    fix parser_v2", {"17", "2024"},
     {"parser_v2"}),
    ("duration", "pytest -q", "5 passed in 0.12s\nreal\t0m0.031s", {"0.12s", "0m0.031s"}, set()),
    ("pid", "python3 server.py &", "[1] 48213\nserving on port 5000", {"48213"}, {"5000"}),
    ("pid", "ps aux", "USER  PID %CPU\nroot  4123  0.0\nroot  4188  0.0", {"4123", "4188"}, set()),
    ("memory_address", "python3 -c 'print(obj)'", "<Model object at 0x7f3a2c1b9e50>", {"0x7f3a2c1b9e50"}, set()),
    ("ls_long", "ls -l", "drwxr-xr-x 20 root root 4096 Jan 17 2024 model_v3\n-rw-r--r-- 1 root root 20480 Jan 17"
     " 2024 data.bin", {"20", "4096"}, {"model_v3", "20480", "data.bin"}),  # a file's size may be the answer
    ("pid", "ps -ef", "UID PID PPID C STIME TTY TIME CMD\nroot 4242 1 0 10:58 ? 00:00:00 python3 server.py",
     {"4242"}, {"server.py"}),
    ("version_banner", "python3 --version 2>&1 && gcc --version", "Python 3.11.2\ngcc (Debian 12.2.0-14) 12.2.0",
     {"3.11.2", "12.2.0"}, set()),
])
def test_each_rule_blanks_what_it_names_and_only_that(rule, command_text, output, incidental, kept):
    tokens = revealing_tokens(output, command_text, CreditConfig())
    assert not tokens & incidental and kept <= tokens
    assert incidental <= revealing_tokens(output, command_text, CreditConfig(incidental_rules=()))
    others = tuple(name for name in INCIDENTAL_RULES if name != rule)
    if rule not in ("clock_time", "date"):  # a date's parts are also clock-shaped and the other way round
        assert incidental & revealing_tokens(output, command_text, CreditConfig(incidental_rules=others))


@pytest.mark.parametrize(("text", "displays"), [
    ("cat a.txt | grep -n x", True), ("ls -la /app && head -3 data.csv", True), ("sed -n 1,5p f", True),
    ("if [ -f x ]; then cat x; fi", True), ("python3 /tmp/find_slot.py", False), ("./run.sh", False),
    ("cat data.csv | python3 -c 'import sys'", False), ("python3 <<'EOF'\nprint(1)\nEOF", False),
])
def test_displays_only(text, displays):
    assert displays_only(text) is displays


def test_unknown_rule_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown incidental_rules.*clock_time"):
        CreditConfig(incidental_rules=("clock",))


def _find_slot_episode() -> dict:
    calendar = "BEGIN:VEVENT\nDTSTART:20240117T110000Z\nSUMMARY:standup\nEND:VEVENT\n"
    script = ["from slots import free_slots", "print(free_slots('alice_calendar.ics')[0])"]
    return episode([
        command(0, "cat alice_calendar.ics", observation=calendar, reads=("/app/alice_calendar.ics",)),
        command(1, "cat > /tmp/find_slot.py <<'EOF' … EOF", writes=(text_write("/tmp/find_slot.py", script, script),)),
        command(2, "python3 /tmp/find_slot.py", observation="20240117T110000Z\n", reads=("/tmp/find_slot.py",)),
        _write(3, "echo 20240117T110000Z > /app/slot.txt", "/app/slot.txt", "20240117T110000Z"),
    ], ["/app/slot.txt"])


def test_the_script_in_tmp_that_computed_the_answer_shares_its_credit():
    """/tmp is outside the tracked roots, but the script one command wrote there and the next ran is a dependency
    between two of the agent's commands: tracked (track_handoffs), and its run passes β · q back to it."""
    trajectory = _find_slot_episode()
    assert credits(trajectory) == [0.0, 0.25, 0.5, 1.0]
    assert credits(trajectory, track_handoffs=False) == [0.0, 0.0, 0.5, 1.0]
    assert credits(trajectory, credit_read_sources=False) == [0.0, 0.0, 0.5, 1.0]


def test_static_inference_keeps_a_handoff_outside_the_tracked_roots():
    from depgpo.credit import compute_credit
    from depgpo.inference import infer_trajectory

    steps = [{"text": "cat > /tmp/find_slot.py <<'EOF'\nfrom slots import free_slots\nprint(free_slots()[0])\nEOF"},
             {"text": "python3 /tmp/find_slot.py", "observation": "20240117T110000Z\n"},
             {"text": "echo 20240117T110000Z > /app/slot.txt"},
             {"text": "echo scratch > /tmp/unused.txt"}]
    trajectory = infer_trajectory(steps, verifier_source="cat /app/slot.txt")
    assert [w["path"] for w in trajectory["commands"][0]["writes"]] == ["/tmp/find_slot.py"]
    assert trajectory["commands"][1]["reads"] == ["/tmp/find_slot.py"]
    assert trajectory["commands"][3]["writes"] == []  # written, never read: out of scope as before
    assert [c.q for c in compute_credit(trajectory).commands] == [0.25, 0.5, 1.0, 0.0]


def test_a_line_of_code_that_mentions_pid_is_no_ps_table():
    """Seen on the corpus: `nl -ba` of a file whose code says PID lost its line numbers to the pid rule."""
    listing = "   286\t# PID of the worker\n   287\tpid = os.getpid()\n   288\treturn pid\n"
    assert {"286", "287", "288"} <= revealing_tokens(listing, "nl -ba worker.py | sed -n '280,300p'", CreditConfig())


def test_an_identifier_a_traceback_shows_again_keeps_the_display_as_its_source():
    trajectory = episode([
        command(0, "cat core.py", observation="def check(self):\n    self._required_columns = []\n",
                reads=("/app/core.py",)),
        command(1, "python3 repro.py", observation="AttributeError: _required_columns\n"),
        _write(2, "sed -i s/x/y/ core.py", "/app/core.py", "self._required_columns = ['time']"),
    ], ["/app/core.py"])
    assert credits(trajectory)[:2] == [0.5, 0.0]  # only values (tokens with a digit) are "computed"


@pytest.mark.parametrize(("command_text", "output", "kept"), [
    ("grep ERROR logs/auth.log", "2024-03-10 10:15:25 ERROR login failed for 10.0.0.7", {"2024-03-10", "10.0.0.7"}),
    ("pytest -v tests/", "tests/test_a.py::test_parse_v2 PASSED [ 50%]", {"tests/test_a.py", "test_parse_v2"}),
    ("readelf -h ./crackme", "Entry point address: 0x0000000000401000", {"0x0000000000401000"}),
])
def test_task_data_that_looks_incidental_is_kept(command_text, output, kept):
    """From the adversarial review: a log's timestamps shown by grep, pytest's -v (not a version flag), an entry
    point that readelf prints."""
    assert kept <= revealing_tokens(output, command_text, CreditConfig())


def test_an_index_at_the_end_of_a_line_is_no_job_number():
    """Seen on the corpus: `names = split_list[0]` and the next line's number 779 read as the job `[0] 779`."""
    listing = "   778\t    names = split_list[0]\n   779\t    else:\n"
    assert {"778", "779"} <= revealing_tokens(listing, "nl -ba symbol.py | sed -n '770,790p'", CreditConfig())
