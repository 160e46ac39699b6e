"""TraceParser on real strace output: a bash under the sandbox's exact strace flags, driven like the harness drives it
(send a command, then its mark; feed the growing log; read the summary once the mark shows up)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depgpo.env.tracing.strace_flags import strace_argv
from depgpo.env.tracing.trace_parser import TraceParser
from depgpo.env.tracing.trace_state import PATH_KINDS, ProcInfo, SegmentEffects

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


class TracedShell:
    """One bash --norc under strace_argv(), fed commands on stdin and followed by a TraceParser."""

    def __init__(self, root: Path):
        self.workdir = root / "app"
        self.workdir.mkdir()
        (root / "home").mkdir()
        log = root / "trace.log"
        log.touch()
        self._log = log.open()
        tracked = str(self.workdir)
        self.parser = TraceParser(keep_path=lambda path: path == tracked or path.startswith(tracked + "/"))
        self._shell = subprocess.Popen(
            strace_argv(str(log)) + ["bash", "--norc", "--noprofile"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "HOME": str(root / "home"), "LC_ALL": "C"})
        self._next_index = 0
        self._send("test -e /.depgpo_mark/-1/$?")
        self._wait_for_mark(-1)

    def path(self, name: str) -> str:
        return str(self.workdir / name)

    def resend_mark(self, index: int) -> None:
        """What the harness's recovery does when it is unsure a mark got through."""
        self._send(f"test -e /.depgpo_mark/{index}/$?")

    def run(self, command: str) -> SegmentEffects:
        index = self._run_with_mark(command)
        return self.parser.summary(index)

    def verify(self, command: str) -> SegmentEffects:
        self._feed_available()
        self.parser.begin_verifier()
        self._run_with_mark(command)  # marks no longer switch segments: this one only says the verifier finished
        return self.parser.summary("verifier")

    def close(self) -> None:
        for proc in self.parser.alive_processes():  # background servers may have left our session (setsid)
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self._shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._shell.wait(timeout=10)
        self._log.close()

    def _run_with_mark(self, command: str) -> int:
        index = self._next_index
        self._next_index += 1
        self._send(f"{command}\ntest -e /.depgpo_mark/{index}/$?")
        self._wait_for_mark(index)
        return index

    def _send(self, text: str) -> None:
        self._shell.stdin.write(text.encode() + b"\n")
        self._shell.stdin.flush()

    def _feed_available(self) -> None:
        self.parser.feed(self._log.read())

    def _wait_for_mark(self, index: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.parser.last_mark() is None or self.parser.last_mark() < index:
            if time.monotonic() > deadline:
                raise TimeoutError(f"mark {index} not in the trace after {timeout}s (last: {self.parser.last_mark()})")
            time.sleep(0.01)
            self._feed_available()


@pytest.fixture
def shell(tmp_path):
    traced = TracedShell(tmp_path)
    yield traced
    traced.close()


@pytest.fixture
def port():
    """A free TCP port in 18000-18999."""
    for candidate in random.sample(range(18000, 19000), 50):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", candidate))
                return candidate
            except OSError:
                continue
    pytest.skip("no free port in 18000-18999")


def client(port: int, name: str) -> str:
    """A python command that fetches /name from the local server, retrying while the server starts."""
    return (f"python3 -c \"import time, urllib.request\nfor _ in range(200):\n"
            f"    try: print(urllib.request.urlopen('http://127.0.0.1:{port}/{name}').read()); break\n"
            f"    except OSError: time.sleep(0.05)\"")


def background_sleep(wrapper: str = "") -> str:
    """`sleep 30 &`, returning only once the job has exec'd sleep (so its name is settled when the mark comes)."""
    return f'{wrapper}sleep 30 & until [ "$(cat /proc/$!/comm)" = sleep ]; do sleep 0.01; done'


def server(port: int) -> str:
    return f"setsid nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &"


def recorded_paths(effects: SegmentEffects) -> set[str]:
    return set().union(*(getattr(effects, kind) for kind in PATH_KINDS), *effects.renamed)


# ----- files -----


@needs_strace
@pytest.mark.sandbox
def test_shell_redirection_is_a_created_file_of_the_running_command(shell):
    effects = shell.run("echo hello > note.txt")
    assert effects.created == {shell.path("note.txt")}
    assert effects.opened_for_write == effects.truncated == {shell.path("note.txt")}
    assert effects.reads == set() and effects.spawned == []
    appended = shell.run("echo more >> note.txt")
    assert appended.opened_for_write == {shell.path("note.txt")} and appended.truncated == set()


@needs_strace
@pytest.mark.sandbox
def test_cat_reads_the_file_and_only_tracked_paths_are_recorded(shell):
    (shell.workdir / "data.txt").write_text("42\n")
    effects = shell.run("cat data.txt")
    assert effects.reads == {shell.path("data.txt")}
    assert effects.opened_for_write == set() and effects.created == set()
    assert all(path.startswith(str(shell.workdir)) for path in recorded_paths(effects))  # no /usr, /etc, ...


@needs_strace
@pytest.mark.sandbox
def test_heredoc_script_is_written_then_executed_and_read(shell):
    written = shell.run("cat > run.sh <<'EOF'\n#!/bin/bash\necho 42 > out.txt\nEOF")
    made_executable = shell.run("chmod +x run.sh")
    ran = shell.run("./run.sh")
    assert written.created == {shell.path("run.sh")}
    assert made_executable.meta == {shell.path("run.sh")}
    assert ran.executed == {shell.path("run.sh")}
    assert shell.path("run.sh") in ran.reads  # the interpreter reads the script
    assert ran.created == {shell.path("out.txt")}


@needs_strace
@pytest.mark.sandbox
def test_sed_in_place_is_a_write_and_its_temp_file_disappears(shell):
    (shell.workdir / "config.txt").write_text("port = 9000\n")
    effects = shell.run("sed -i 's/9000/8080/' config.txt")
    assert effects.reads == {shell.path("config.txt")}
    assert effects.opened_for_write == {shell.path("config.txt")}
    assert effects.created == effects.deleted == effects.truncated == set() and effects.renamed == []
    assert not any("/sed" in path for path in recorded_paths(effects))
    assert (shell.workdir / "config.txt").read_text() == "port = 8080\n"


@needs_strace
@pytest.mark.sandbox
def test_mkdir_mv_rm(shell):
    (shell.workdir / "a.txt").write_text("a\n")
    (shell.workdir / "junk.txt").write_text("junk\n")
    effects = shell.run("mkdir -p out/sub && mv a.txt out/sub/b.txt && rm junk.txt")
    assert effects.dirs_created == {shell.path("out"), shell.path("out/sub")}
    assert effects.renamed == [(shell.path("a.txt"), shell.path("out/sub/b.txt"))]
    assert effects.deleted == {shell.path("junk.txt")}


@needs_strace
@pytest.mark.sandbox
def test_links(shell):
    (shell.workdir / "a.txt").write_text("a\n")
    effects = shell.run("ln a.txt hard.txt && ln -s a.txt soft.txt")
    assert effects.created == {shell.path("hard.txt"), shell.path("soft.txt")}
    assert effects.reads == {shell.path("a.txt")}  # the hard link shows a.txt's content under a new name


@needs_strace
@pytest.mark.sandbox
def test_relative_paths_follow_cd_in_the_shell_and_in_children(shell):
    moved = shell.run("mkdir -p sub/deeper && cd sub/deeper && echo x > ../up.txt && touch here.txt")
    assert moved.created == {shell.path("sub/up.txt"), shell.path("sub/deeper/here.txt")}
    assert moved.cwd_end == shell.path("sub/deeper")
    read_back = shell.run("cat ../up.txt")
    assert read_back.reads == {shell.path("sub/up.txt")}
    back = shell.run("cd ../.. && python3 -c \"open('sub/py.txt', 'w').write('y')\"")
    assert back.created == {shell.path("sub/py.txt")}
    assert back.cwd_end == str(shell.workdir)


@needs_strace
@pytest.mark.sandbox
def test_pipeline(shell):
    (shell.workdir / "words.txt").write_text("cherry\nbanana\napple\nblueberry\n")
    effects = shell.run("cat words.txt | grep b | sort > sorted.txt")
    assert effects.reads == {shell.path("words.txt")}
    assert effects.created == {shell.path("sorted.txt")}
    assert effects.spawned == []  # every stage has exited


@needs_strace
@pytest.mark.sandbox
def test_existence_tests_are_stats_or_missing(shell):
    (shell.workdir / "present.txt").write_text("")
    effects = shell.run("[ -f present.txt ] && [ -f absent.txt ]")
    assert shell.path("present.txt") in effects.stats
    assert effects.missing == {shell.path("absent.txt")}


@needs_strace
@pytest.mark.sandbox
def test_threads_and_spawned_children_count_for_the_command(shell):
    effects = shell.run(
        "python3 -c \"import subprocess, threading\n"
        "t = threading.Thread(target=lambda: open('from_thread.txt', 'w').write('t')); t.start(); t.join()\n"
        "subprocess.run(['touch', 'from_child.txt'], check=True)\"")
    assert effects.created == {shell.path("from_thread.txt"), shell.path("from_child.txt")}


@needs_strace
@pytest.mark.sandbox
def test_background_writes_in_a_later_command_are_late(shell):
    shell.run("(sleep 0.3; echo late > late.txt) &")
    waited = shell.run("until [ -e late.txt ]; do sleep 0.05; done")
    shell.run("true")  # one more round trip, in case strace printed the write just after mark 1
    started = shell.parser.summary(0)
    assert shell.path("late.txt") not in started.created
    assert started.late["created"] == {shell.path("late.txt")}
    assert shell.path("late.txt") not in waited.created | waited.opened_for_write  # only its existence test


# ----- processes and ports -----


@needs_strace
@pytest.mark.sandbox
def test_server_started_by_one_command_serves_the_next(shell, port):
    (shell.workdir / "answer.txt").write_text("42\n")
    shell.run(server(port))
    fetched = shell.run(client(port, "answer.txt"))
    started = shell.parser.summary(0)
    assert fetched.ports_connected == {f"tcp:{port}"}
    assert shell.path("answer.txt") not in fetched.reads  # the server read it, not the client
    assert started.ports_bound == {f"tcp:{port}"}
    assert [(p.name, p.owner) for p in started.spawned] == [("python3", 0)]  # named after setsid, nohup
    assert started.late["reads"] == {shell.path("answer.txt")}
    assert [(p.name, p.owner) for p in shell.parser.alive_processes()] == [("python3", 0)]
    assert shell.parser.listening_ports() == [(f"tcp:{port}", 0)]


@needs_strace
@pytest.mark.sandbox
def test_pkill_kills_and_probes_the_server(shell, port):
    shell.run(server(port))
    shell.run(client(port, ""))
    (server_proc,) = shell.parser.alive_processes()
    effects = shell.run(f"pkill -f 'http.server {port}'")
    assert effects.killed == [server_proc]
    assert server_proc in effects.probed  # pkill read its /proc/PID/cmdline
    assert server_proc.name == "python3" and server_proc.owner == 0


@needs_strace
@pytest.mark.sandbox
def test_killed_server_is_no_longer_alive(shell, port):
    shell.run(server(port))
    shell.run(client(port, ""))
    shell.run(f"pkill -f 'http.server {port}'; sleep 0.3")
    assert shell.parser.alive_processes() == []
    assert shell.parser.listening_ports() == []


@needs_strace
@pytest.mark.sandbox
def test_udp_and_unix_sockets(shell, port):
    shell.run("python3 -c \"import socket, time\n"
              f"u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', {port}))\n"
              "s = socket.socket(socket.AF_UNIX); s.bind('app.sock'); s.listen(); time.sleep(30)\" &")
    connected = shell.run("python3 -c \"import os, socket, time\n"
                          "while not os.path.exists('app.sock'): time.sleep(0.05)\n"
                          "c = socket.socket(socket.AF_UNIX)\n"
                          "for _ in range(100):\n"
                          "    try: c.connect('app.sock'); break\n"
                          "    except OSError: time.sleep(0.05)\n"
                          f"socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(('127.0.0.1', {port}))\"")
    unix = "unix:" + shell.path("app.sock")
    assert connected.ports_connected == {f"udp:{port}", unix}
    assert shell.parser.summary(0).ports_bound == {f"udp:{port}", unix}
    assert shell.parser.listening_ports() == sorted([(f"udp:{port}", 0), (unix, 0)])


@needs_strace
@pytest.mark.sandbox
def test_builtin_kill_and_proc_reads_probe_agent_processes_only(shell):
    shell.run(background_sleep())
    probing = shell.run("kill -0 $! && cat /proc/$!/status > /dev/null && kill -0 $$ && cat /proc/$$/status >/dev/null")
    (sleeper,) = shell.parser.summary(0).spawned
    assert sleeper == ProcInfo(sleeper.pid, "sleep", 0)
    assert probing.probed == [sleeper]  # not the shell itself
    assert probing.killed == []
    killing = shell.run("kill $!")
    assert killing.killed == [sleeper]


@needs_strace
@pytest.mark.sandbox
def test_signalling_a_process_group_reaches_its_leader(shell):
    shell.run(background_sleep(wrapper="setsid "))  # its own process group, led by sleep
    effects = shell.run("kill -TERM -- -$!")
    (sleeper,) = shell.parser.summary(0).spawned
    assert effects.killed == [sleeper]


@needs_strace
@pytest.mark.sandbox
def test_verifier_sees_files_the_agents_server_read_for_it(shell, port):
    shell.run(server(port))
    shell.run("echo 42 > answer.txt")
    verifier = shell.verify(client(port, "answer.txt"))
    assert verifier.ports_connected == {f"tcp:{port}"}
    assert shell.path("answer.txt") in verifier.reads  # read by the server owned by command 0
    assert shell.parser.summary(0).late["reads"] == {shell.path("answer.txt")}
    assert shell.path("answer.txt") not in shell.parser.summary(1).reads


@needs_strace
@pytest.mark.sandbox
def test_a_refused_connect_still_probed_the_port(shell, port):
    # The generated verifiers' probe (bash's /dev/tcp): nothing listens, so every connect is ECONNREFUSED. The
    # verifier still inspected tcp:PORT, as a lookup that finds no file is `missing`.
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} || echo closed"
    assert shell.run(probe).ports_connected == {f"tcp:{port}"}
    verifier = shell.verify(probe)
    assert verifier.ports_connected == {f"tcp:{port}"}


