"""Check a task set before running it: what is malformed, and what episodes here cannot reproduce.

Backs `depgpo data check PATH`. A task is ok when it loads, its environment can be had here (the host where it
stands for the task's image, else the image: in the store, pulled, or built on bases bootstrapped from Debian
packages), nothing its build, verifier or oracle downloads is missing offline (offline_needs), and it has an oracle;
with `--oracle`, when its oracle also scores 1 in a real episode. Notes are what a run should know but that does
not stop it: where the image comes from, how a bootstrapped base differs from the real one.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.images import backend as images
from depgpo.env.images import base_images
from depgpo.env.images.offline_needs import build_problems, image_contents, internet_reachable, run_problems
from depgpo.env.sandbox.layout import checked_workdir
from depgpo.tasks import load_task, task_dirs
from depgpo.tasks.dockerfile import external_bases
from depgpo.tasks.task import Task, TaskFormatError, offline_test_command, verifier_offline_blockers

_TEST_FUNCTION = re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)\s*\(", re.MULTILINE)


@dataclass
class TaskReport:
    path: Path
    format: str | None  # None when the task did not load
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    backend: str | None = None  # where its episodes run: host | image
    oracle_reward: float | None = None  # with --oracle: the oracle episode's reward

    @property
    def ok(self) -> bool:
        return not self.problems


def check_task(path: Path | str, backend: str = "auto", runtime: str = "auto", wheels: Path | None = None,
               oracle: bool = False, build: bool = True) -> TaskReport:
    """What stops the task at `path` from running here as its benchmark intends, and what a run should know.
    `backend` is agent.environment.backend. With `build` (the default) the image backend gets the task's image as
    an episode would (pulled or built, cached: a build failure is the builder's own error) and looks inside it;
    without, it predicts from the Dockerfile. With `oracle`, a task that passes every check runs its solution in a
    real episode, and a reward below 1 is a problem too."""
    path = Path(path)
    wheels = wheels or images.DEFAULT_WHEELS
    try:
        task = load_task(path)
    except TaskFormatError as e:
        return TaskReport(path, None, [str(e)])
    report = TaskReport(path, task.format)
    try:
        checked_workdir(task.workdir)
        report.backend = images.backend_for(task, backend)
    except (ValueError, images.ImageError) as e:
        report.problems.append(str(e))
        return report
    if report.backend == "host":
        report.problems += [f"backend host: {reason}" for reason in images.host_mismatch(task)]
    else:
        _check_image(task, report, runtime)
        report.problems += build_problems(task, wheels)
        contents = None
        if build and report.ok:
            try:
                system = images.system_root_for(task, "image", runtime, wheels=wheels)
                contents = image_contents(system.path)
            except images.ImageError as e:
                report.problems.append(f"the environment could not be made: {e}")
        report.problems += run_problems(task, wheels, contents)
    if task.solution_script is None:
        oracle_file = "solution/solve.sh" if task.format == "harbor" else "solution.sh"
        report.problems.append(f"no oracle solution ({oracle_file})")
    if task.format == "tb1":
        _check_verifier(task, report)
        _check_tb1(task, report)
    if oracle and report.ok:
        _run_oracle(task, report, backend, runtime, wheels)
    return report


def check_task_set(path: Path | str, backend: str = "auto", runtime: str = "auto", wheels: Path | None = None,
                   oracle: bool = False, build: bool = True) -> list[TaskReport]:
    """A report per task of the task set at `path` (or for `path` itself when it is one task)."""
    return [check_task(d, backend, runtime, wheels, oracle, build) for d in task_dirs(path)]


def format_reports(reports: list[TaskReport]) -> str:
    lines = []
    for report in reports:
        where = f", {report.backend}" if report.backend else ""
        oracle = f", oracle {report.oracle_reward:g}" if report.oracle_reward is not None else ""
        lines.append(f"{'ok  ' if report.ok else 'FAIL'} {report.path.name} ({report.format or 'unreadable'}"
                     f"{where}{oracle})")
        lines += [f"    problem: {p}" for p in report.problems]
        lines += [f"    note: {n}" for n in report.notes]
    lines.append(f"{sum(r.ok for r in reports)} of {len(reports)} tasks ok")
    return "\n".join(lines)


def _check_image(task: Task, report: TaskReport, runtime: str) -> None:
    """Whether the image backend can get the task's image: its store, a registry, or a build on bases that are in
    the store, pullable, or bootstrapped from Debian packages. Nothing is pulled, built or unpacked here."""
    try:
        name = images.find_runtime(runtime)
    except images.ImageError as e:
        report.problems.append(str(e))
        return
    has_dockerfile = task.dockerfile is not None
    if task.docker_image:
        reference = base_images.qualified(task.docker_image)
        if name not in images.OCI_RUNTIMES or images.in_local_store(reference, name):
            report.notes.append(f"image {reference}: in {name}'s store")
            return
        if internet_reachable():
            report.notes.append(f"image {reference}: pulled by the first episode")
            return
        if not has_dockerfile:
            report.problems.append(f"image {reference} is not in {name}'s store and no registry is reachable; "
                                   "load it first, or give the task its environment/Dockerfile")
            return
        report.notes.append(f"image {reference} cannot be pulled here: built from {task.dockerfile.name}")
    if not has_dockerfile:
        report.problems.append("the task names no docker_image and has no Dockerfile")
        return
    if name not in images.OCI_RUNTIMES:
        report.problems.append(f"{name} cannot build environment/Dockerfile: name an image in [environment] "
                               "docker_image, or use podman or docker")
        return
    for base in external_bases(task.dockerfile.read_text(errors="replace")):
        full, recipe = base_images.qualified(base), base_images.recipe_for(base)
        if images.in_local_store(full, name) and recipe is None:
            report.notes.append(f"FROM {base}: in {name}'s store")
        elif recipe is None and not internet_reachable():
            report.problems.append(f"FROM {base}: not in {name}'s store, no registry is reachable, and it is not a "
                                   "base this project bootstraps (debian:*, python:3.X*, ubuntu:*)")
        elif recipe is not None and not internet_reachable():
            kind = "approximated" if recipe.approximated else "bootstrapped"
            report.notes.append(f"FROM {base}: {kind} from Debian {recipe.release} packages"
                                + (f" ({'; '.join(recipe.differences)})" if recipe.differences else ""))
            if shutil.which("mmdebstrap") is None and not images.in_local_store(full, name):
                report.problems.append(f"FROM {base}: bootstrapping it needs mmdebstrap (apt-get install mmdebstrap)")


def _run_oracle(task: Task, report: TaskReport, backend: str, runtime: str, wheels: Path) -> None:
    """The oracle in a real episode (build included): the verdict is what happens. A task whose oracle fails in the
    verifier's image view is run again in the full one: if it passes there, the task needs `view = "full"`."""
    try:
        verifier = _oracle_verdict(task, backend, runtime, wheels, "task")
        full = None
        if verifier["reward"] < 1.0 and task.verifier_view == "image":
            full = _oracle_verdict(task, backend, runtime, wheels, "full")
    except images.ImageError as e:
        report.problems.append(f"the environment could not be made: {e}")
        return
    report.oracle_reward = verifier["reward"]
    if full is not None and full["reward"] == 1.0:
        report.problems.append(
            f"the oracle scores 1 only when the verifier sees the agent's whole file system (it scored "
            f"{verifier['reward']:g} seeing the image and the workdir {task.workdir}): add view = \"full\" to the "
            f"[verifier] table of task.toml, where the judge then rests on its rules (docs/threat-model.md"
            f"#the-verifiers-view)")
    elif verifier["reward"] < 1.0:
        why = verifier["error"] or (verifier["output"].strip().splitlines() or ["(no output)"])[-1][:200]
        report.problems.append(f"the oracle scored {verifier['reward']:g}: {why}")


def _oracle_verdict(task: Task, backend: str, runtime: str, wheels: Path, view: str) -> dict:
    from depgpo.env.cli import oracle_commands
    from depgpo.env.episode import Episode, EpisodeConfig

    config = EpisodeConfig(backend=backend, runtime=runtime, wheel_cache=wheels, verifier_view=view,
                           command_timeout_s=task.agent_timeout_s or 900.0)
    with Episode(task, config) as episode:
        for command in oracle_commands(task):
            episode.run_command(command)
        return episode.verify()


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
