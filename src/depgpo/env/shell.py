"""A persistent interactive bash on a PTY: send a command, get its output and exit code.

After each command the harness types `__depgpo_mark K`; the shell prints a record-separator line
`\\x1eDEPGPO K RC\\x1e` (completion + exit code) and leaves a boundary in the trace. A command that outlives its time
is interrupted the way a person at a terminal would: C-c, then C-d, then the PTY's foreground job is killed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import signal
import subprocess
import termios
import time
from dataclasses import dataclass
from typing import Callable

OBSERVATION_LIMIT = 10_000  # bytes the agent sees per command, head and tail halves, as Terminus truncates
_MARK_RE = re.compile(rb"\x1eDEPGPO (-?\d+) (\d+)\x1e\r?\n?")
_OWN_MARK_LINE_RE = re.compile(r"^__depgpo_mark -?\d+\n", re.MULTILINE)
# Terminal control sequences (colours, cursor moves): a tmux pane capture shows the rendered text, not these.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[@-Z\\-_]")


@dataclass
class CommandOutput:
    output: str
    exit_code: int | None     # None when the command had to be interrupted
    timed_out: bool
    duration_s: float
    recovery: list[str]       # escalation steps taken ("C-c", "C-d", "kill")


def truncate_observation(text: str, limit: int = OBSERVATION_LIMIT) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    return f"{head}\n[... output limited to {limit} bytes; {len(data) - limit} interior bytes omitted ...]\n{tail}"


class ShellSession:
    """Owns the PTY and the launcher process tree of one sandbox."""

    def __init__(self, argv: list[str], preexec: Callable[[], None] | None = None, startup_timeout_s: float = 30.0,
                 first_command: int = 0):
        self.master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # no echo from the start: the observation is the command's output only
        termios.tcsetattr(slave, termios.TCSANOW, attrs)

        def child_setup() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # the PTY becomes the controlling terminal: job control works
            if preexec:
                preexec()

        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, preexec_fn=child_setup,
                                     close_fds=True)
        os.close(slave)
        os.set_blocking(self.master, False)
        self._buffer = b""
        # Mark K ends command K; the first mark (first_command - 1) ends the shell's own start-up. A restarted shell
        # continues the numbering of the one it replaces.
        self.next_mark = first_command - 1
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
        self._buffer += chunk
        return True

    def _write(self, data: str) -> None:
        payload = data.encode()
        while payload:
            try:
                n = os.write(self.master, payload)
                payload = payload[n:]
            except BlockingIOError:
                select.select([], [self.master], [], 1.0)

    def _wait_for_mark(self, mark: int, deadline: float) -> tuple[bytes, int] | None:
        while True:
            m = _MARK_RE.search(self._buffer)
            while m and int(m.group(1)) != mark:  # a stale mark from an earlier recovery attempt
                self._buffer = self._buffer[:m.start()] + self._buffer[m.end():]
                m = _MARK_RE.search(self._buffer)
            if m:
                out, self._buffer = self._buffer[:m.start()], self._buffer[m.end():]
                return out, int(m.group(2))
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.alive():
                return None
            if not self._read_available(min(remaining, 0.5)):
                if not self.alive() or not _MARK_RE.search(self._buffer):
                    return None

    def run_marked(self, keystrokes: str, timeout_s: float) -> CommandOutput:
        """Type `keystrokes` (a newline is added if missing), then the marker; wait for it or recover."""
        mark, self.next_mark = self.next_mark, self.next_mark + 1
        start = time.monotonic()
        if keystrokes and not keystrokes.endswith("\n"):
            keystrokes += "\n"
        self._write(keystrokes + f"__depgpo_mark {mark}\n")
        got = self._wait_for_mark(mark, start + timeout_s)
        recovery: list[str] = []
        if got is None:
            got = self._recover(mark, recovery)
        output = got[0] if got else self._buffer
        if got is None:
            self._buffer = b""
        text = output.decode("utf-8", "replace").replace("\r\n", "\n")
        text = _OWN_MARK_LINE_RE.sub("", _ANSI_RE.sub("", text).replace("\r", ""))  # marker lines echoed back by a command that read stdin
        return CommandOutput(output=text, exit_code=got[1] if got and not recovery else None, timed_out=bool(recovery),
                             duration_s=time.monotonic() - start, recovery=recovery)

    def _recover(self, mark: int, steps: list[str]) -> tuple[bytes, int] | None:
        """C-c, then C-d, then SIGKILL of the foreground process group; re-send the marker after each."""
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
            # The marker line may have been eaten (by `cat`, an unterminated heredoc, a REPL): type it again.
            self._write(f"\n__depgpo_mark {mark}\n")
            got = self._wait_for_mark(mark, time.monotonic() + 2.0)
            if got is not None:
                return got
        return None

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
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.close(self.master)
        except OSError:
            pass


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out
