"""E holds what the tests inspect, not what the test tooling reads for itself (env/judging/startup_reads.py,
docs/credit.md#verifier-records, issue 35 item 5).

The rules on trace lines in the shape strace writes them (an excerpt of a real verifier trace of Harbor's standard
test.sh: apt-get update, curl | sh, uvx ... pytest), then real episodes whose Harbor-shaped test.sh runs real setup
tools offline (apt-get, dpkg, curl, pip, Python's readline), and the credit an agent's command gets there.
"""

from __future__ import annotations

import json
import shutil

import pytest

from depgpo.credit import CreditConfig, compute_credit
from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.images.wheel_cache import prefetch
from depgpo.env.judging.judge import kept_effects
from depgpo.env.judging.startup_reads import (VerifierTraceParser, exec_argv, home_entry, is_setup_tool,
    is_terminal_file, is_tool_place)
from depgpo.env.judging.verifier import inspection_set
from depgpo.env.tracing.trace_state import TracedProcess
from depgpo.tasks import load_task
from depgpo.trajectory.scope import is_under
from tests.helpers import DATA
from tests.helpers.harbor_builder import make_harbor_task

NONCE = "a009ff796dd3380c"
MARK = (f'16    1.000000 newfstatat(AT_FDCWD</app>, "/.depgpo_mark/-1/0/{NONCE}", 0x7ffc0fa24630, 0) '
        "= -1 ENOENT (No such file or directory)")
# Real: the verifier's trace of Harbor's standard test.sh on the host backend (uv from the wheel cache, offline)
HARBOR_TRACE = DATA / "traces" / "harbor-verifier-startup.log"
TOOL_DOT_FILES = {"/root/.dpkg.cfg", "/root/.curlrc", "/root/.config/curlrc", "/root/.local/share/uv",
                  "/root/.local/share/uv/credentials/3859a629b26fda96", "/root/.terminfo", "/root/.inputrc"}


def parse(lines: list[str] | str, home: str = "/root", workdir: str = "/app") -> VerifierTraceParser:
    parser = VerifierTraceParser(home, workdir, untracked_prefixes=(), valid_marks={f"-1/{NONCE}"})
    parser.feed(lines if isinstance(lines, str) else "\n".join([MARK, *lines]) + "\n")
    return parser


def E_of(parser: VerifierTraceParser, workdir: str = "/app", startup: bool = True) -> set[str]:
    """E as the episode assembles it (uv and uvx, at ~/.local/bin, are the harness's: its verifier binds)."""
    left_out = parser.startup_reads() if startup else set()
    effects = kept_effects(parser.summary(0), lambda path: path not in left_out)
    return {d["record"] for d in inspection_set(effects, set(), {}, workdir)
            if not is_under(d["record"], ("/root/.local/bin",))}


def line(pid: int, call: str) -> str:
    return f"{pid}    1.000001 {call}"


def clone(parent: int, child: int) -> str:
    return line(parent, "clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, "
                        f"child_tidptr=0x7f0b38ccca10) = {child}")


def execve(pid: int, path: str, *argv: str) -> str:
    args = ", ".join(f'"{a}"' for a in argv)
    return line(pid, f'execve("{path}", [{args}], 0x55efb2aaed80 /* 18 vars */) = 0')


def opened(pid: int, path: str, flags: str = "O_RDONLY", fd: int = 3) -> str:
    return line(pid, f'openat(AT_FDCWD</app>, "{path}", {flags}) = {fd}<{path}>')


def absent(pid: int, path: str, flags: str = "O_RDONLY") -> str:
    return line(pid, f'openat(AT_FDCWD</app>, "{path}", {flags}) = -1 ENOENT (No such file or directory)')


def stat_absent(pid: int, path: str) -> str:
    return line(pid, f'newfstatat(AT_FDCWD</app>, "{path}", 0x7ffc0fa244f0, 0) = -1 ENOENT (No such file or directory)')


def exited(pid: int) -> str:
    return line(pid, "+++ exited with 0 +++")


# ---- the real trace --------------------------------------------------------------------------------------------------

def test_on_harbors_standard_test_sh_E_holds_the_answer_and_none_of_the_tools_dot_files():
    parser = parse(HARBOR_TRACE.read_text())
    assert parser.startup_reads() == TOOL_DOT_FILES | {"/etc/ld.so.preload"}  # apt-get's loader's lookup
    seen = parser.summary(0)
    assert TOOL_DOT_FILES <= seen.missing  # all of it still there for tampering, which reads the effects whole
    assert E_of(parser) == {"/app/answer.txt"}
    assert E_of(parser, startup=False) == {"/app/answer.txt"} | TOOL_DOT_FILES  # what E was before the rule


