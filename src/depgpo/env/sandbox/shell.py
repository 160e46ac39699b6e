"""A persistent interactive bash on a PTY: send a command, get its output and exit code.

After each command the harness types `__depgpo_mark K NONCE` (NONCE: 64 random bits, new for every command); the
shell prints a record-separator line `\\x1eDEPGPO K NONCE RC\\x1e` (completion + exit code) and leaves a boundary
`/.depgpo_mark/K/RC/NONCE` in the trace. Output a command prints cannot end it early: it would have to know the
nonce, which is typed only after the command (a command that reads its own keystrokes could learn it: then it has
also eaten the marker, and the harness's recovery types a new one). Marker lines and nonces never reach an
observation. A command that outlives its time is interrupted the way a person at a terminal would: C-c, then C-d,
then the PTY's foreground job is killed.

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

    def append(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 3 * KEEP_BYTES:  # drop the middle, keep the unsearched end
            cut_end = len(self.data) - KEEP_BYTES
            cut_end = min(cut_end, max(self.searched - _MARK_MAX, KEEP_BYTES))
            if cut_end > KEEP_BYTES:
                self.omitted += cut_end - KEEP_BYTES
                del self.data[KEEP_BYTES:cut_end]
                self.searched -= cut_end - KEEP_BYTES

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
        start = self.run_marked("", timeout_s=startup_timeout_s)
        if start.exit_code is None:
            self.close()
            raise RuntimeError(f"sandbox shell did not start within {startup_timeout_s}s; output: {start.output!r}")

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
        """Type `keystrokes` (a newline is added if missing), then the marker; wait for it or recover."""
        mark, self.next_mark = self.next_mark, self.next_mark + 1
        nonce = self._new_nonce(mark)
        start = time.monotonic()
        if keystrokes and not keystrokes.endswith("\n"):
            keystrokes += "\n"
        self._wait_for_line_editor(start + min(timeout_s, LINE_EDITOR_WAIT_S))
        self._write(keystrokes + _mark_line(mark, nonce))
        got = self._wait_for_mark(mark, nonce, start + timeout_s)
        recovery: list[str] = []
        if got is None:
            got = self._recover(mark, recovery)
        if got is None:
            output, omitted = self._out.take()
        else:
            output, omitted = got[0], got[2]
        text = output.decode("utf-8", "replace").replace("\r\n", "\n")
        text = _ANSI_RE.sub("", text).replace("\r", "")
        text = _OWN_MARK_LINE_RE.sub("", text)  # marker lines echoed back by a command that read its stdin
        text = _HEX16_RE.sub(lambda m: "" if m[0] in self.valid_nonces else m[0], text)  # a nonce printed elsewhere
        return CommandOutput(output=text, exit_code=got[1] if got and not recovery else None, timed_out=bool(recovery),
                             duration_s=time.monotonic() - start, recovery=recovery, omitted_bytes=omitted)

    def _recover(self, mark: int, steps: list[str]) -> tuple[bytes, int, int] | None:
        """C-c, then C-d, then SIGKILL of the foreground process group; type a new marker after each."""
        for step in ("C-c", "C-d", "kill"):
            if not self.alive():
                return None
            steps.append(step)
            if step == "C-c":
                self._write("\x03")
            elif step == "C-d":
                self._write("\x04")
            else:
                self._kill_foreground()
            time.sleep(0.2)
            # The marker line may have been eaten (by `cat`, an unterminated heredoc, a REPL): type a new one.
            nonce = self._new_nonce(mark)
            self._write("\n" + _mark_line(mark, nonce))
            got = self._wait_for_mark(mark, nonce, time.monotonic() + 2.0)
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
