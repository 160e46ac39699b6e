"""A persistent interactive bash on a PTY: send a command, get its output and exit code.

After each command the harness types `__depgpo_mark K NONCE` (NONCE: 64 random bits, new for every command); the
shell prints a record-separator line `\\x1eDEPGPO K NONCE RC\\x1e` (completion + exit code) and leaves a boundary
`/.depgpo_mark/K/RC/NONCE` in the trace. Output a command prints cannot end it early: it would have to know the
nonce, which is typed only after the command (a command that reads its own keystrokes could learn it: then it has
also eaten the marker, and the harness's recovery types a new one). Marker lines and nonces never reach an
observation. A command that outlives its time is interrupted the way a person at a terminal would: C-c, then C-d,
then the PTY's foreground job is killed.

Observations do not depend on the machine's load (docs/sandbox.md#observations):
- The marker is typed once bash is back at its prompt: its PROMPT_COMMAND prints a hint `\\x1eDEPGPO-PROMPT $!\\x1e`
  (layout.BASHRC). Typed with the command, a REPL the command left running read it and answered with the random
  nonce in its error (and the harness's keystrokes met it at a load-dependent point). The hint is only a hint: one
  a command prints itself types the marker early, as before, and the nonce still decides. Where the last command
  ended without one (a nested shell that prints none), the marker is typed with the command, as before.
- Background jobs the command started (its `$!` changed, or bash has children it lacked before) are settled: the
  harness waits up to JOB_SETTLE_S until bash has reaped them, then types an empty line so that bash prints its job
  notices, then the marker. Their output and "[1]+ Done" land before the marker, not on whichever side load put them.
- A command that times out shows what it printed up to its deadline and then a fixed line (timeout_notice); what
  the recovery's keystrokes drew from it afterwards is dropped.

Output is handled in linear time: the marker is searched for only in new bytes, and of a huge output only a head
and a tail are kept (the observation is cut to OBSERVATION_LIMIT anyway).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import select
import signal
import subprocess
import termios
import time
from dataclasses import dataclass

from depgpo.env.sandbox.chain import chain_env
from depgpo.env.sandbox.spawn import spawn, with_terminal

OBSERVATION_LIMIT = 10_000  # bytes the agent sees per command, head and tail halves, as Terminus truncates
KEEP_BYTES = 1 << 20        # of one command's raw output, the first and the last KEEP_BYTES are kept
# The whole marker line, its newline too: the shell prints it in one write, but a read of the PTY can end inside it,
# and a match that stopped at the closing \x1e left the newline to start the next command's observation.
_MARK_RE = re.compile(rb"\x1eDEPGPO (-?\d+) ([0-9a-f]{16}) (\d+)\x1e\r?\n")
_HEX16_RE = re.compile(r"[0-9a-f]{16}")
LINE_EDITOR_WAIT_S = 1.0     # longest wait for readline to take the terminal before a command
_MARK_MAX = 64              # longest marker line: the overlap kept between two searches
_OWN_MARK_LINE_RE = re.compile(r"^.*__depgpo_mark -?\d+ [0-9a-f]{16}.*\n?", re.MULTILINE)
# Terminal control sequences (colours, cursor moves): a tmux pane capture shows the rendered text, not these.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[@-Z\\-_]")

# What bash's PROMPT_COMMAND prints before each prompt, with `$!` (layout.BASHRC); never part of an observation.
_PROMPT_RE = re.compile(rb"\x1eDEPGPO-PROMPT (\d*)\x1e")
JOB_SETTLE_S = 1.0    # longest wait for the background jobs a command started before its marker is typed
PROMPT_WAIT_S = 2.0   # longest wait for a prompt (or a marker typed at one) that should follow at once


def timeout_notice(timeout_s: float) -> str:
    """The fixed words a timed-out command's observation ends with: the same whatever the load."""
    return (f"[the command did not finish within {timeout_s:g} s and was interrupted (C-c, then C-d or a kill if "
            "needed); output after that point is not shown]\n")


@dataclass
class CommandOutput:
    output: str
    exit_code: int | None     # None when the command had to be interrupted
    timed_out: bool
    duration_s: float
    recovery: list[str]       # escalation steps taken ("C-c", "C-d", "kill")
    omitted_bytes: int = 0    # output bytes dropped between the kept head and tail


def truncate_observation(text: str, limit: int = OBSERVATION_LIMIT, omitted: int = 0) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit and not omitted:
        return text
    half = limit // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore") if len(data) > half else ""
    return (f"{head}\n[... output limited to {limit} bytes; {len(data) - len(head.encode()) - len(tail.encode()) + omitted}"
            f" interior bytes omitted ...]\n{tail}")