def test_the_command_a_runner_was_given_is_the_test_and_its_reads_stay():
    """uvx execs uv, whose child execs the runner's last arguments: pytest, the test. uv's interpreter query (a
    child printed before uv's clone returned) stays a setup tool."""
    query_ran = "48    1796454851.203385 <... execve resumed>) = 0\n"
    text = HARBOR_TRACE.read_text().replace("/root/.inputrc", "/root/.bashrc").replace(
        '"/app/answer.txt", O_RDONLY|O_CLOEXEC) = 12</app/answer.txt>',
        '"/root/.netrc", O_RDONLY|O_CLOEXEC) = 12</root/.netrc>').replace(
        query_ran, query_ran + stat_absent(48, "/root/.python-version") + "\n")
    startup = parse(text).startup_reads()
    assert "/root/.python-version" in startup  # uv's interpreter query
    assert "/root/.netrc" not in startup and "/root/.bashrc" not in startup  # pytest's (.bashrc: no terminal file)
    assert {"/root/.netrc", "/root/.bashrc"} <= E_of(parse(text))


# ---- rule 1 and 2: setup tools and their places -----------------------------------------------------------------------

def test_a_setup_tool_and_what_it_execs_read_their_own_places_and_elsewhere_is_inspection():
    parser = parse([
        clone(16, 17), execve(17, "/usr/bin/apt-get", "apt-get", "install", "-y", "curl"),
        clone(17, 18), execve(18, "/usr/lib/apt/methods/http", "/usr/lib/apt/methods/http"),
        absent(18, "/root/.netrc"), opened(18, "/etc/apt/auth.conf"),
        clone(16, 19), execve(19, "/usr/bin/pip", "pip", "install", "-r", "/app/requirements.txt"),
        absent(19, "/root/.config/pip/pip.conf"), absent(19, "/root/.pip/pip.conf"),
        opened(19, "/app/requirements.txt", "O_RDONLY|O_CLOEXEC"), stat_absent(19, "/app/setup.cfg"),
        clone(16, 20), execve(20, "/usr/bin/curl", "curl", "--version"), absent(20, "/root/ldaprc"),
        absent(20, "/home/tester/.curlrc"),
    ])
    assert parser.startup_reads() == {"/root/.netrc", "/etc/apt/auth.conf", "/root/.config/pip/pip.conf",
                                      "/root/.pip/pip.conf", "/root/ldaprc", "/home/tester/.curlrc"}
    assert E_of(parser) == {"/app/requirements.txt", "/app/setup.cfg"}


def test_a_path_the_test_reads_too_stays_in_E():
    parser = parse([
        clone(16, 17), execve(17, "/usr/bin/curl", "curl", "-fsS", "file:///tests/install.sh"),
        opened(17, "/root/.curlrc"), exited(17),
        clone(16, 18), execve(18, "/usr/bin/python3", "python3", "-m", "pytest", "/tests/test_outputs.py"),
        opened(18, "/root/.curlrc", "O_RDONLY|O_CLOEXEC"),
    ])
    assert parser.startup_reads() == set()
    assert E_of(parser) == {"/root/.curlrc"}


@pytest.mark.parametrize("argv, setup", [
    (("python3", "-m", "pip", "--version"), True), (("python3", "-mpip", "list"), True),
    (("python3.11", "-I", "-m", "ensurepip"), True), (("python3", "-m", "pytest"), False),
    (("python3", "check.py", "-m", "pip"), False), (("python3",), False),
])
def test_python_running_pip_is_a_setup_tool(argv, setup):
    assert is_setup_tool(argv[0], argv) is setup


@pytest.mark.parametrize("name", ["apt", "apt-get", "apt-cache", "dpkg", "dpkg-query", "dpkg-deb", "curl", "wget",
                                  "pip", "pip3", "pip3.11", "uv", "uvx"])
def test_setup_tools_by_name(name):
    assert is_setup_tool(name, (name,))


@pytest.mark.parametrize("name", ["bash", "sh", "python3", "pytest", "git", "cat", "curlie", "pipx", "uvicorn"])
def test_other_programs_are_no_setup_tools(name):
    assert not is_setup_tool(name, (name, "--version"))


