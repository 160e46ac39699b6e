"""`depgpo data check PATH`: validate a task set and report what would not run in this environment."""

from __future__ import annotations

import argparse
from pathlib import Path

from depgpo.env.images import BACKENDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    check = sub.add_parser("check", help="validate a task directory or a directory of tasks")
    check.add_argument("path", type=Path)
    check.add_argument("--runnable", type=Path, default=None,
                       help="also write the directories of the tasks that are ok, one per line (the task list the "
                            "pipeline stages read); then exit 0 when at least one task is ok")
    check.add_argument("--backend", choices=BACKENDS, default="host",
                       help="agent.environment.backend the episodes will use: host (replay the Dockerfile here, "
                            "default) or image (the task's container image)")
    check.add_argument("--runtime", default="auto", help="with --backend image: the container runtime (default auto)")


def run(args: argparse.Namespace) -> int:
    from depgpo.tasks import TaskFormatError
    from depgpo.env.task_check import check_task_set, format_reports

    try:
        reports = check_task_set(args.path, args.backend, args.runtime)
    except TaskFormatError as e:
        print(f"error: {e}")
        return 2
    print(format_reports(reports))
    ok = [r.path.resolve() for r in reports if r.ok]
    if args.runnable is None:
        return 0 if len(ok) == len(reports) else 1
    if not ok:
        print(f"error: {args.path}: no task of the set can run here (problems above); nothing written")
        return 1
    args.runnable.parent.mkdir(parents=True, exist_ok=True)
    args.runnable.write_text("".join(f"{path}\n" for path in ok))
    print(f"{args.runnable}: {len(ok)} runnable tasks")
    return 0
