"""`depgpo data check PATH`: validate a task set and report what would not run here."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    check = sub.add_parser("check", help="validate a task directory or a directory of tasks")
    check.add_argument("path", type=Path)


def run(args: argparse.Namespace) -> int:
    from depgpo.tasks import TaskFormatError
    from depgpo.tasks.check import check_task_set, format_reports

    try:
        reports = check_task_set(args.path)
    except TaskFormatError as e:
        print(f"error: {e}")
        return 2
    print(format_reports(reports))
    return 0 if all(r.ok for r in reports) else 1