@pytest.mark.parametrize("path, home, workdir, place", [
    ("/root/.curlrc", "/root", "/app", True),
    ("/root/.local/share/uv/credentials/x", "/root", "/app", True),
    ("/home/dev/.config/pip/pip.conf", "/root", "/app", True),
    ("/srv/home/.npmrc", "/srv/home", "/app", True),                 # the verifier's $HOME
    ("/root/notes.txt", "/root", "/app", False),                     # not a dot-entry
    ("/root/ldaprc", "/root", "/app", True),                         # libldap's, read by curl
    ("/root/.curlrc", "/root", "/root", True),                       # the workdir is the home itself
    ("/root/.work/app/x", "/root", "/root/.work/app", False),        # the workdir lies in the dot-entry
    ("/etc/apt/sources.list", "/root", "/app", True),
    ("/var/lib/dpkg/status", "/root", "/app", True),
    ("/usr/src/app/requirements.txt", "/root", "/usr/src/app", False),  # an image's WORKDIR in /usr
    ("/app/.venv/pyvenv.cfg", "/root", "/app", False),
    ("/tmp/pip-build/setup.py", "/root", "/app", False),
])
def test_tool_places(path, home, workdir, place):
    assert is_tool_place(path, home, workdir) is place


def test_home_entries():
    assert home_entry("/root/.config/uv/uv.toml", "/root") == ("/root", ".config")
    assert home_entry("/home/dev/.inputrc", "/root") == ("/home/dev", ".inputrc")
    assert home_entry("/home/dev", "/root") is None and home_entry("/rootx/.curlrc", "/root") is None
    assert home_entry("/app/.curlrc", "/") is None  # a $HOME of / makes no home of everything


# ---- rule 3: a terminal's start-up ------------------------------------------------------------------------------------

READLINE_LOADED = [
    clone(16, 17), execve(17, "/usr/bin/python3", "python3", "-m", "pytest", "/tests/test_outputs.py"),
    opened(17, "/usr/lib/x86_64-linux-gnu/libreadline.so.8.2", "O_RDONLY|O_CLOEXEC"),
    opened(17, "/usr/lib/x86_64-linux-gnu/libtinfo.so.6.4", "O_RDONLY|O_CLOEXEC", fd=4),
]


def test_readline_and_terminfo_lookups_are_start_up_and_a_pythons_own_open_is_not():
    parser = parse([*READLINE_LOADED, stat_absent(17, "/root/.terminfo"), absent(17, "/root/.inputrc"),
                    opened(17, "/etc/inputrc", fd=5), opened(17, "/root/.terminfo/d/dumb", fd=6)])
    assert parser.startup_reads() == {"/root/.terminfo", "/root/.inputrc", "/etc/inputrc", "/root/.terminfo/d/dumb"}
    assert E_of(parser) == set()
    # the test opens ~/.inputrc itself (Python's open sets O_CLOEXEC): an inspection
    inspected = parse([*READLINE_LOADED, absent(17, "/root/.inputrc"),
                       opened(17, "/root/.inputrc", "O_RDONLY|O_CLOEXEC", fd=7)])
    assert inspected.startup_reads() == set() and E_of(inspected) == {"/root/.inputrc"}


def test_without_a_terminal_library_loaded_a_read_of_inputrc_is_the_tests():
    """`cat ~/.inputrc` in test.sh opens without O_CLOEXEC, but cat loads no readline: the forked cat inherits its
    shell's libraries only until it execs."""
    parser = parse([opened(16, "/usr/lib/x86_64-linux-gnu/libtinfo.so.6.4", "O_RDONLY|O_CLOEXEC"),
                    clone(16, 17), execve(17, "/usr/bin/cat", "cat", "/root/.inputrc"), opened(17, "/root/.inputrc")])
    assert parser.startup_reads() == set() and E_of(parser) == {"/root/.inputrc"}
    assert is_terminal_file("/root/.terminfo/x/xterm", "/root") and not is_terminal_file("/root/.bashrc", "/root")


# ---- processes: forks, reuse of pids, children seen before their clone returns ---------------------------------------

def test_a_reused_pid_is_a_new_process():
    parser = parse([
        clone(16, 27), execve(27, "/usr/bin/curl", "curl", "-fsS", "file:///tests/x"), absent(27, "/root/.curlrc"),
        exited(27),
        clone(16, 27), execve(27, "/usr/bin/cat", "cat", "/root/.netrc"), opened(27, "/root/.netrc"),
    ])
    assert parser.startup_reads() == {"/root/.curlrc"}
    assert E_of(parser) == {"/root/.netrc"}


