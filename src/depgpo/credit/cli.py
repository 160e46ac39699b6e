"""`depgpo credit TRAJ... [key=value ...] [--static] [--beta B] [--variant NAME] [--format table|json] [--graph FILE]`

Shows the credit of every command of one or more trajectories, their step factors, the fallback reason and the
diagnostics; for a log read offline, also what the reading understood and what not (`read:` / `not read:`, the
JSON's `reading`), and on a fallback the commands as parsed, uncredited.
Every knob of `CreditConfig` can be set as `key=value` (or `credit.key=value`), in the Hydra override
grammar of the stages: `depgpo credit t.json beta=0.25 reveal_once=false incidental_rules=[]`. The active
configuration heads the table output and is in every JSON object.

Each trajectory is processed on its own: a file that cannot be read, or a trajectory that cannot be credited, is
reported in one line on stderr with its source and the reason, the others are still printed, and the exit code is 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

BAD_INPUT = 2
_OVERRIDE = re.compile(r"(?:credit\.)?[A-Za-z_]\w*=")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from depgpo.credit.config import VARIANTS, CreditConfig
    from depgpo.credit.graph_figure import GRAPH_FORMATS

    parser.add_argument("trajectories", nargs="+", metavar="TRAJ|key=value",
                        help="a file or directory, read by content (docs/credit.md#offline-logs): our "
                             "trajectory.json; OpenAI chat messages (JSON or JSONL); a Terminus-2 log; a "
                             "mini-swe-agent .traj.json; an OpenHands completion log or event stream; a Gemini CLI "
                             "session; an ATIF trajectory; a Harbor trial or job directory; a Terminal-Bench 1 trial "
                             "directory; or a directory of these. Or a credit knob as key=value")
    parser.set_defaults(_positionals="trajectories")  # also after the options (depgpo.cli.main)
    parser.add_argument("--static", action="store_true",
                        help="re-infer the reads and writes of our own traced trajectory.json from its command "
                             "texts (to compare static inference with the trace); agent logs have no trace and are "
                             "always read from their text, with or without this flag")
    parser.add_argument("--beta", type=float, default=None, help=f"same as beta=B (default {CreditConfig.beta})")
    parser.add_argument("--variant", choices=VARIANTS, default=None, help="same as variant=NAME (default full)")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="a table per trajectory, or one JSON object per trajectory and line")
    parser.add_argument("--graph", type=Path, metavar="FILE",
                        help=f"draw the dependency graph to FILE ({' or '.join(GRAPH_FORMATS)}); with several "
                             "trajectories the k-th goes to FILE-k.png")


def split_arguments(items: list[str]) -> tuple[list[Path], list[str]]:
    """Paths and `key=value` overrides; an existing file whose name looks like an override is a path."""
    paths, overrides = [], []
    for item in items:
        if _OVERRIDE.match(item) and not Path(item).exists():
            overrides.append(item)
        else:
            paths.append(Path(item))
    return paths, overrides


def run(args: argparse.Namespace) -> int:
    from depgpo.credit import CreditConfig, TrajectoryError, compute_credit
    from depgpo.credit.explain import format_config, format_table, to_json
    from depgpo.credit.graph_figure import GRAPH_FORMATS, draw_graph
    from depgpo.inference import load_trajectories, trajectory_sources

    paths, overrides = split_arguments(args.trajectories)
    overrides += [f"beta={args.beta}"] * (args.beta is not None) + [f"variant={args.variant}"] * bool(args.variant)
    try:
        config = CreditConfig.from_overrides(overrides)
    except ValueError as error:
        return _bad_input(f"{error}; set a knob as key=value, e.g. beta=0.25 (docs/credit-decisions.md)")
    if not paths:
        return _bad_input("no trajectory given")
    if args.graph is not None and args.graph.suffix.lower() not in GRAPH_FORMATS:
        return _bad_input(f"--graph {args.graph}: the file name must end in {' or '.join(GRAPH_FORMATS)}")
    if hasattr(sys.stdout, "reconfigure"):  # a command's text may hold what the terminal's encoding cannot show
        sys.stdout.reconfigure(errors="backslashreplace")
    status = 0
    loaded: list[tuple[str, dict]] = []
    # A directory of logs (a Harbor job, a corpus) is read item by item, so that one bad trial loses only itself.
    for path in [item for given in paths for item in (trajectory_sources(given) if given.is_dir() else [given])]:
        try:
            trajectories = load_trajectories(path, static=args.static)
        except ValueError as error:  # its message names the file and what is wrong with it
            status = _bad_input(str(error))
            continue
        except Exception as error:  # noqa: BLE001 - one file must not stop the batch; the reason is reported
            status = _bad_input(f"{path}: cannot be loaded: {type(error).__name__}: {error} (an internal error: "
                                "please report it with the file)")
            continue
        for position, trajectory in enumerate(trajectories):
            loaded.append((str(path) if len(trajectories) == 1 else f"{path}[{position}]", trajectory))
    if args.format == "table" and loaded:
        print(format_config(config), end="\n\n")
    for number, (source, trajectory) in enumerate(loaded, start=1):
        try:
            # A chat log records its turn count: an assistant turn may issue no command.
            result = compute_credit(trajectory, config, trajectory.get("num_turns"))
        except TrajectoryError as error:
            status = _bad_input(f"{source}: {error}")
            continue
        except Exception as error:  # noqa: BLE001 - as above
            status = _bad_input(f"{source}: credit failed: {type(error).__name__}: {error} (an internal error: "
                                "please report it with the trajectory)")
            continue
        if args.format == "json":
            print(json.dumps(to_json(result, source, trajectory) | {"config": dataclasses.asdict(config)}))
        else:
            print(format_table(result, f"== {source}", trajectory), end="\n\n")
        if args.graph is not None:
            target = args.graph if len(loaded) == 1 else args.graph.with_stem(f"{args.graph.stem}-{number}")
            # stderr: with --format json, stdout holds only the JSON lines
            print(f"depgpo credit: graph of {source} written to {draw_graph(result, target, title=source)}",
                  file=sys.stderr)
    return status


def _bad_input(message: str) -> int:
    print(f"depgpo credit: error: {message}", file=sys.stderr)
    return BAD_INPUT