@needs_strace
@pytest.mark.sandbox
def test_nested_bash_takes_over_as_the_shell(shell):
    opened = shell.run("bash --norc --noprofile")  # reads the following commands, marks included
    inner_write = shell.run("echo x > nested.txt")
    inner_background = shell.run(background_sleep())
    shell.run("exit")
    outer_write = shell.run("echo y > outer.txt")
    assert opened.spawned == []  # the nested bash became a shell when it emitted mark 0
    assert inner_write.created == {shell.path("nested.txt")}
    assert [(p.name, p.owner) for p in inner_background.spawned] == [("sleep", 2)]
    assert [(p.name, p.owner) for p in shell.parser.alive_processes()] == [("sleep", 2)]
    assert outer_write.created == {shell.path("outer.txt")}


# ----- marks and streaming -----


@needs_strace
@pytest.mark.sandbox
def test_a_mark_sent_again_does_not_rewind_the_segment(shell):
    shell.run("echo a > a.txt")
    shell.resend_mark(0)
    second = shell.run("echo b > b.txt")
    assert second.created == {shell.path("b.txt")}
    assert shell.parser.summary(0).created == {shell.path("a.txt")}


@pytest.fixture(scope="module")
def recorded_log(tmp_path_factory):
    """A real log of a few commands, and the summaries of feeding it in one piece."""
    root = tmp_path_factory.mktemp("chunks")
    traced = TracedShell(root)
    (traced.workdir / "config.txt").write_text("port = 9000\n")
    try:
        for command in ("sed -i 's/9000/8080/' config.txt", "mkdir d && cd d && echo a | tee a.txt",
                        "mv a.txt b.txt; rm b.txt; python3 -c \"open('p.txt', 'w')\"", "cat ../config.txt"):
            traced.run(command)
    finally:
        traced.close()
    text = (root / "trace.log").read_text()
    whole = TraceParser(keep_path=lambda path: path.startswith(str(traced.workdir)))
    whole.feed(text)
    return text, str(traced.workdir), [whole.summary(index) for index in range(4)]


