"""Parentage in the verifier's trace (judging/verifier_processes.py), on lines in the shapes strace 6.1 prints with
the sandbox's flags: the orders the real tracer produces under load, which a live episode shows only by chance.
Live attacks through the same rules are in test_verifier_tool_attacks.py.

One seam: which files the agent made is given here (`/app/agent-*`), not computed from an episode's layers.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from depgpo.env.judging import verifier_processes
from depgpo.env.judging.verifier_processes import VerifierProcesses
from tests.env.test_verifier_startup_reads import clone, execve, exited, line

MARK = "/.depgpo_mark/-1/0/5f0c"
SCRIPT = 10
REWARD = "/logs/verifier/reward.txt"


class Judged(VerifierProcesses):
    def _agent_made(self, path: str, code_only: bool) -> bool:
        return path.startswith("/app/agent-")


def judge(tmp_path: Path, *lines: str) -> VerifierProcesses:
    (tmp_path / "verifier").mkdir(exist_ok=True)
    (tmp_path / "verifier" / "reward.txt").write_text("1\n")
    trace = tmp_path / "trace.log"
    mark = line(SCRIPT, f'newfstatat(AT_FDCWD</app>, "{MARK}", 0x7ffc0fa244f0, 0) = -1 ENOENT (No such file or '
                        'directory)')
    trace.write_text("\n".join([mark, *lines]) + "\n")
    return Judged(trace, MARK, 0, SimpleNamespace(verifier_logs=tmp_path), {}, Path("/"))


def writes_reward(pid: int) -> str:
    return line(pid, f'openat(AT_FDCWD</app>, "{REWARD}", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3<{REWARD}>')


def test_the_scripts_own_write_is_the_verifiers(tmp_path):
    assert judge(tmp_path, clone(SCRIPT, 11), execve(11, "/usr/bin/true", "true"), exited(11),
                 writes_reward(SCRIPT)).findings == []


def test_a_reused_pid_is_a_new_process_and_takes_its_parents_taint(tmp_path):
    """pid 11 was an untainted `true`; the agent's program vforks a child that gets 11 again, printed (as vfork
    children are) before the vfork returns."""
    judged = judge(tmp_path, clone(SCRIPT, 11), execve(11, "/usr/bin/true", "true"), exited(11),
                   clone(SCRIPT, 12), execve(12, "/app/agent-tool", "agent-tool"),
                   line(12, "vfork( <unfinished ...>"), execve(11, "/usr/bin/sh", "sh"), writes_reward(11),
                   exited(11), line(12, "<... vfork resumed>) = 11"), exited(12), writes_reward(SCRIPT))
    assert [f["kind"] for f in judged.findings] == ["reward_by_agent_code"]


def test_a_process_no_clone_names_counts_as_the_agents(tmp_path):
    """In a PID namespace of its own a clone returns that namespace's pid (2), while strace prints the real one."""
    judged = judge(tmp_path, clone(SCRIPT, 11), execve(11, "/usr/bin/unshare", "unshare", "-Upf", "sh"),
                   clone(11, 12), execve(12, "/usr/bin/sh", "sh"), clone(12, 2), execve(13, "/usr/bin/sh", "sh"),
                   writes_reward(13), exited(13), writes_reward(SCRIPT))
    assert [f["kind"] for f in judged.findings] == ["reward_by_agent_code"]


def test_a_thread_that_execs_leaves_its_process_the_verifiers(tmp_path):
    """`+++ superseded by execve` is not an exit: the pid lives on, running the new program."""
    judged = judge(tmp_path, clone(SCRIPT, 11), line(11, "clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|"
                                                         "CLONE_THREAD|CLONE_SYSVSEM, exit_signal=0}, 88) = 12"),
                   line(12, 'execve("/usr/bin/python3", ["python3"], 0x55efb2aaed80 /* 18 vars */ <unfinished ...>'),
                   line(11, "+++ superseded by execve in pid 12 +++"), line(11, "<... execve resumed>) = 0"),
                   writes_reward(11))
    assert judged.findings == []


def test_an_orphan_held_back_too_long_is_read_as_the_agents_and_stays_so(tmp_path, monkeypatch):
    monkeypatch.setattr(verifier_processes, "ORPHAN_BYTES", 200)
    judged = judge(tmp_path, line(SCRIPT, "vfork( <unfinished ...>"),
                   *(line(11, f'newfstatat(AT_FDCWD</app>, "/app/f{i}", 0x7ffc0fa244f0, 0) = -1 ENOENT (No such '
                                 'file or directory)') for i in range(4)),
                   line(SCRIPT, "<... vfork resumed>) = 11"), writes_reward(11))
    assert [f["kind"] for f in judged.findings] == ["reward_by_agent_code"]


@pytest.mark.parametrize("order", ["clone first", "child first"])
def test_an_agent_programs_child_is_the_agents_in_either_order(order, tmp_path):
    child = [execve(12, "/usr/bin/sh", "sh"), writes_reward(12)]
    spawn = [clone(11, 12), *child] if order == "clone first" else [
        line(11, "clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>"),
        *child, line(11, "<... clone resumed>, child_tidptr=0x7f0b38ccca10) = 12")]
    judged = judge(tmp_path, clone(SCRIPT, 11), execve(11, "/app/agent-tool", "agent-tool"), *spawn,
                   writes_reward(SCRIPT))
    assert [f["kind"] for f in judged.findings] == ["reward_by_agent_code"]


@pytest.mark.parametrize("program", ["/usr/bin/unshare", "/app/agent-tool"])
def test_a_clone_in_a_pid_namespace_names_its_child_by_the_tracers_pid(program, tmp_path):
    """With --decode-pids=pidns: the verifier's own namespace stays the verifier's, the agent's the agent's."""
    judged = judge(tmp_path, clone(SCRIPT, 11), execve(11, program, "x"), clone(11, 12),
                   line(12, "vfork( <unfinished ...>"), execve(13, "/usr/bin/sh", "sh"), writes_reward(13),
                   line(12, "<... vfork resumed>) = 2 /* 13 in strace's PID NS */"), exited(13), exited(12))
    assert [f["kind"] for f in judged.findings] == ([] if program == "/usr/bin/unshare" else ["reward_by_agent_code"])
