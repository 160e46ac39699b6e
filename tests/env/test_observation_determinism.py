"""Observations do not depend on load: real episodes, run several times with busy loops on the episode's CPUs, see
byte-identical observations (issue 51: 5 of 19 RL checkpoints differed between two runs of the tiny DAG, each time
first at an observation: a background job's output or notice on either side of the marker, and a timed-out REPL).

Without the prompt-gated marker and the job settling (shell.py), 4 of 8 runs of the job commands differed from the
first, and 7 of 8 of the REPL's (its answer to the marker line it ate carried the random nonce)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.sandbox.shell import _Output, timeout_notice
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.sandbox

RUNS = 5
JOBS = [
    "echo 151 & >> /app/count.txt",         # the tiny DAG's shapes: a job's output and notice raced the marker
    "rm /app/amber-8 & ls /app",
    "(sleep 0.05; echo late) &",            # output after a moment: still this command's
    "sleep 0.3 & echo x",
    "true",                                 # nothing of the jobs above is left over for it
]


@pytest.fixture
def load():
    """Two busy loops on each CPU the episode may use: it shares its CPU with them."""
    burn = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", burn, str(cpu)])
             for cpu in sorted(os.sched_getaffinity(0)) for _ in range(2)]
    yield
    for proc in procs:
        proc.kill()
        proc.wait()


def observations(tmp_path, commands, timeout_s):
    task = load_task(make_harbor_task(tmp_path, "t", instruction="Do it.", test_py="def test_ok():\n    pass\n",
                                      files={"amber-8": "a\n"}))
    with Episode(task, EpisodeConfig(command_timeout_s=timeout_s), out_dir=tmp_path / "out") as ep:
        return [ep.run_command(command, turn=turn) for turn, command in enumerate(commands)]


def identical_runs(tmp_path, commands, timeout_s):
    runs = [observations(tmp_path / str(i), commands, timeout_s) for i in range(RUNS)]
    seen = [[c["observation"] for c in run] for run in runs]
    differ = [i for i, obs in enumerate(seen) if obs != seen[0]]
    assert not differ, f"runs {differ} differ from run 0:\n" + "\n".join(json.dumps(obs) for obs in seen)
    return runs[0]


def test_background_jobs_land_before_their_marker_whatever_the_load(tmp_path, load):
    echo, rm, late, sleep, true = (c["observation"] for c in identical_runs(tmp_path, JOBS, 20.0))
    # Each job's output and its "Done" notice belong to the command that started it.
    assert echo == "[1] 7\n151\n[1]+  Done                    echo 151\n"
    assert rm == "[1] 8\ncount.txt\n[1]+  Done                    rm /app/amber-8\n"
    assert late.endswith("late\n[1]+  Done                    ( sleep 0.05; echo late )\n")
    assert sleep.endswith("x\n[1]+  Done                    sleep 0.3\n")
    assert true == ""


def test_a_timed_out_repl_shows_what_it_printed_then_fixed_words(tmp_path, load):
    commands = ["python3 > /app/report.txt", "echo after"]
    repl, after = identical_runs(tmp_path, commands, 1.0)
    # The REPL never read a harness keystroke before its deadline: its banner and prompt, then the fixed line.
    assert repl["observation"].startswith("Python 3.") and "SyntaxError" not in repl["observation"]
    assert repl["observation"].endswith(">>> \n" + timeout_notice(1.0))
    assert repl["timed_out"] and repl["exit_code"] is None and repl["recovery"] == ["C-c", "C-d"]
    assert after["observation"] == "after\n" and after["exit_code"] == 0


def test_a_forged_prompt_hint_neither_shows_nor_ends_the_command(tmp_path):
    forged = r"printf '\036DEPGPO-PROMPT 99\036'; sleep 0.3; echo done; exit 3"
    forge, unset, after = observations(tmp_path, [f"bash -c {forged!r}", "unset PROMPT_COMMAND", "echo ok"], 20.0)
    assert (forge["observation"], forge["exit_code"]) == ("done\n", 3)  # the nonce marker still decides the end
    # The hint cannot be switched off: the next command is still gated (no marker typed into it) and ends.
    assert "readonly variable" in unset["observation"] and unset["exit_code"] == 1
    assert (after["observation"], after["exit_code"]) == ("ok\n", 0)


def test_a_prompt_hint_split_across_reads_is_counted_once():
    hint = b"\x1eDEPGPO-PROMPT 12\x1e"
    for split in range(1, len(hint)):
        out = _Output()
        out.append(b"x\r\n" + hint[:split])
        out.append(hint[split:] + b"y")
        assert out.prompts == [(3 + len(hint), b"12")], split