class _Output:
    """The bytes a command printed: appended in O(1) amortised, searched for the marker only where not yet
    searched, and capped to a head and a tail of KEEP_BYTES each."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.searched = 0   # data[:searched] holds no complete marker
        self.omitted = 0
        self.prompts: list[tuple[int, bytes]] = []  # (end offset, $!) of each prompt hint in data
        self._scanned = 0   # data[:_scanned] holds no prompt hint not yet in prompts

    def append(self, chunk: bytes) -> None:
        self.data += chunk
        end = 0
        for m in _PROMPT_RE.finditer(self.data, self._scanned):  # each new byte scanned once, plus an overlap
            self.prompts.append((m.end(), m.group(1)))
            end = m.end()
        self._scanned = max(end, len(self.data) - _MARK_MAX)
        if len(self.data) > 3 * KEEP_BYTES:  # drop the middle, keep the unsearched end
            cut_end = len(self.data) - KEEP_BYTES
            cut_end = min(cut_end, max(self.searched - _MARK_MAX, KEEP_BYTES))
            if cut_end > KEEP_BYTES:
                cut = cut_end - KEEP_BYTES
                self.omitted += cut
                del self.data[KEEP_BYTES:cut_end]
                self.searched -= cut
                self._scanned -= cut
                self.prompts = [(o - cut if o > cut_end else min(o, KEEP_BYTES), p) for o, p in self.prompts]

    def find(self, mark: int, nonce: str) -> re.Match | None:
        start = max(0, self.searched - _MARK_MAX)
        for m in _MARK_RE.finditer(self.data, start):
            if int(m.group(1)) == mark and m.group(2).decode() == nonce:
                return m
        self.searched = len(self.data)
        return None

    def take(self, end: int | None = None, rest_from: int | None = None) -> tuple[bytes, int]:
        """(bytes before `end`, omitted count); what follows `rest_from` stays for the next command."""
        out, omitted = bytes(self.data[:end]), self.omitted
        rest = self.data[rest_from:] if rest_from is not None else bytearray()
        self.prompts = [(o - rest_from, p) for o, p in self.prompts if rest_from is not None and o > rest_from]
        self._scanned = max(0, self._scanned - rest_from) if rest_from is not None else 0
        self.data, self.searched, self.omitted = bytearray(rest), 0, 0
        return out, omitted


class ShellSession:
    """Owns the PTY and the launcher process tree of one sandbox; the launcher starts in the chain's environment
    (chain.py: the shell's own is set by its bwrap)."""

    def __init__(self, argv: list[str], cpu: int | None = None, startup_timeout_s: float = 30.0,
                 first_command: int = 0):
        self.master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # no echo from the start: the observation is the command's output only
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        # The PTY becomes the controlling terminal (job control works); spawned without fork (spawn.py).
        self.proc = spawn(with_terminal(argv), cpu, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                          env=chain_env())
        os.close(slave)
        os.set_blocking(self.master, False)
        self._out = _Output()
        # Mark K ends command K; the first mark (first_command - 1) ends the shell's own start-up. A restarted shell
        # continues the numbering of the one it replaces.
        self.next_mark = first_command - 1
        self.valid_nonces: set[str] = set()
        self.valid_marks: set[str] = set()  # "K/NONCE" of every marker typed: the trace parser accepts only these
        self._bash: int | None = None  # host pid of the interactive bash: its children are the jobs to settle
        start = self.run_marked("", timeout_s=startup_timeout_s)
        if start.exit_code is None:
            self.close()
            raise RuntimeError(f"sandbox shell did not start within {startup_timeout_s}s; output: {start.output!r}")
        self._bash = self.shell_pid()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read_available(self, wait_s: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], max(wait_s, 0))
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError as e:
            if e.errno == errno.EIO:  # the shell side closed
                return False
            raise
        if not chunk:
            return False
        self._out.append(chunk)
        return True

    def _drain(self) -> None:
        """Read what the PTY holds now, without waiting."""
        while self.alive() and select.select([self.master], [], [], 0)[0]:
            if not self._read_available(0):
                return

    def _wait_for_line_editor(self, deadline: float) -> None:
        """Wait until bash's readline holds the terminal (ICANON off) before typing a command. Typed while the
        terminal is still in canonical mode (bash between printing the last marker and reading the next line),
        the kernel's line discipline keeps at most 4095 bytes of a line and silently drops the rest: a long
        one-line command lost its tail in 24 of 40 runs. Past the deadline (a program that never leaves
        canonical mode holds the terminal) the keystrokes are typed as they are."""
        while time.monotonic() < deadline and self.alive():
            try:
                if not termios.tcgetattr(self.master)[3] & termios.ICANON:  # the master reads the slave's modes
                    return
            except termios.error:
                return
            time.sleep(0.001)

    def _write(self, data: str) -> None:
        payload = data.encode()
        while payload:
            try:
                n = os.write(self.master, payload)
                payload = payload[n:]
            except BlockingIOError:
                select.select([], [self.master], [], 1.0)

    def _wait_for_mark(self, mark: int, nonce: str, deadline: float) -> tuple[bytes, int, int] | None:
        """(output before the marker, its exit code, omitted bytes), or None at the deadline / when the shell died."""
        while True:
            m = self._out.find(mark, nonce)
            if m:
                rc = int(m.group(3))
                out, omitted = self._out.take(m.start(), m.end())
                return out, rc, omitted
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.alive():
                return None
            if not self._read_available(min(remaining, 0.5)):
                if not self.alive() or self._out.find(mark, nonce) is None:
                    return None  # the shell side closed; a marker in its last bytes is taken by the next loop

    def run_marked(self, keystrokes: str, timeout_s: float) -> CommandOutput:
        """Type `keystrokes` (a newline is added if missing), then, once bash prompts again, the marker; wait for it
        or recover."""
        mark, self.next_mark = self.next_mark, self.next_mark + 1
        nonce = self._new_nonce(mark)
        start = time.monotonic()
        if keystrokes and not keystrokes.endswith("\n"):
            keystrokes += "\n"
        # Gated: the prompt that followed the last marker has come (a shell that prints hints is reading).
        gated = bool(keystrokes) and self._await_prompt(0, start + min(timeout_s, LINE_EDITOR_WAIT_S))
        self._wait_for_line_editor(start + min(timeout_s, LINE_EDITOR_WAIT_S))
        seen, last_bg = len(self._out.prompts), b""
        jobs_before: set[int] = set()
        if gated:
            jobs_before, last_bg = self._jobs(), self._out.prompts[-1][1]
            self._write(keystrokes)
            got = self._mark_at_prompt(mark, nonce, seen, last_bg, jobs_before, start + timeout_s)
        else:
            self._write(keystrokes + _mark_line(mark, nonce))
            got = self._wait_for_mark(mark, nonce, start + timeout_s)
        recovery: list[str] = []
        late = b""
        if got is None:  # what was printed up to the deadline counts; it may hold the end after all
            self._drain()
            if gated and len(self._out.prompts) > seen:
                got = self._mark_at_prompt(mark, nonce, seen, last_bg, jobs_before, time.monotonic())
            elif not gated:
                got = self._wait_for_mark(mark, nonce, 0.0)
        if got is None:
            output, omitted = self._out.take()
            got = self._recover(mark, recovery, gated)
            if not recovery:  # the shell had died: nothing was typed, so all it printed is the command's
                late = self._out.take()[0]
            elif got is None:
                self._out.take()  # what the recovery drew from the command, never an observation
        else:
            output, omitted = got[0], got[2]
        text = self._clean(output + late)
        if recovery:
            text += ("\n" if text and not text.endswith("\n") else "") + timeout_notice(timeout_s)
        return CommandOutput(output=text, exit_code=got[1] if got and not recovery else None, timed_out=bool(recovery),
                             duration_s=time.monotonic() - start, recovery=recovery, omitted_bytes=omitted)

    def _clean(self, output: bytes) -> str:
        """The observation's text: no prompt hints, control sequences, marker lines or nonces."""
        text = _PROMPT_RE.sub(b"", output).decode("utf-8", "replace").replace("\r\n", "\n")
        text = _ANSI_RE.sub("", text).replace("\r", "")
        text = _OWN_MARK_LINE_RE.sub("", text)  # marker lines echoed back by a command that read its stdin
        return _HEX16_RE.sub(lambda m: "" if m[0] in self.valid_nonces else m[0], text)  # a nonce printed elsewhere

    def _await_prompt(self, seen: int, deadline: float) -> bool:
        """Read until the output holds more than `seen` prompt hints; False at the deadline or when the shell died."""
        while len(self._out.prompts) <= seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.alive() or not self._read_available(min(remaining, 0.5)):
                return len(self._out.prompts) > seen
        return True

    def _mark_at_prompt(self, mark: int, nonce: str, seen: int, last_bg: bytes, jobs_before: set[int],
                        deadline: float) -> tuple[bytes, int, int] | None:
        """Wait for the prompt after the command, settle the jobs it started, type the marker, wait for it."""
        if not self._await_prompt(seen, deadline):
            return None
        began = time.monotonic()
        if self._out.prompts[-1][1] != last_bg or self._jobs() - jobs_before:
            self._settle(jobs_before)
        deadline += time.monotonic() - began  # settling is not the command's time
        self._write(_mark_line(mark, nonce))
        return self._wait_for_mark(mark, nonce, max(deadline, time.monotonic() + PROMPT_WAIT_S))

    def _settle(self, jobs_before: set[int]) -> None:
        """Until bash has reaped the children the command added (at most JOB_SETTLE_S), read their output; then an
        empty line makes bash print its job notices ("[1]+  Done ...") before the marker, not after it."""
        end = time.monotonic() + JOB_SETTLE_S
        while self._jobs() - jobs_before and time.monotonic() < end and self.alive():
            self._read_available(0.002)
        seen = len(self._out.prompts)
        self._write("\n")
        self._await_prompt(seen, time.monotonic() + PROMPT_WAIT_S)

    def _jobs(self) -> set[int]:
        """Host pids of the interactive bash's children (its jobs, zombies until it reaps them): one /proc read."""
        if self._bash is None:
            return set()
        try:
            with open(f"/proc/{self._bash}/task/{self._bash}/children") as fh:
                return {int(pid) for pid in fh.read().split()}
        except (OSError, ValueError):
            return set()

    def _recover(self, mark: int, steps: list[str], gated: bool = False) -> tuple[bytes, int, int] | None:
        """C-c, then C-d, then SIGKILL of the foreground process group; after each, type a new marker at bash's
        prompt (gated), else after 0.2 s, as the marker line may have been eaten (by `cat`, a heredoc, a REPL)."""
        for step in ("C-c", "C-d", "kill"):
            if not self.alive():
                return None
            steps.append(step)
            seen = len(self._out.prompts)
            if step == "C-c":
                self._write("\x03")
            elif step == "C-d":
                self._write("\x04")
            else:
                self._kill_foreground()
            if gated and not self._await_prompt(seen, time.monotonic() + PROMPT_WAIT_S) and step != "kill":
                continue  # still not at the prompt: the next step, without typing into the program
            if not gated:
                time.sleep(0.2)
            nonce = self._new_nonce(mark)
            self._write(("" if gated and len(self._out.prompts) > seen else "\n") + _mark_line(mark, nonce))
            got = self._wait_for_mark(mark, nonce, time.monotonic() + PROMPT_WAIT_S)
            if got is not None:
                return got
        return None

    def _new_nonce(self, mark: int) -> str:
        nonce = secrets.token_hex(8)
        self.valid_nonces.add(nonce)
        self.valid_marks.add(f"{mark}/{nonce}")
        return nonce

    def _kill_foreground(self) -> None:
        try:
            pgrp = os.tcgetpgrp(self.master)
        except OSError:
            return
        shell_pgrp = self._shell_pgrp()
        if pgrp > 0 and pgrp != shell_pgrp:
            try:
                os.killpg(pgrp, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def shell_pid(self) -> int | None:
        """Host pid of the interactive bash inside the sandbox (None once it is gone)."""
        for pid in _descendants(self.proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if fh.read().startswith(b"bash\x00--rcfile\x00/.depgpo/bashrc"):
                        return pid
            except OSError:
                continue
        return None

    def _shell_pgrp(self) -> int | None:
        """The interactive bash's own process group (host pid namespace): never kill that one."""
        try:
            for pid in _descendants(self.proc.pid):
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if b"--rcfile\x00/.depgpo/bashrc" in fh.read():
                        return os.getpgid(pid)
        except OSError:
            pass
        return None

    def close(self) -> None:
        """Kill the whole sandbox: unshare --kill-child takes the pid namespace (and every daemon) down."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            wait_exit(self.proc, timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.close(self.master)
        except OSError:
            pass


def _mark_line(mark: int, nonce: str) -> str:
    # `: _` afterwards: bash's $_ would otherwise hold the nonce for the next command to read.
    return f"__depgpo_mark {mark} {nonce}; : _\n"


def wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    """proc.wait(timeout), woken by the exit itself: Popen.wait with a timeout polls, sleeping up to 50 ms past it.
    Raises subprocess.TimeoutExpired as Popen.wait does."""
    if proc.poll() is not None:
        return proc.returncode
    pidfd = os.pidfd_open(proc.pid)  # our unreaped child: its pid cannot have been reused
    try:
        if not select.select([pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(pidfd)
    return proc.wait()


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it, parents first: read from each thread's /proc children list, so the cost is
    the tree's size, not the machine's process count (a scan of all /proc read every process's stat)."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue  # gone meanwhile
        for task in tasks:
            try:
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack.extend(int(child) for child in fh.read().split())
            except OSError:
                continue
    return out
