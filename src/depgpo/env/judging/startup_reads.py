"""Start-up reads: what the verifier's tools read for themselves, which is no inspection of the agent's work.

E (docs/credit.md#verifier-records) is taken from the trace of the verifier's run, and a Harbor test.sh installs
its tools before it tests: `apt-get update; apt-get install -y curl; curl -LsSf .../uv/install.sh | sh; source
$HOME/.local/bin/env; uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py`. Each of those tools looks up its
own configuration in the home directory, where the agent may write too: dpkg `~/.dpkg.cfg`, curl `~/.curlrc` and
`~/.config/curlrc`, pip `~/.config/pip/pip.conf`, uv `~/.local/share/uv/credentials/...`; and pytest's Python,
importing readline, looks up `~/.terminfo` and `~/.inputrc`. None of these is a check of the agent's work, yet each
entered E, so an agent's own `uv`, `pip` or `curl` command that touched one earned credit as if the tests had
inspected it. The rule, one for every tool:

1. A *setup tool* is a process running a program of SETUP_TOOLS (apt, apt-get, dpkg, curl, wget, pip, uv, uvx, ...;
   `python -m pip`), with every process it forks or execs (apt's methods, dpkg's maintainer scripts, uv's
   interpreter queries), except the command that a runner (uv, uvx) was given: a process that execs the runner's
   last arguments (`uvx -w pytest==8.4.1 pytest /tests/test_outputs.py` runs `pytest /tests/test_outputs.py`) is
   the test, and so is what it starts (until it runs a setup tool itself).
2. What a setup tool looks up in *its own places* is a start-up read: an entry of a home directory whose name starts
   with a dot (and libldap's `~/ldaprc`, read by curl), and the system directories (/etc, /usr, /var/lib, /var/cache,
   ...: TOOL_PLACES) outside the task's workdir. What it reads elsewhere (`pip install -r /app/requirements.txt`)
   stays in E.
3. A terminal's start-up: a process that has loaded a terminal library (readline, terminfo: TERMINAL_LIBRARY) looks
   up `~/.inputrc` and `~/.terminfo` as the library initialises. Such libraries open files without O_CLOEXEC,
   while Python's own `open()` always sets it, so a test that opens `~/.inputrc` itself keeps it in E.

A path leaves E only when every lookup of it by the verifier's own processes was a start-up read: a file that the
test process read too stays. What this costs: a verifier that inspects a tool's dot-file through that tool (`pip
config list` to check the agent's pip.conf), or checks the existence of `~/.terminfo` or `~/.inputrc` from a
process that loaded readline or terminfo (pytest, bash), loses that record.

This only narrows E, the credit target. What counts as tampering (tampering.py, module_shadow.py,
verifier_processes.py; docs/threat-model.md) reads the whole trace and every effect, and is unchanged.
"""

from __future__ import annotations

import posixpath
import re

from depgpo.env.tracing.trace_parser import TraceParser
from depgpo.env.tracing.trace_state import SETUP, Segment, TracedProcess
from depgpo.env.tracing.trace_syntax import AT_ARGS, STRING, split_result, strace_pid, unescape
from depgpo.trajectory.scope import PACKAGE_STATE_DIRS, SYSTEM_DIRS, is_under

# Programs that fetch or install software, and read their own configuration while they do.
SETUP_TOOLS = re.compile(r"apt(?:-get|-cache|-config|-mark|-key)?|aptitude|dpkg(?:-[a-z]+)*|curl|wget"
                         r"|pip(?:\d+(?:\.\d+)*)?|uvx?")