def test_a_child_whose_lines_come_before_its_clone_returns_inherits_its_parent():
    parser = parse([
        clone(16, 30), execve(30, "/usr/bin/apt-get", "apt-get", "update"),
        line(30, "clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>"),
        line(31, 'execve("/usr/lib/apt/methods/http", ["/usr/lib/apt/methods/http"], 0x7ffe9ad8a230 /* 18 vars */'
                 " <unfinished ...>"),
        line(30, "<... clone resumed>, child_tidptr=0x7f31fd447b10) = 31"),
        line(31, "<... execve resumed>) = 0"),
        absent(31, "/root/.netrc"),
    ])
    assert parser.startup_reads() == {"/root/.netrc"}


def test_a_thread_of_a_setup_tool_is_that_tool():
    parser = parse([
        clone(16, 30), execve(30, "/root/.local/bin/uv", "uv", "pip", "list"),
        line(30, "clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM, "
                 "child_tid=0x7f70abf7f990} => {parent_tid=[31]}, 88) = 31"),
        line(31, 'statx(AT_FDCWD</app>, "/root/.local/share/uv", AT_STATX_SYNC_AS_STAT, STATX_ALL, 0x7f70) '
                 "= -1 ENOENT (No such file or directory)"),
    ])
    assert parser.startup_reads() == {"/root/.local/share/uv"}


def test_the_walk_up_the_parents_ends_even_on_a_cycle():
    parser = VerifierTraceParser("/root", "/app")
    a = TracedProcess(1, 0, "a", None, None, False)
    b = TracedProcess(2, 0, "b", None, a, False)
    a.parent = b  # no parser makes this; the walk must end all the same
    assert parser._state(b).setup is False and parser._state(a) is not parser._state(b)


def test_what_the_verifier_did_before_its_mark_is_not_its_own():
    parser = parse("\n".join([clone(15, 16), execve(16, "/usr/bin/curl", "curl"), absent(16, "/root/.curlrc"),
                              MARK, opened(16, "/root/.netrc")]) + "\n")
    assert parser.startup_reads() == {"/root/.netrc"}  # after the mark, still curl's own
    assert "/root/.curlrc" not in parser.summary(0).missing


# ---- argv as strace prints it ------------------------------------------------------------------------------------------

def test_exec_argv():
    assert exec_argv('execve("/usr/bin/python3", ["python3", "-c", "print(\\"a, b\\")", "x"], 0x1 /* 3 vars */)'
                     " = 0") == ("python3", "-c", 'print("a, b")', "x")
    assert exec_argv('execve("/usr/bin/sh", ["sh", "-c", "aaaa"..., "b"], 0x1 /* 3 vars */) = 0') == (
        "sh", "-c", "aaaa", "b")
    assert exec_argv('execveat(3</usr/bin>, "env", ["env", "uv"], 0x1 /* 3 vars */, 0) = 0') == ("env", "uv")
    assert exec_argv('execve("/x", NULL, NULL) = 0') == ()


# ---- real episodes -----------------------------------------------------------------------------------------------------

# Harbor's standard test.sh with the steps that need the network made offline: the tools are the real ones, each
# reading its own dot-files (apt-get and dpkg ~/.dpkg.cfg, curl ~/.curlrc and ~/.config/curlrc, pip
# ~/.config/pip/pip.conf and ~/.pip/pip.conf); the installer comes from a file:// URL.
OFFLINE_HARBOR_TEST_SH = """\
#!/bin/bash
apt-get install -y --no-upgrade curl
dpkg -s curl > /dev/null
curl -fsSL file:///tests/install.sh | sh
pip --version

if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set. Please set a WORKDIR in your Dockerfile before running this script."
    exit 1
fi

PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -p no:cacheprovider -rA /tests/test_outputs.py
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
ANSWER_TEST = """
def test_answer():
    assert open("/app/answer.txt").read() == "42\\n"