@needs_strace
@pytest.mark.sandbox
@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=60).map(sorted))
def test_feeding_in_arbitrary_chunks_changes_nothing(recorded_log, cuts):
    text, workdir, expected = recorded_log
    parser = TraceParser(keep_path=lambda path: path.startswith(workdir))
    offsets = [0, *(int(cut * len(text)) for cut in cuts), len(text)]
    for start, end in zip(offsets, offsets[1:]):
        parser.feed(text[start:end])
    assert [parser.summary(index) for index in range(4)] == expected


def test_unfinished_calls_and_children_printed_before_their_clone_returns():
    # Tiny hand-written log: pid 101's first line comes before pid 100's clone returns, and its openat is split.
    log = (
        '100  1.000001 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/-1/0", 0x1, 0) = -1 ENOENT (No such file)\n'
        "100  1.000002 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>\n"
        '101  1.000003 openat(AT_FDCWD</w>, "out.txt", O_WRONLY|O_CREAT|O_TRUNC, 0666 <unfinished ...>\n'
        '101  1.000004 <... openat resumed>) = 3</w/out.txt>\n'
        "100  1.000005 <... clone resumed>, child_tidptr=0x7f) = 101\n"
        "101  1.000006 +++ exited with 0 +++\n"
        '100  1.000007 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/0/0", 0x1, 0) = -1 ENOENT (No such file)\n'
    )
    parser = TraceParser()
    for start in range(0, len(log), 7):
        parser.feed(log[start:start + 7])
    assert parser.last_mark() == 0
    assert parser.summary(0).created == {"/w/out.txt"}
    assert parser.alive_processes() == []


