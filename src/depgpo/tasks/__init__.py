"""Tasks: load Harbor and Terminal-Bench-1 task directories into one `Task` that episodes can run.

`depgpo.env.checks.task_check` reports, for a whole task set, what cannot be run faithfully here.
"""

from __future__ import annotations

import re
from pathlib import Path

from depgpo.tasks.harbor import is_harbor_task, load_harbor_task
from depgpo.tasks.task import Task, TaskFormatError, offline_test_command, verifier_offline_blockers
from depgpo.tasks.tb1 import is_tb1_task, load_tb1_task

__all__ = ["Task", "TaskFormatError", "load_task", "load_task_set", "offline_test_command", "task_dirs",
           "verifier_offline_blockers"]


def load_task(path: Path | str) -> Task:
    """The task in directory `path`: Harbor (instruction.md + task.toml) or Terminal-Bench-1 (task.yaml)."""
    path = Path(path)
    if not path.is_dir():
        raise TaskFormatError(path, "is not a directory", "give the path of a task directory")
    harbor, tb1 = is_harbor_task(path), is_tb1_task(path)
    if harbor and tb1:
        raise TaskFormatError(path, "has both task.toml/instruction.md (Harbor) and task.yaml (Terminal-Bench-1)",
                              "keep the files of one format")
    if harbor:
        return load_harbor_task(path)
    if tb1:
        return load_tb1_task(path)
    raise TaskFormatError(path, "has neither instruction.md + task.toml (Harbor) nor task.yaml (Terminal-Bench-1)",
                          "add the task files, or point at the directory that holds them")


def task_dirs(path: Path | str) -> list[Path]:
    """The task directories of a task set: its subdirectories in natural order (2 before 10), `path` itself when it
    is a single task, or the lines of `path` when it is a list file (one task directory per line, as filtering
    writes rl_train.txt). Hidden directories and Python's __pycache__ are not tasks."""
    path = Path(path)
    if path.is_file():
        listed = [Path(line.strip()) for line in path.read_text().splitlines() if line.strip()]
        if not listed:
            raise TaskFormatError(path, "lists no task directories", "write one task directory per line")
        return listed
    if is_harbor_task(path) or is_tb1_task(path):
        return [path]
    if not path.is_dir():
        raise TaskFormatError(path, "is not a directory", "give the directory that holds the task directories")
    return sorted((d for d in path.iterdir() if d.is_dir() and not d.name.startswith(".") and d.name != "__pycache__"),
                  key=lambda d: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", d.name)])


def load_task_set(path: Path | str) -> list[Task]:
    """Every task of a task set; the first malformed task raises its TaskFormatError."""
    return [load_task(d) for d in task_dirs(path)]