"""
# pytest 8 imports readline before it captures output (_pytest.capture._readline_workaround): the test process
# itself then looks up ~/.terminfo and opens ~/.inputrc. Debian's pytest 7 does not, so the test imports it first.
READLINE_ANSWER_TEST = "import readline  # noqa: F401  (as pytest 8 does)\n" + ANSWER_TEST
AGENT_COMMANDS = [
    "echo 42 > /app/answer.txt",
    "printf -- '--max-time 30\\n' > ~/.curlrc",          # curl's configuration, which the verifier's curl reads
    "pip config set global.timeout 30",                 # pip's: ~/.config/pip/pip.conf
    "printf 'set bell-style none\\n' > ~/.inputrc",      # readline's, which the test process's readline reads
]
needs_tools = pytest.mark.skipif(any(shutil.which(t) is None for t in ("apt-get", "dpkg", "curl", "pip")),
                                 reason="the test.sh runs apt-get, dpkg, curl and pip")


def run_harbor_episode(tmp_path, commands: list[str], test_sh: str = OFFLINE_HARBOR_TEST_SH,
                       test_py: str = READLINE_ANSWER_TEST) -> dict:
    task_dir = make_harbor_task(tmp_path, "t", instruction="Write 42 to /app/answer.txt.", test_py=test_py)
    (task_dir / "tests" / "test.sh").write_text(test_sh)
    (task_dir / "tests" / "install.sh").write_text("echo installed from a file URL\n")
    with Episode(load_task(task_dir), EpisodeConfig(command_timeout_s=60), out_dir=tmp_path / "out") as ep:
        for turn, command in enumerate(commands):
            ep.run_command(command, turn=turn)
        ep.verify()
    return json.loads((tmp_path / "out" / "trajectory.json").read_text())


@needs_tools
@pytest.mark.sandbox
def test_E_of_a_harbor_test_sh_holds_what_the_test_inspects_and_none_of_the_tools_files(tmp_path):
    traj = run_harbor_episode(tmp_path, AGENT_COMMANDS)
    verifier = traj["verifier"]
    assert verifier["reward"] == 1.0 and not verifier["tampering"], verifier["output"]
    assert "installed from a file URL" in verifier["output"] and "pip " in verifier["output"]  # the tools ran
    assert verifier["E"] == ["/app/answer.txt"] and verifier["E_source"] == "trace"
    assert traj["tracked_roots"] == ["/app"]
    home_files = {"/root/.curlrc", "/root/.config/pip/pip.conf", "/root/.inputrc"}
    assert home_files <= {w["path"] for c in traj["commands"] for w in c["writes"]}  # the agent did write them
    credit = compute_credit(traj, CreditConfig())
    assert [c.direct for c in credit.commands] == [1.0, 0.0, 0.0, 0.0]
    assert [c.q for c in credit.commands] == [1.0, 0.0, 0.0, 0.0] and credit.turn_credit == [1.0, 0.0, 0.0, 0.0]


# Harbor's standard test.sh as written, but for `-p`: the host backend stands for python:3.11-slim, whose Python
# uvx then finds (uv and the pinned wheels come from the local wheel cache, offline: verifier_tools.py).
STANDARD_HARBOR_TEST_SH = OFFLINE_HARBOR_TEST_SH.replace("""apt-get install -y --no-upgrade curl
dpkg -s curl > /dev/null
curl -fsSL file:///tests/install.sh | sh
pip --version
""", """apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
""").replace("PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -p no:cacheprovider -rA /tests/test_outputs.py",
             "uvx -p 3.11 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json "
             "/tests/test_outputs.py -rA")


@pytest.mark.sandbox
def test_uvx_pytest_behind_apt_get_and_curl_inspects_the_answer_alone(tmp_path, wheel_cache):
    needs = make_harbor_task(tmp_path / "needs", "t", instruction="-", test_py="")
    (needs / "tests" / "test.sh").write_text(STANDARD_HARBOR_TEST_SH)
    assert not prefetch([load_task(needs)], wheel_cache)  # uv 0.9.5 and the pinned wheels (quick once cached)
    traj = run_harbor_episode(tmp_path, ["echo 42 > /app/answer.txt", "mkdir -p ~/.local/share/uv"],
                              test_sh=STANDARD_HARBOR_TEST_SH, test_py=ANSWER_TEST)
    verifier = traj["verifier"]
    assert verifier["reward"] == 1.0, verifier["output"]
    assert "pytest-8.4.1" in verifier["output"]  # uvx's pytest, which imports readline itself
    assert verifier["E"] == ["/app/answer.txt"]
    credit = compute_credit(traj, CreditConfig())
    assert [c.q for c in credit.commands] == [1.0, 0.0]  # the agent's uv data directory earns nothing