def test_a_command_naming_the_mark_directory_is_a_file_call_not_a_mark():
    # Seen in RL: a model-written command touched /.depgpo_mark/ without a mark number, and parsing raised.
    log = (
        '100  1.000001 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/-1/0", 0x1, 0) = -1 ENOENT (No such file)\n'
        '100  1.000002 openat(AT_FDCWD</w>, "/.depgpo_mark/notes", O_RDONLY) = -1 ENOENT (No such file)\n'
        '100  1.000003 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/x/", 0x1, 0) = -1 ENOENT (No such file)\n'
        '100  1.000004 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/0/0", 0x1, 0) = -1 ENOENT (No such file)\n'
    )
    parser = TraceParser()
    parser.feed(log)
    assert parser.last_mark() == 0
    assert parser.summary(0).missing == {"/.depgpo_mark/notes", "/.depgpo_mark/x"}


def test_lines_without_pid_and_timestamp_are_rejected():
    with pytest.raises(ValueError, match="strace_argv"):
        TraceParser().feed('openat(AT_FDCWD, "/x", O_RDONLY) = 3\n')


def test_summary_rejects_unknown_segments():
    with pytest.raises(ValueError, match="verifier"):
        TraceParser().summary("setup")


def test_skipped_prefixes_may_not_hide_marks_or_process_probes():
    for too_broad in ("/", "/.depgpo", "/proc/"):
        with pytest.raises(ValueError, match="untracked_prefixes"):
            TraceParser(untracked_prefixes=(too_broad,))