PYTHON = re.compile(r"python(?:\d+(?:\.\d+)*)?")
PYTHON_SETUP_MODULES = frozenset({"pip", "pip3", "ensurepip", "uv"})  # `python3 -m pip install ...`
RUNNERS = frozenset({"uv", "uvx"})  # setup tools that then run the command they were given (uvx, uv run)
# Where setup tools keep their own files: installed software, package state, system configuration.
TOOL_PLACES = SYSTEM_DIRS + PACKAGE_STATE_DIRS + ("/etc",)
HOME_TOOL_FILES = frozenset({"ldaprc"})  # libldap (which curl loads) reads $HOME/ldaprc beside $HOME/.ldaprc
TERMINAL_LIBRARY = re.compile(r"lib(?:readline|history|tinfow?|ncursesw?|edit)\.so(?:\.\d+)*")
TERMINAL_HOME_FILES = frozenset({".inputrc", ".terminfo"})  # readline's and terminfo's, under $HOME
TERMINAL_SYSTEM_FILES = ("/etc/inputrc", "/etc/terminfo", "/lib/terminfo", "/usr/lib/terminfo", "/usr/share/terminfo")
OPEN_CALLS = ("open(", "openat(", "openat2(", "creat(")
LOOKUP_KINDS = frozenset({"reads", "stats", "missing", "listed"})
_CLONES = ("clone(", "clone3(", "fork(", "vfork(")
_EXECS = ("execve(", "execveat(")


def home_entry(path: str, home: str) -> tuple[str, str] | None:
    """(home directory, name of the entry below it that holds `path`) when `path` lies in a home directory: /root,
    /home/USER or the verifier's $HOME; else None."""
    for directory in dict.fromkeys(("/root", home.rstrip("/"))):
        if directory and path.startswith(directory + "/"):
            return directory, path[len(directory) + 1:].split("/", 1)[0]
    parts = path.split("/", 4)
    if len(parts) >= 4 and parts[1] == "home" and parts[2] and parts[3]:
        return f"/home/{parts[2]}", parts[3]
    return None


def is_tool_place(path: str, home: str, workdir: str) -> bool:
    """Rule 2: a dot-entry of a home directory (unless the workdir lies inside it), or a system directory outside
    the workdir (an image's WORKDIR may be /usr/src/app)."""
    entry = home_entry(path, home)
    if entry is not None:
        directory, name = entry
        if is_under(workdir, (f"{directory}/{name}",)):
            return False
        return name.startswith(".") or name in HOME_TOOL_FILES
    return is_under(path, TOOL_PLACES) and not is_under(path, (workdir,))


def is_terminal_file(path: str, home: str) -> bool:
    """Rule 3's files: readline's inputrc and the terminfo directories, the home's and the system's."""
    entry = home_entry(path, home)
    if entry is not None and entry[1] in TERMINAL_HOME_FILES:
        return True
    return is_under(path, TERMINAL_SYSTEM_FILES)


def is_setup_tool(name: str, argv: tuple[str, ...]) -> bool:
    """A program of SETUP_TOOLS by its name, or a Python running one as a module (`python3 -m pip`)."""
    if SETUP_TOOLS.fullmatch(name):
        return True
    if PYTHON.fullmatch(name):
        for flag, module in zip(argv[1:], argv[2:]):
            if flag == "-m":
                return module in PYTHON_SETUP_MODULES
            if flag.startswith("-m"):
                return flag[2:] in PYTHON_SETUP_MODULES
            if not flag.startswith("-"):
                return False  # a script: what follows is its arguments
    return False


def exec_argv(call: str) -> tuple[str, ...]:
    """The argument list of an execve/execveat line, strings as strace printed them (a string cut at `-s` ends with
    `...` in the log and is compared as printed)."""
    paren = call.find("(") + 1
    first = AT_ARGS.match(call, paren) if call.startswith("execveat(") else STRING.match(call, paren)
    if first is None or not call.startswith(", [", first.end()):
        return ()
    pos, argv = first.end() + 3, []
    while (string := STRING.match(call, pos)) is not None:
        argv.append(unescape(string[1]))
        pos = string.end() + (3 if call.startswith("...", string.end()) else 0)
        if not call.startswith(", ", pos):
            break
        pos += 2
    return tuple(argv)


class _State:
    """What rule 1 and rule 3 need to know of one process."""

    __slots__ = ("setup", "runner", "terminal")

    def __init__(self, setup: bool = False, runner: tuple[str, ...] | None = None, terminal: bool = False):
        self.setup = setup        # a setup tool, or started by one (rule 1)
        self.runner = runner      # argv of the nearest runner (uv, uvx) it descends from, while setup
        self.terminal = terminal  # has loaded a terminal library since its last exec (rule 3)

    def copy(self) -> _State:
        return _State(self.setup, self.runner, self.terminal)


