"""`depgpo run-episode TASK_DIR (--commands CMDS.json | --oracle) --out DIR`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from depgpo.env.episode import Episode, EpisodeConfig, HarnessFailure
from depgpo.env.images.backend import BACKENDS, ImageError, system_root_for
from depgpo.env.judging.tampering import TAMPERING_POLICIES
from depgpo.env.sandbox.privilege import PRIVILEGES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task_dir", type=Path, help="a Harbor or Terminal-Bench-1 task directory")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--commands", type=Path, help="JSON list of command strings (one per turn)")
    source.add_argument("--oracle", action="store_true", help="run the task's solution script as the commands")
    parser.add_argument("--out", type=Path, required=True, help="directory for trajectory.json")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per command (default 60)")
    parser.add_argument("--keep-sandbox", action="store_true", help="keep the episode's host directories")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="system directories from the task's container image (image), this machine (host), or "
                             "auto (default): the host where it stands for the task's image exactly, else the image")
    parser.add_argument("--privilege", choices=PRIVILEGES, default="auto",
                        help="root | rootless | auto (rootless when not run as root): docs/sandbox.md#privilege")
    parser.add_argument("--tampering", choices=TAMPERING_POLICIES, default="zero",
                        help="what an episode earns whose verifier ran code the agent planted (default: zero)")
    parser.add_argument("--runtime", default="auto",
                        help="with --backend image: podman, docker, apptainer, singularity or auto (default)")


def load_commands(path: Path) -> list[str]:
    try:
        commands = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"error: {path}: file not found")
    except UnicodeDecodeError as e:
        raise SystemExit(f"error: {path}: not UTF-8 text (byte {e.start}); write the commands file as UTF-8 JSON "
                         "(bytes a command needs can be written as $'\\xNN' in the shell)")
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: {path}: not JSON ({e}); expected a JSON list of command strings")
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
        raise SystemExit(f"error: {path}: expected a JSON list of command strings, e.g. [\"ls\", \"cat a.txt\"]")
    return commands


def oracle_commands(task) -> list[str]:
    """The solution script, copied into the sandbox and run as one command (as Harbor runs solve.sh)."""
    if task.solution_script is None:
        raise SystemExit(f"error: {task.root}: no solution script (solution/solve.sh or solution.sh); "
                         "use --commands instead")
    return [f"bash <<'DEPGPO_ORACLE_EOF'\n{task.solution_script.read_text()}\nDEPGPO_ORACLE_EOF"]


def run(args: argparse.Namespace) -> int:
    from depgpo.tasks import TaskFormatError, load_task

    try:
        task = load_task(args.task_dir)
    except TaskFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    commands = oracle_commands(task) if args.oracle else load_commands(args.commands)
    config = EpisodeConfig(command_timeout_s=args.timeout, keep_sandbox=args.keep_sandbox, backend=args.backend,
                           runtime=args.runtime, tampering=args.tampering, privilege=args.privilege)
    try:
        system = system_root_for(task, config.backend, config.runtime, config.image_cache, config.wheel_cache)
    except ImageError as e:  # a failed build or pull, with the builder's own error
        print(f"error: {e}", file=sys.stderr)
        return 2
    where = "this host's root" if system.is_host else f"image {system.image} ({system.source})"
    print(f"environment: {where}", file=sys.stderr)
    for note in system.notes:
        print(f"environment: {note}", file=sys.stderr)
    with Episode(task, config, out_dir=args.out) as episode:
        print(f"environment: sandbox {episode.privilege.name}", file=sys.stderr)
        for note in episode.privilege.notes(system.is_host):
            print(f"environment: {note}", file=sys.stderr)
        try:
            for turn, command in enumerate(commands):
                record = episode.run_command(command, turn=turn)
                status = "timeout" if record["timed_out"] else f"exit {record['exit_code']}"
                print(f"[{turn}] {status:>8}  {command.splitlines()[0][:70] if command else ''}", file=sys.stderr)
        except HarnessFailure as e:  # recorded in the trajectory: the episode ended with reward 0
            print(f"harness: {e}", file=sys.stderr)
        verifier = episode.verify()
    print(f"reward {verifier['reward']:.3f} ({verifier['reward_source']}); E ({verifier['E_source']}): "
          f"{', '.join(verifier['E']) or '-'}", file=sys.stderr)
    for finding in verifier.get("tampering", []):
        print(f"tampering: {finding['kind']}: the verifier {finding['how']} {finding['path']} "
              f"({finding['change']} by the agent)", file=sys.stderr)
    if verifier["error"]:
        print(f"verifier: {verifier['error']}", file=sys.stderr)
    for error in episode.errors:  # setup and harness failures, which would otherwise be in trajectory.json only
        print(f"episode: {error}", file=sys.stderr)
    print(args.out / "trajectory.json")
    return 0