@needs_strace
@pytest.mark.sandbox
def test_a_pid_namespace_of_its_own_keeps_its_processes_their_writes_and_kills(shell):
    """In it a clone returns the namespace's pid; the tracer's comes in a comment (--decode-pids=pidns). Without it
    the grandchild was never tied to the command, its write was lost, and `kill PID` broke the parser."""
    effects = shell.run("unshare -Upf sh -c 'sh -c \"echo x > inner.txt\"; sleep 30 & sleep 0.3; kill $!; wait'")
    assert effects.created == {shell.path("inner.txt")}
    assert [victim.name for victim in effects.killed] == ["sleep"], effects.killed
    group = shell.run("unshare -Upf bash -c 'set -m; (sleep 30 & sleep 31 & wait) & sleep 0.3; kill -TERM -$!; wait'")
    assert sorted(victim.name for victim in group.killed) == ["bash", "sleep", "sleep"], group.killed  # the group


def test_an_untranslated_pid_of_a_pid_namespace_does_not_replace_a_live_process():
    """strace translates a nested namespace's pid only while the child is alive; a child reaped first shows the
    namespace's own pid (7), here also the pid of command 0's background job, whose later write stays its own."""
    log = (
        '100  1.000001 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/-1/0", 0x1, 0) = -1 ENOENT (No such file)\n'
        "100  1.000002 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 7\n"
        '100  1.000003 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/0/0", 0x1, 0) = -1 ENOENT (No such file)\n'
        "100  1.000004 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 8\n"
        "8  1.000005 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 7\n"
        '7  1.000006 openat(AT_FDCWD</w>, "/w/bg.txt", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</w/bg.txt>\n'
        '100  1.000007 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/1/0", 0x1, 0) = -1 ENOENT (No such file)\n'
    )
    parser = TraceParser()
    parser.feed(log)
    assert parser.summary(1).created == set()
    assert parser.summary(0).late["created"] == {"/w/bg.txt"}  # command 0's job wrote it after that command ended


def test_lines_held_back_past_the_bound_are_read_as_their_segments(monkeypatch):
    monkeypatch.setattr("depgpo.env.tracing.trace_parser.MAX_ORPHAN_LINES", 2)
    log = (
        '100  1.000001 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/-1/0", 0x1, 0) = -1 ENOENT (No such file)\n'
        + "".join(f'300  1.00001{i} newfstatat(AT_FDCWD</w>, "/w/f{i}", 0x1, 0) = -1 ENOENT (No such file)\n'
                  for i in range(2))
        + '300  1.000020 openat(AT_FDCWD</w>, "/w/out.txt", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</w/out.txt>\n'
        '100  1.000030 newfstatat(AT_FDCWD</w>, "/.depgpo_mark/0/0", 0x1, 0) = -1 ENOENT (No such file)\n'
    )
    parser = TraceParser()
    parser.feed(log)
    assert parser.summary(0).created == {"/w/out.txt"}
