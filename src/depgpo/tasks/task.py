"""A task as episodes need it, whatever its on-disk format (Harbor or Terminal-Bench-1).

How an episode uses a Task:
1. its system: the task's image, built from `dockerfile` in `build_context` (env.images; `setup_commands`, the
   Dockerfile's RUN steps, run there and nowhere else), or this host where it stands for that image exactly (no RUN
   steps): then `app_files` are copied into the episode (a host directory stands for its contents) and `env` set;
2. start the agent's shell in `workdir` with `env`, and give the agent `instruction`;
3. copy `verifier_files` under /tests (read-only), run `test_command` as written (Harbor; what it downloads is
   served offline by env.verifier_tools), or `offline_test_command(task)` (Terminal-Bench-1, whose run-tests.sh
   needs helper scripts TB1 does not ship), in `workdir` with `env` and `verifier_env`, and read the reward:
   /logs/verifier/reward.json or reward.txt when written, else the per-test outcomes weighted by `test_weights`,
   else pytest's result.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.tasks.dockerfile import (DockerfileError, DockerfilePlan, network_fetch_commands,
                                     package_install_commands, parse_dockerfile, resolve_copies)

VERIFIER_LOGS = "/logs/verifier"
# image: the image's system and homes with the agent's workdir; full: the agent's whole file system (judge_view.py)
VERIFIER_VIEWS = ("image", "full")
# How this project runs pytest where it chooses the runner (the offline fallback, the generated tasks' test.sh):
# files in the workdir or / cannot change it: no cwd on sys.path (PYTHONSAFEPATH), no user site-packages, no
# plugin auto-loading, rootdir and conftest lookup confined to /tests, no ini file but /dev/null. (Variables, not
# flags, so that an image's older Python ignores what it does not know.)
ISOLATED_PYTEST = ("PYTHONSAFEPATH=1 PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
                   "python3 -m pytest -p no:cacheprovider --rootdir=/tests --confcutdir=/tests -c /dev/null")
_TESTS_REFERENCE = re.compile(r"(?<![\w./-])(?:\$\{?TEST_DIR\}?|/tests)/([\w./-]+)")


class TaskFormatError(ValueError):
    """A task directory that cannot be loaded: says which file, what is wrong, and how to fix it."""

    def __init__(self, path: Path | str, problem: str, fix: str):
        super().__init__(f"{path}: {problem}; {fix}")
        self.path = Path(path)
        self.problem = problem
        self.fix = fix


@dataclass
class Task:
    id: str
    root: Path  # absolute
    format: str  # "harbor" | "tb1"
    instruction: str
    tests_dir: Path
    test_command: str
    verifier_timeout_s: float
    agent_timeout_s: float | None  # None: the task sets no limit
    workdir: str = "/app"
    env: dict[str, str] = field(default_factory=dict)  # ENV of the Dockerfile (and TB1's docker-compose.yaml)
    app_files: list[tuple[Path, str]] = field(default_factory=list)  # (host path, sandbox path)
    setup_commands: list[str] = field(default_factory=list)  # the Dockerfile's RUN steps (the image build runs them)
    unreplayable: list[str] = field(default_factory=list)  # what the environment does that episodes cannot
    verifier_files: list[tuple[Path, str]] = field(default_factory=list)  # (host path, path under /tests)
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_script: Path | None = None
    test_weights: dict[str, float] | None = None  # test name -> weight, summing to 1 (TB1 weights.json)
    docker_image: str | None = None  # a prebuilt image named by the task
    dockerfile: Path | None = None     # the Dockerfile its image is built from, and the build context
    build_context: Path | None = None
    allow_internet: bool = True
    metadata: dict = field(default_factory=dict)
    verifier_view: str = "image"  # what of the agent's work its verifier sees: VERIFIER_VIEWS (env/sandbox/judge_view)

    @property
    def verifier_script(self) -> Path:
        """The host file behind `test_command`'s script."""
        sandbox_path = shlex.split(self.test_command)[-1]
        return next(host for host, path in self.verifier_files if path == sandbox_path)


