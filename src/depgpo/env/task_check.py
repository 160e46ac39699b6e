"""Check a task set before running it: what is malformed, and what episodes here cannot reproduce.

Backs `depgpo data check PATH`. A task is ok when it loads, every step of its environment can be replayed, it has an
oracle solution, and its verifier can run here (offline, if need be). Notes are what a run should know but that
does not stop it: packages to install from a local cache, a verifier rewritten to run offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env import images
from depgpo.env.sandbox import checked_workdir
from depgpo.tasks import load_task, task_dirs
from depgpo.tasks.task import Task, TaskFormatError, offline_test_command, verifier_offline_blockers

_TEST_FUNCTION = re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)\s*\(", re.MULTILINE)


@dataclass
class TaskReport:
    path: Path
    format: str | None  # None when the task did not load
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_task(path: Path | str, backend: str = "host", runtime: str = "auto") -> TaskReport:
    """What stops the task at `path` from running here as its benchmark intends, and what a run should know.
    `backend` is agent.environment.backend: on `host` the Dockerfile is replayed; on `image` the image is used."""
    path = Path(path)
    try:
        task = load_task(path)
    except TaskFormatError as e:
        return TaskReport(path, None, [str(e)])
    report = TaskReport(path, task.format)
    try:
        checked_workdir(task.workdir)
    except ValueError as e:
        report.problems.append(str(e))
    if backend == "image":
        _check_image(task, report, runtime)
    else:
        report.problems += [f"cannot replay: {step}" for step in task.unreplayable]
        report.notes += [f"installs packages (needs them on the host or in a local cache): {' '.join(c.split())}"
                         for c in task.package_installs]
    if task.solution_script is None:
        oracle = "solution/solve.sh" if task.format == "harbor" else "solution.sh"
        report.problems.append(f"no oracle solution ({oracle})")
    _check_verifier(task, report)
    if task.format == "tb1":
        _check_tb1(task, report)
    return report


def check_task_set(path: Path | str, backend: str = "host", runtime: str = "auto") -> list[TaskReport]:
    """A report per task of the task set at `path` (or for `path` itself when it is one task)."""
    return [check_task(d, backend, runtime) for d in task_dirs(path)]


def format_reports(reports: list[TaskReport]) -> str:
    lines = []
    for report in reports:
        lines.append(f"{'ok  ' if report.ok else 'FAIL'} {report.path.name} ({report.format or 'unreadable'})")
        lines += [f"    problem: {p}" for p in report.problems]
        lines += [f"    note: {n}" for n in report.notes]
    lines.append(f"{sum(r.ok for r in reports)} of {len(reports)} tasks ok")
    return "\n".join(lines)


def _check_image(task: Task, report: TaskReport, runtime: str) -> None:
    """Whether the image backend can get the task's image; nothing is pulled, built or unpacked here."""
    try:
        name = images.find_runtime(runtime)
    except images.ImageError as e:
        report.problems.append(str(e))
        return
    if not task.docker_image:
        if name in images.OCI_RUNTIMES:
            report.notes.append(f"image built from environment/Dockerfile by {name} before the first episode")
        else:
            report.problems.append(f"{name} cannot build environment/Dockerfile: name an image in [environment] "
                                   "docker_image, or use podman or docker")
    elif name in images.OCI_RUNTIMES and not images.in_local_store(task.docker_image, name):
        report.notes.append(f"image {task.docker_image} is not in {name}'s local store: the first episode pulls it "
                            "(offline, load it first)")


def _check_verifier(task: Task, report: TaskReport) -> None:
    blockers = verifier_offline_blockers(task)
    if not blockers:
        return
    try:
        command = offline_test_command(task)
    except ValueError as e:
        report.problems.append(f"verifier needs the network ({'; '.join(blockers)}): {e}")
        return
    report.notes.append(f"verifier needs the network ({'; '.join(blockers)}); episodes run instead: {command}")


def _check_tb1(task: Task, report: TaskReport) -> None:
    """Terminal-Bench-1 scores from pytest's report, so the tests must be pytest and the weights must name them."""
    if task.metadata.get("run_tests_in_same_shell"):
        report.notes.append("run_tests_in_same_shell: the verifier runs in a fresh shell here, not the agent's")
    parser = task.metadata.get("parser_name") or "pytest"
    if parser != "pytest":
        report.problems.append(f"parser_name {parser!r}: only pytest results can be scored")
    if task.test_weights:
        defined = {name for host, _ in task.verifier_files if host.suffix == ".py"
                   for name in _TEST_FUNCTION.findall(host.read_text(errors="replace"))}
        for name in task.test_weights:
            if name.split("::")[-1] not in defined:
                report.problems.append(f"weights.json weighs {name}, which no test file defines")
