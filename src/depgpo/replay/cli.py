"""`depgpo replay SOURCE... --task TASK_DIR --out DIR` and `depgpo counterfactual TRAJ... --task TASK_DIR`.

Both take `key=value` config overrides after the sources (`agent.workers=4`, `credit.beta=0.25`,
`agent.environment.backend=image`). Each trajectory is handled on its own: one that cannot be replayed is reported
in one line on stderr with its file and the fix, the others are still replayed and written, and the exit code is 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

BAD_INPUT = 2
_OVERRIDE = re.compile(r"[A-Za-z_][\w.]*=")
DEFAULT_TIMEOUT_S = 60.0  # a logged command ran for an agent, not a tiny task: the config's 1 s would cut it


def add_replay(parser: argparse.ArgumentParser) -> None:
    _common(parser, "a trajectory.json, a JSON list of commands, or an agent log (chat tool calls, Terminus-2, "
                    "mini-swe-agent, OpenHands, a Harbor trial or job directory, a Terminal-Bench 1 trial)")
    parser.add_argument("--out", type=Path, required=True,
                        help="directory for trajectory.json (with several trajectories, DIR/NNN/trajectory.json)")


def add_counterfactual(parser: argparse.ArgumentParser) -> None:
    _common(parser, "a trajectory or agent log, as for depgpo replay")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="a table per trajectory, or one JSON object per trajectory and line")
    parser.add_argument("--out", type=Path, default=None, help="keep the replay (a) of each trajectory here")
    parser.add_argument("--removals", type=int, default=None, metavar="N",
                        help="at most N replays without one command for a trajectory longer than N: every credited "
                             "command and a seeded sample of the others, each weighted (default: every command)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the --removals sample (default 0)")
    parser.add_argument("--subsets", type=int, default=None, metavar="N",
                        help="at most N replays of subsets per success for its minimal sufficient set (0: only what "
                             "the other replays tell; default: as many as the search takes)")


def _common(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("sources", nargs="+", metavar="SOURCE|key=value", help=what + "; or a config key=value")
    parser.set_defaults(_positionals="sources")  # also after the options (depgpo.cli.main)
    parser.add_argument("--task", type=Path, required=True, help="the task directory the commands ran in")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds per command (default {DEFAULT_TIMEOUT_S:g})")


def run_replay(args: argparse.Namespace) -> int:
    from depgpo.agent.loop import map_in_threads
    from depgpo.replay.run import ReplayError, problems, replay

    agent, sources, status = _prepare(args)
    if agent is None:
        return status
    many = len(sources) > 1
    outs = [args.out / f"{number:03d}" if many else args.out for number in range(len(sources))]

    def one(job) -> dict | str:
        """The replayed trajectory, or the line that says why there is none."""
        source, out = job
        try:
            return replay(source, _task(args), agent.episode, out)
        except (ReplayError, ValueError) as error:
            return _named(source.name, error)
        except Exception as error:  # noqa: BLE001 - one trajectory must not stop the batch; the reason is said
            return (f"{source.name}: replay failed: {type(error).__name__}: {error} (the sandbox or an image build "
                    "failed: see the message; else an internal error, please report it)")

    # Several trajectories replay side by side (agent.workers), reported in their order.
    for source, out, trajectory in zip(sources, outs, map_in_threads(one, list(zip(sources, outs)), agent.workers)):
        if isinstance(trajectory, str):
            status = _bad(args, trajectory)
            continue
        for line in problems(source, trajectory, args.timeout):
            status = _bad(args, line)
        fid = trajectory["replay"]["fidelity"]
        print(f"{out / 'trajectory.json'}: reward {fid['reward_replayed']} (logged {fid['reward_logged']}), "
              f"{fid['observations_differing']}/{fid['observations_compared']} observations differ, "
              f"{len(trajectory['replay']['unreplayable'])} steps not replayable", flush=True)
    return status


def run_counterfactual(args: argparse.Namespace) -> int:
    from depgpo.replay.counterfactual import counterfactual, format_table
    from depgpo.replay.run import ReplayError

    if args.removals is not None and args.removals < 1:
        return _bad(args, f"--removals {args.removals}: must be at least 1 (leave it out to remove every command)")
    if args.subsets is not None and args.subsets < 0:
        return _bad(args, f"--subsets {args.subsets}: must be 0 or more (leave it out for no bound)")
    agent, sources, status = _prepare(args)
    if agent is None:
        return status
    many = len(sources) > 1
    for number, source in enumerate(sources):
        out = None if args.out is None else args.out / f"{number:03d}" if many else args.out
        try:
            _task(args)
            result, lines = counterfactual(source, args.task, agent.episode, agent.credit, agent.workers, out,
                                           args.removals, args.seed, args.subsets)
        except (ReplayError, ValueError) as error:
            status = _bad(args, _named(source.name, error))
            continue
        except Exception as error:  # noqa: BLE001 - one trajectory must not stop the batch; the reason is said
            status = _bad(args, f"{source.name}: replay failed: {type(error).__name__}: {error} (the sandbox or an "
                                "image build failed: see the message; else an internal error, please report it)")
            continue
        for line in lines:
            status = _bad(args, line)
        print(json.dumps(result) if args.format == "json" else format_table(result) + "\n", flush=True)
    return status


def _prepare(args: argparse.Namespace):
    """(agent config, the sources, status): the sources that could be read; each one that could not, said."""
    from depgpo.agent.config import agent_config
    from depgpo.config import compose
    from depgpo.replay.source import read_sources

    paths = [Path(item) for item in args.sources if not (_OVERRIDE.match(item) and not Path(item).exists())]
    overrides = [item for item in args.sources if _OVERRIDE.match(item) and not Path(item).exists()]
    try:
        cfg = compose([*overrides, f"agent.command_timeout_s={args.timeout}"])
    except Exception as error:  # Hydra's own message names the key and the valid options
        return None, [], _bad(args, f"config: {' '.join(str(error).split())}; set a key as key=value, e.g. "
                                    "agent.workers=4")
    if not paths:
        return None, [], _bad(args, "no SOURCE given; give a trajectory.json or an agent log")
    status, sources = 0, []
    for path in paths:
        try:
            sources += read_sources(path)
        except ValueError as error:  # names the file and what it should hold
            status = _bad(args, str(error))
        except Exception as error:  # noqa: BLE001 - one file must not stop the batch; the reason is said
            status = _bad(args, f"{path}: cannot be read: {type(error).__name__}: {error} (an internal error: "
                                "please report it with the file)")
    return agent_config(cfg, credit=True), sources, status


def _task(args: argparse.Namespace):
    from depgpo.tasks import TaskFormatError, load_task

    try:
        return load_task(args.task)
    except TaskFormatError as error:
        raise ValueError(f"--task {error}; pass the directory of the task the log ran") from error


def _named(name: str, error: Exception) -> str:
    message = str(error)
    return message if message.startswith(name) else f"{name}: {message}"


def _bad(args: argparse.Namespace, message: str) -> int:
    print(f"depgpo {args.command}: error: {message}", file=sys.stderr, flush=True)
    return BAD_INPUT


def add_counterfactual_sample(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="+", metavar="ROLLOUTS|key=value",
                        help="an RL run's seed directory (rl/{run}/seed{s}), a run directory, or its "
                             "trajectories/update*.jsonl files; or a config key=value (scale=tiny, agent.workers=2)")
    parser.set_defaults(_positionals="sources")
    parser.add_argument("--per-outcome", type=int, required=True,
                        help="rollouts drawn of each outcome (reward > 0, and the rest)")
    parser.add_argument("--out", type=Path, required=True,
                        help="FILE.jsonl for the counterfactual objects; the replays are kept in FILE/NNN/")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (default 0)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per command (default: the config's agent.command_timeout_s, the limit the "
                             "rollouts ran under)")


def run_counterfactual_sample(args: argparse.Namespace) -> int:
    """Counterfactuals of a sample of logged rollouts (depgpo.replay.sample). A rollout that cannot be replayed is
    said on stderr and the rest still written; the exit code is 2 only when none could be."""
    from depgpo.agent.config import agent_config
    from depgpo.config import compose
    from depgpo.replay.sample import SampleError, run_sample

    if args.per_outcome < 0:
        return _bad(args, f"--per-outcome {args.per_outcome}: must be 0 or more")
    paths = [Path(item) for item in args.sources if not (_OVERRIDE.match(item) and not Path(item).exists())]
    overrides = [item for item in args.sources if _OVERRIDE.match(item) and not Path(item).exists()]
    if args.timeout is not None:
        overrides.append(f"agent.command_timeout_s={args.timeout}")
    try:
        agent = agent_config(compose(overrides), credit=True)
    except Exception as error:  # Hydra's own message names the key and the valid options
        return _bad(args, f"config: {' '.join(str(error).split())}; set a key as key=value, e.g. agent.workers=2")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []

    def report(line: str) -> None:
        failures.append(line)
        _bad(args, line)

    try:
        written = run_sample(paths, args.per_outcome, args.seed, args.out, agent.episode, agent.credit,
                             agent.workers, report)
    except SampleError as error:
        return _bad(args, str(error))
    print(f"{args.out}: {written} counterfactual results ({len(failures)} problems said above)", flush=True)
    # An empty draw (no logged rollout with commands) is an empty sample, not an error; drawn rollouts of which
    # none could be replayed are.
    replay_failed = [line for line in failures if ": not replayed: " in line]
    return BAD_INPUT if replay_failed and not written else 0