def verifier_offline_blockers(task: Task) -> list[str]:
    """Why the task's verifier script cannot run in an episode without network; empty when it can."""
    script = task.verifier_script
    text = script.read_text(errors="replace")
    blockers = [f"{script.name} downloads: {c}" for c in network_fetch_commands(text)]
    blockers += [f"{script.name} installs packages: {c}" for c in package_install_commands(text)]
    provided = {path for _, path in task.verifier_files}
    for name in sorted(set(_TESTS_REFERENCE.findall(text))):
        if f"/tests/{name}" not in provided:
            blockers.append(f"{script.name} runs /tests/{name}, which the task does not provide")
    return blockers


def offline_test_command(task: Task, workdir: str | None = None, python: str = "python3") -> str:
    """The verifier command for a Terminal-Bench-1 episode without network (Harbor's test.sh runs as written).

    Harbor's usual tests/test.sh downloads uv, Python and pytest, runs pytest on the task's test file and writes
    /logs/verifier/reward.txt: 1 if every test passed, else 0. TB1's run-tests.sh downloads the same way and leaves
    scoring to the harness. When the script would download or install anything, or runs helper scripts the task
    does not ship (TB1's shared setup-uv-pytest.sh), we replace the whole script by what it is for: the sandbox's
    own `python3 -m pytest` on the test files the script names (all test files when it names none), writing
    reward.txt the same way (`python`: the interpreter that runs pytest; in an image, uv's, from the wheel cache).
    Packages the tests import must then be in the environment. Weighted TB1 tasks get no
    reward.txt: their reward is the weights of the passing tests, read from the JUnit report.
    A script that needs no network is kept as it is.
    """
    if not verifier_offline_blockers(task):
        return task.test_command
    test_files = _pytest_files(task)
    if not test_files:
        raise ValueError(f"{task.id}: {task.verifier_script.name} needs the network and the task has no "
                         f"test_*.py file to run offline instead")
    # No pytest cache or bytecode: /tests is read-only, and files pytest wrote under the workdir would show up as
    # writes in the verifier's trace.
    runner = ISOLATED_PYTEST.replace("python3 -m pytest", f"{python} -m pytest")  # an image may lack pytest: uv's
    run_pytest = (f"cd {shlex.quote(workdir or task.workdir)} && {runner} "
                  f"-rA --junitxml={VERIFIER_LOGS}/junit.xml {' '.join(test_files)}")
    if task.test_weights is not None:
        return f"mkdir -p {VERIFIER_LOGS}; {run_pytest}"
    return (f"mkdir -p {VERIFIER_LOGS}; {run_pytest}; status=$?; "
            f"if [ $status -eq 0 ]; then echo 1; else echo 0; fi > {VERIFIER_LOGS}/reward.txt; exit $status")


def _pytest_files(task: Task) -> list[str]:
    """Sandbox paths of the test files the verifier script names, else of all of them."""
    script = task.verifier_script.read_text(errors="replace")
    candidates = [path for _, path in task.verifier_files
                  if re.fullmatch(r"test_\w*\.py|\w*_test\.py", Path(path).name)]
    named = [path for path in candidates if path.removeprefix("/tests/") in script]
    return named or candidates


# --- shared by the format loaders -----------------------------------------------------------------------------


def seconds(value: object, where: Path, name: str, example: str) -> float:
    """A positive timeout from a task file (TOML or YAML), or a TaskFormatError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise TaskFormatError(where, f"{name} must be a positive number of seconds, got {value!r}",
                              f"write e.g. {example}")
    return float(value)


def read_environment(dockerfile: Path, context: Path, shown: Path) -> tuple[DockerfilePlan, list[tuple[Path, str]]]:
    """The replay plan of a task's Dockerfile and the files its COPY/ADD take from the build context."""
    try:
        plan = parse_dockerfile(dockerfile.read_text(errors="replace"))
        return plan, resolve_copies(plan, context)
    except DockerfileError as e:
        raise TaskFormatError(shown, str(e), e.fix) from None


def tree_files(directory: Path, sandbox_dir: str) -> list[tuple[Path, str]]:
    """(host file, sandbox path) for every file under `directory`, placed under `sandbox_dir`."""
    return [(path, f"{sandbox_dir}/{path.relative_to(directory).as_posix()}")
            for path in sorted(directory.rglob("*")) if path.is_file()]
