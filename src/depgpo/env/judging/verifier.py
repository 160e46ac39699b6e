"""The verifier's side of an episode: its inspection set E and its reward.

E (docs/credit.md#verifier-records) is taken from the trace of the verifier segment: files it read or existence-checked that the agent
could have changed, ports it connected to, agent processes it inspected. When the trace yields nothing usable (the
verifier crashed before inspecting anything, or ran untraced), E falls back to the paths and ports written in the
verifier's sources, and `E_source` says which.

What the trace shows is more than what the verifier checked; each rule below drops one kind of noise seen on real
tasks: files the verifier made itself, directories every process passes through, the lookups compilers, linkers and
the dynamic loader make on their own, and the lookups of rendering a traceback.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import shutil
import stat
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.judging.verifier_source import extract_verifier_records
from depgpo.trajectory.scope import HARNESS_DIRS, PACKAGE_STATE_DIRS, PSEUDO_DIRS, SYSTEM_DIRS, is_under

# Paths the verifier touches that are its own or the system's, never the agent's work.
VERIFIER_OWN_PREFIXES = HARNESS_DIRS + PSEUDO_DIRS
AGENT_HOME_DIRS = ("/tmp", "/root", "/home", "/srv", "/data", "/output", "/var/www")
# A read there is the program starting (libraries, ld.so.cache, nsswitch.conf), unless the agent wrote the file.
STARTUP_READ_PREFIXES = SYSTEM_DIRS + PACKAGE_STATE_DIRS + ("/etc",)
# Failed lookups that a toolchain makes of its own accord, never a check of the agent's work (a file it finds, it
# opens: that is a read and stays):
SHARED_LIBRARY_NAME = re.compile(r"lib[^/]*\.so(?:\.[0-9]+)*")  # linker and loader search each dir (/app/libgcc_s.so.1)
LOADER_SUBDIRS = frozenset({"glibc-hwcaps", "tls", "x86_64", "haswell", "xeon_phi", "avx512_1", "aarch64",
                            "i686"})  # ld.so's per-CPU subdirectories of each search dir (/app/lib/tls/x86_64)
PRECOMPILED_HEADER_SUFFIX = ".gch"  # cc1 tries NAME.gch before each header and source (/app/prog.c.gch)
FLAG_PREFIX = "-"  # ld's realpath of every argument joins its flags to the cwd (/app/-lc, /app/-lm)
# pytest parses a frame's statement under the pseudo-filename "source"; a frame whose file is gone makes the
# traceback renderer look that name up in the cwd (`/app/source`).
TRACEBACK_PSEUDO_FILE = "source"
# Traceback locations in the verifier's output: Python's `File "/app/x.py", line 3` and pytest's `x.py:3: Error`.
_TRACEBACK_LOCATION = re.compile(r'File "([^"\n]+)", line \d+|^([^\s:]+):\d+: ', re.MULTILINE)
_PYTEST_OUTCOME_RE = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED)\s+(\S+?)(?:\s+-\s.*)?$", re.MULTILINE)


def is_toolchain_probe(path: str) -> bool:
    """A failed lookup that a compiler, a linker or the dynamic loader made on its own (the constants above)."""
    parts = path.split("/")
    name = parts[-1]
    return (SHARED_LIBRARY_NAME.fullmatch(name) is not None or name.endswith(PRECOMPILED_HEADER_SUFFIX)
            or name.startswith(FLAG_PREFIX) or name in LOADER_SUBDIRS or parts[-2:-1] == ["glibc-hwcaps"])


def traceback_lookups(output: str, workdir: str) -> set[str]:
    """Paths the verifier's output shows as traceback locations, absolute (a relative one is the workdir's):
    rendering a frame looks its file up, so a failed lookup of one is the renderer's, not a check."""
    found = set()
    for match in _TRACEBACK_LOCATION.finditer(output):
        location = match[1] or match[2]
        if not location.startswith("<"):  # <string>, <frozen runpy>: no file
            found.add(posixpath.normpath(posixpath.join(workdir, location)))
    return found


