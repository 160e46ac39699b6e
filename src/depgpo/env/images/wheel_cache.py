"""The local wheel cache: what tasks install from PyPI, fetched once beforehand so builds and verifiers run offline.

`depgpo data prefetch PATH` reads every task's Dockerfile (`RUN pip install ...`) and verifier script (uv's installer,
`uvx -w ...`, `pip install ...`) and pip-downloads those requirements as wheels for the Python of the task's image
(and any `uvx -p` version) into `agent.environment.wheel_cache` (default ~/.cache/depgpo/wheels). Image builds see
the cache through a build-time pip.conf (images.py); verifiers through verifier_tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.images import offline_needs, verifier_tools
from depgpo.tasks.task import Task


@dataclass
class TaskPackages:
    """What one task installs from PyPI: one group per install step (each resolves on its own, as when it runs)."""

    groups: list[tuple[str, list[str]]] = field(default_factory=list)  # (Python version, requirements)
    unknown_python: list[str] = field(default_factory=list)  # for a Python not known before the image is built

    def add(self, python: str | None, requirements: list[str]) -> None:
        if requirements and python:
            self.groups.append((python, requirements))
        elif requirements:
            self.unknown_python += requirements


def task_packages(task: Task) -> TaskPackages:
    packages = TaskPackages()
    python = offline_needs.image_python(task, offline_needs.build_script(task))
    for command in task.setup_commands:  # the Dockerfile's RUN steps
        for match in verifier_tools.PIP_INSTALL.finditer(verifier_tools.joined_lines(command)):
            packages.add(python, verifier_tools.requirements_in(match["args"]))
    if task.format != "harbor":  # TB1's run-tests.sh is replaced offline by pytest through uv (verifier_tools)
        packages.add(python or "3.13", ["uv", "pytest"])
        return packages
    needs = verifier_tools.verifier_needs(task.verifier_script.read_text(errors="replace"))
    for install_python, requirements in needs.installs:
        packages.add(install_python or python, requirements)
    if needs.uv_version is not None:
        packages.add(python or "3.13", [f"uv=={needs.uv_version}" if needs.uv_version else "uv"])
    return packages


def prefetch(tasks: list[Task], wheels: Path) -> list[str]:
    """Download every task's packages into `wheels`; one line per task that could not be served, else []."""
    failures = []
    for task in tasks:
        packages = task_packages(task)
        for python, requirements in packages.groups:
            error = verifier_tools.prefetch(requirements, python, wheels)
            if error:
                failures.append(f"{task.id}: pip download for Python {python} of {' '.join(requirements)}: "
                                f"{error.splitlines()[-1]}")
        if packages.unknown_python:
            failures.append(f"{task.id}: installs {' '.join(packages.unknown_python)} for a Python not known "
                            "before its image is built (its base has no recipe)")
    return failures
