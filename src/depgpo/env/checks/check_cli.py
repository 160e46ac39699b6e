"""`depgpo data check PATH`: validate a task set and report what would not run in this environment."""

from __future__ import annotations

import argparse
from pathlib import Path

from depgpo.env.images.backend import BACKENDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    check = sub.add_parser("check", help="validate a task directory or a directory of tasks")
    check.add_argument("path", type=Path)
    check.add_argument("--runnable", type=Path, default=None,
                       help="also write the directories of the tasks that are ok, one per line (the task list the "
                            "pipeline stages read); then exit 0 when at least one task is ok")
    check.add_argument("--backend", choices=BACKENDS, default="auto",
                       help="agent.environment.backend the episodes will use: auto (default: the host where it stands "
                            "for the task's image, else the image), host, or image")
    check.add_argument("--oracle", action="store_true",
                       help="also run each task's oracle in a real episode (building its image): a reward below 1 "
                            "fails the task")
    check.add_argument("--no-build", action="store_true",
                       help="predict from the Dockerfiles alone; by default each task's image is pulled or built "
                            "(cached, as its episodes would) and looked into")
    check.add_argument("--wheels", type=Path, default=None,
                       help="the wheel cache (agent.environment.wheel_cache; default ~/.cache/depgpo/wheels)")
    check.add_argument("--runtime", default="auto", help="with --backend image: the container runtime (default auto)")
    prefetch = sub.add_parser("prefetch", help="download what the tasks install from PyPI (Dockerfile pip installs, "
                                               "the verifier's uv and uvx -w pins) into the local wheel cache")
    prefetch.add_argument("path", type=Path, nargs="+")
    prefetch.add_argument("--wheels", type=Path, default=None,
                          help="the wheel cache (agent.environment.wheel_cache; default ~/.cache/depgpo/wheels)")


def run(args: argparse.Namespace) -> int:
    from depgpo.tasks import TaskFormatError
    if args.data_command == "prefetch":
        return _prefetch(args)
    from depgpo.env.checks.task_check import check_task_set, format_reports

    try:
        reports = check_task_set(args.path, args.backend, args.runtime, args.wheels, args.oracle,
                                 not args.no_build)
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


def _prefetch(args: argparse.Namespace) -> int:
    from depgpo.env.images.backend import DEFAULT_WHEELS
    from depgpo.env.images.wheel_cache import prefetch
    from depgpo.tasks import TaskFormatError, load_task_set

    wheels = args.wheels or DEFAULT_WHEELS
    try:
        tasks = [task for path in args.path for task in load_task_set(path)]
    except TaskFormatError as e:
        print(f"error: {e}")
        return 2
    failures = prefetch(tasks, wheels)
    for line in failures:
        print(f"not served: {line}")
    print(f"{wheels}: {len(list(wheels.glob('*.whl')))} wheels for {len(tasks)} tasks ({len(failures)} not served)")
    return 1 if failures else 0