def walked_through_dirs(workdir: str) -> set[str]:
    """Directories every process passes through or probes (gcc checks that /tmp is writable): no inspection."""
    workdir = workdir.rstrip("/") or "/"
    return {"/", workdir, *map(str, Path(workdir).parents), *AGENT_HOME_DIRS}  # /srv of /srv/app


def inspection_set(verifier_effects, agent_written: set[str], agent_processes: dict[int, str],
                   workdir: str, output: str = "") -> list[dict]:
    """E_detail from the verifier segment's effects (a trace_state.SegmentEffects) and, optionally, its output.

    The trace parser has already dropped untracked locations (system directories, caches); here we drop the
    verifier's own files (those it created or rewrote before reading them: a program it compiles, then runs), the
    directories every process walks through (`/`, `/tmp`, the workdir itself), the lookups a toolchain makes on
    its own, and the failed lookups of the files a traceback in `output` shows.
    """
    detail: dict[str, str] = {}
    walked_through = walked_through_dirs(workdir)
    agent_dirs = tuple(dict.fromkeys([workdir.rstrip("/"), *AGENT_HOME_DIRS]))
    made_by_verifier = verifier_effects.replaced_before_read  # what it read there was its own
    rendered = traceback_lookups(output, workdir) | {posixpath.join(workdir, TRACEBACK_PSEUDO_FILE)}

    def add(record: str, how: str) -> None:
        detail.setdefault(record, how)

    def agent_changeable(path: str, how: str) -> bool:
        if path in walked_through or is_under(path, VERIFIER_OWN_PREFIXES) or "/.local/lib/" in path:
            return False
        if path in made_by_verifier:
            return False
        if how == "missing" and (is_toolchain_probe(path) or path in rendered):
            return False
        if path in agent_written:
            return True
        if how != "read":  # existence probes outside the agent's directories are the test framework's
            return is_under(path, agent_dirs)  # own searches (pytest looks for /pytest.ini, /setup.py, ...)
        return is_under(path, agent_dirs) or not is_under(path, STARTUP_READ_PREFIXES)  # a workdir may lie in /usr or /opt

    for how, paths in (("read", verifier_effects.reads | verifier_effects.executed),
                       ("stat", verifier_effects.stats | verifier_effects.listed),
                       ("missing", verifier_effects.missing)):
        for path in sorted(paths):
            if agent_changeable(path, how):
                add(path, how)
    for port in sorted(verifier_effects.ports_connected):
        add(port, "connect")
    for proc in verifier_effects.probed + verifier_effects.killed:
        if proc.pid in agent_processes:
            add(f"proc:{agent_processes[proc.pid]}", "probe")
    return [{"record": r, "how": h} for r, h in detail.items()]


# The verifier's program files; its data (expected outputs, fixtures, logs with tracebacks) names paths it never
# inspects. A file without a suffix counts when it is a script (`#!`).
VERIFIER_SOURCE_SUFFIXES = (".py", ".sh", ".bash")


def is_verifier_source(path: Path) -> bool:
    """A program of the verifier (VERIFIER_SOURCE_SUFFIXES, or a `#!` script), not data it compares against."""
    if path.suffix in VERIFIER_SOURCE_SUFFIXES:
        return True
    if path.suffix:
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"#!"
    except OSError:
        return False


def inspected_records(effects, agent_written: set[str], agent_processes: dict[int, str], workdir: str, output: str,
                      provided: tuple[str, ...], verifier_files: list[Path]) -> tuple[list[dict], str]:
    """(E_detail, E_source): from the trace (less what the harness `provided`: its tools, not the agent's work), or
    where the trace shows nothing, from the verifier's sources ("static"); "none" when neither gives a record."""
    detail = [d for d in inspection_set(effects, agent_written, agent_processes, workdir, output=output)
              if not is_under(d["record"], provided)]
    if detail:
        return detail, "trace"
    detail = static_inspection_set(verifier_files, workdir)
    return detail, "static" if detail else "none"


def install_verifier_files(task, tests_dir: Path) -> None:
    """Copy the verifier's files under /tests (mounted in the verifier's mount namespace only)."""
    for host_path, sandbox_path in task.verifier_files:
        target = tests_dir / os.path.relpath(sandbox_path, "/tests")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(host_path, target)


