"""`depgpo credit TRAJ... [--static] [--beta B] [--variant NAME] [--format table|json] [--graph FILE]`

Shows the credit of every command of one or more trajectories, their step factors, the fallback reason and the
diagnostics. A file that cannot be read, or a trajectory that lacks a field, is reported in one line on stderr
(exit code 2); the other trajectories are still processed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from depgpo.credit import CreditConfig, TrajectoryError, compute_credit
from depgpo.credit.config import VARIANTS
from depgpo.credit.explain import GRAPH_FORMATS, draw_graph, format_table, to_json
from depgpo.inference import load_trajectories

BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trajectories", nargs="+", type=Path, metavar="TRAJ",
                        help="trajectory.json, OpenAI chat messages (JSON or JSONL) or a Terminus-2 log")
    parser.add_argument("--static", action="store_true",
                        help="infer reads and writes from the command text (for logs recorded without a trace)")
    parser.add_argument("--beta", type=float, default=CreditConfig.beta, help="dependency-decay coefficient β")
    parser.add_argument("--variant", choices=VARIANTS, default="full", help="full method or a Table 2 ablation")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="a table per trajectory, or one JSON object per trajectory and line")
    parser.add_argument("--graph", type=Path, metavar="FILE",
                        help="draw the dependency graph to FILE (.png or .svg); with several trajectories the "
                             "k-th goes to FILE-k.png")


def run(args: argparse.Namespace) -> int:
    try:
        config = CreditConfig(beta=args.beta, variant=args.variant)
    except ValueError as error:
        return _bad_input(str(error))
    if args.graph is not None and args.graph.suffix.lower() not in GRAPH_FORMATS:
        return _bad_input(f"--graph {args.graph}: the file name must end in {' or '.join(GRAPH_FORMATS)}")
    status = 0
    loaded: list[tuple[str, dict]] = []
    for path in args.trajectories:
        try:
            trajectories = load_trajectories(path, static=args.static)
        except ValueError as error:  # its message names the file and what is wrong with it
            status = _bad_input(str(error))
            continue
        for position, trajectory in enumerate(trajectories):
            loaded.append((str(path) if len(trajectories) == 1 else f"{path}[{position}]", trajectory))
    for number, (source, trajectory) in enumerate(loaded, start=1):
        try:
            # A chat log records its turn count: an assistant turn may issue no command.
            result = compute_credit(trajectory, config, trajectory.get("num_turns"))
        except TrajectoryError as error:
            status = _bad_input(f"{source}: {error}")
            continue
        if args.format == "json":
            print(json.dumps(to_json(result, source)))
        else:
            print(format_table(result, f"== {source} (variant {config.variant}, β = {config.beta})"), end="\n\n")
        if args.graph is not None:
            target = args.graph if len(loaded) == 1 else args.graph.with_stem(f"{args.graph.stem}-{number}")
            draw_graph(result, target, title=source)
    return status


def _bad_input(message: str) -> int:
    print(f"depgpo credit: error: {message}", file=sys.stderr)
    return BAD_INPUT