class VerifierTraceParser(TraceParser):
    """The verifier's trace parser (judge._parse_trace), which also sorts each lookup of the verifier's own processes
    into start-up reads (the rules above) and the rest. `startup_reads()`: the paths of which every lookup after the
    verifier's mark was a start-up read.

    Each process's state lives with its TracedProcess object, which the parser makes anew for every fork: a pid the
    kernel reuses gets a new object, and a child inherits its parent's state at the fork (children whose lines came
    before their parent's clone returned are replayed by the parser once it has, so they inherit too)."""

    def __init__(self, home: str, workdir: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self._home, self._workdir = home or "/root", workdir.rstrip("/") or "/"
        self._states: dict[TracedProcess, _State] = {}  # by identity: TracedProcess defines no equality
        self._candidate: dict[str, tuple[bool, bool]] = {}  # path -> (a tool place, a terminal file)
        self._call = ""  # the syscall line being dispatched (its open flags)
        self._startup: set[str] = set()
        self._inspected: set[str] = set()

    def startup_reads(self) -> set[str]:
        return self._startup - self._inspected

    def _state(self, proc: TracedProcess) -> _State:
        """`proc`'s state; a process not yet seen takes its parent's. The walk up the parents visits each process
        object at most once, so it ends whatever the parent links are."""
        state = self._states.get(proc)
        if state is not None:
            return state
        unknown, seen, ancestor = [], set(), proc
        while ancestor is not None and ancestor not in self._states and id(ancestor) not in seen:
            seen.add(id(ancestor))
            unknown.append(ancestor)
            ancestor = ancestor.parent
        base = self._states.get(ancestor) if ancestor is not None else None
        for process in reversed(unknown):
            base = self._states[process] = base.copy() if base is not None else _State()
        return base

    def _dispatch(self, proc: TracedProcess, tid: int, seg: Segment, rest: str) -> None:
        self._call = rest
        if rest.startswith(_CLONES):
            self._state(proc)
            super()._dispatch(proc, tid, seg, rest)
            _, result = split_result(rest)
            child = self._procs.get(strace_pid(result)) if result[:1].isdigit() else None
            if child is not None:
                self._state(child)  # pinned now: the parent's state at the fork, whatever it runs later
            return
        super()._dispatch(proc, tid, seg, rest)
        if rest.startswith(_EXECS) and split_result(rest)[1].startswith("0"):
            self._exec(self._state(proc), proc.name, exec_argv(rest))

    @staticmethod
    def _exec(state: _State, name: str, argv: tuple[str, ...]) -> None:
        if is_setup_tool(name, argv):
            state.setup, state.runner = True, argv if name in RUNNERS else None
        elif state.setup and state.runner and 0 < len(argv) < len(state.runner) and \
                state.runner[-len(argv):] == argv:
            state.setup, state.runner = False, None  # the command the runner was given: the test
        state.terminal = False  # a new program: its libraries are yet to load

    def _record(self, proc: TracedProcess, seg: Segment, kind: str, record: str) -> None:
        super()._record(proc, seg, kind, record)
        if seg == SETUP or kind not in LOOKUP_KINDS:
            return
        if kind == "reads" and TERMINAL_LIBRARY.fullmatch(posixpath.basename(record)):
            self._state(proc).terminal = True
        candidate = self._candidate.get(record)
        if candidate is None:
            candidate = self._candidate[record] = (is_tool_place(record, self._home, self._workdir),
                                                   is_terminal_file(record, self._home))
        tool_place, terminal_file = candidate
        if not (tool_place or terminal_file):
            return
        state = self._state(proc)
        library_call = not (self._call.startswith(OPEN_CALLS) and "O_CLOEXEC" in self._call)
        if (tool_place and state.setup) or (terminal_file and state.terminal and library_call):
            self._startup.add(record)
        else:
            self._inspected.add(record)