def static_inspection_set(verifier_files: list[Path], workdir: str = "/app") -> list[dict]:
    """Fallback: absolute paths and ports written in the verifier's sources (the paper's extraction rules)."""
    sources = "\n".join(Path(p).read_text(errors="replace") for p in verifier_files if is_verifier_source(Path(p)))
    return [{"record": r, "how": "static"} for r in extract_verifier_records(sources, workdir)]


REWARD_FILE_MAX_BYTES = 1 << 20


def read_verifier_file(logs_dir: Path, name: str) -> str | None:
    """/logs/verifier/NAME as the verifier left it: a regular file's text (at most REWARD_FILE_MAX_BYTES), else
    None. Never follows a symlink and never blocks (a FIFO, a directory or a device there is not a reward)."""
    path = logs_dir / "verifier" / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read(REWARD_FILE_MAX_BYTES).decode("utf-8", "replace")


@dataclass
class Reward:
    value: float
    source: str
    tests: dict[str, bool] = field(default_factory=dict)
    error: str | None = None


def pytest_outcomes(output: str, junit_xml: str | None = None) -> dict[str, bool]:
    """Per-test pass/fail from a JUnit XML report, else from pytest's `-rA` short summary lines."""
    outcomes: dict[str, bool] = {}
    if junit_xml:
        try:
            for case in ET.fromstring(junit_xml).iter("testcase"):
                failed = any(child.tag in ("failure", "error") for child in case)
                skipped = any(child.tag == "skipped" for child in case)
                if not skipped:
                    outcomes[case.get("name", "")] = not failed
        except ET.ParseError:
            outcomes = {}
    if not outcomes:
        for status, node in _PYTEST_OUTCOME_RE.findall(output):
            if status in ("PASSED", "XFAIL", "FAILED", "ERROR", "XPASS"):
                outcomes[node.split("::")[-1]] = status in ("PASSED", "XFAIL")
    return outcomes


def compute_reward(reward_json: str | None, reward_txt: str | None, output: str, exit_code: int | None,
                   weights: dict[str, float] | None, junit_xml: str | None = None,
                   require_reward_file: bool = False) -> Reward:
    """Reward in [0, 1]: reward.json, else reward.txt (Harbor's order), else TB1 weights over test outcomes, else
    pytest/exit code. With `require_reward_file` (Harbor tasks) neither file means 0 and an error, as in Harbor."""
    tests = pytest_outcomes(output, junit_xml)
    if reward_json is not None:
        try:
            values = json.loads(reward_json)
            numbers = [float(v) for v in (values.values() if isinstance(values, dict) else [values])]
            value = numbers[0] if len(numbers) == 1 else sum(numbers) / len(numbers)
            return Reward(_clamp(value), "reward.json", tests)
        except (ValueError, TypeError, IndexError) as e:
            return Reward(0.0, "error", tests, f"/logs/verifier/reward.json is not a number or dict of numbers: {e}")
    if reward_txt is not None:
        try:
            return Reward(_clamp(float(reward_txt.strip())), "reward.txt", tests)
        except ValueError:
            return Reward(0.0, "error", tests, f"/logs/verifier/reward.txt is not a number: {reward_txt[:80]!r}")
    if require_reward_file:
        return Reward(0.0, "error", tests, "the verifier wrote neither /logs/verifier/reward.json nor reward.txt")
    if weights:
        if not tests:
            return Reward(0.0, "error", tests, "weights.json given but no per-test outcomes were reported")
        value = sum(w for name, w in weights.items() if tests.get(name, False))
        return Reward(_clamp(value), "weights.json", tests)
    if tests:
        return Reward(1.0 if all(tests.values()) else 0.0, "pytest", tests)
    if exit_code is None:
        return Reward(0.0, "error", tests, "verifier timed out")
    return Reward(1.0 if exit_code == 0 else 0.0, "exit_code", tests)


def _clamp(value: float) -> float:
    if not math.isfinite(value):  # Harbor refuses NaN and infinities too
        raise ValueError(f"{value} is not a finite number")
    return min(1.0, max(0.0, value))
