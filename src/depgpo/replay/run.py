"""One replay: a command list run in its task's sandbox through the Episode machinery (traced, then verified), and
the fidelity check of a replayed log against the log itself.

The replay starts from the task's initial state, as the agent did, and runs each command to its end (or its
timeout). `trajectory.json` gets a `replay` section (docs/trajectory-schema.md): where the commands came from,
which logged command each replayed one is, what could not be replayed, and the fidelity: the replayed reward
against the logged one and the share of logged observations the replay did not reproduce.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from depgpo.env.episode import Episode, EpisodeConfig, HarnessFailure
from depgpo.replay.source import ReplaySource
from depgpo.tasks import Task

DIVERGENT_SHARE = 0.5  # above this share of differing observations a replay is reported as diverging
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r")
# A listing's times (`ls -l`'s "Dec  4 21:16" or "Mar  3  2025", ISO stamps): the replay runs at another time, in an
# episode whose directories were made when it started; what fidelity asks is whether the environment's state came back.
_CLOCK = re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} +(?:\d{1,2}:\d{2}|\d{4})\b"
                    r"|\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?: ?[+-]\d{2}:?\d{2}|Z)?")
_EXIT_LINE = re.compile(r"(?im)^\W*exit(?:[ _]?code|[ _]status)\W*-?\d{1,9}\W*$|<returncode>\s*-?\d+\s*</returncode>")
# What a harness writes for a command that printed nothing (mini-swe-agent's tool results, the TMax runs).
NO_OUTPUT_MARKERS = ("(no output)",)


class ReplayError(ValueError):
    """A trajectory that cannot be replayed against this task; the message names the source and the fix."""


def check_replayable(source: ReplaySource, task: Task) -> None:
    """Raise ReplayError when the source has nothing to replay or is the log of another task."""
    if not source.steps:
        dropped = f" ({len(source.unreplayable)} steps it holds cannot be replayed)" if source.unreplayable else ""
        raise ReplayError(f"{source.name}: no shell commands to replay{dropped}; give a log or trajectory with at "
                          "least one shell command")
    if source.task_id is not None and source.task_id != task.id:
        raise ReplayError(f"{source.name}: the log ran task {source.task_id!r}, but --task {task.root} is task "
                          f"{task.id!r}; pass the directory of task {source.task_id!r}")


def run_commands(task: Task, commands: list[str], turns: list[int], config: EpisodeConfig,
                 out_dir: Path | None = None) -> dict:
    """The verifier section of an episode that runs `commands`, or with `out_dir`, the written trajectory."""
    with Episode(task, config, out_dir=out_dir) as episode:
        try:
            for text, turn in zip(commands, turns, strict=True):
                episode.run_command(text, turn=turn)
        except HarnessFailure:
            pass  # recorded in the trajectory: reward 0 and the reason in errors
        verifier = episode.verify()
    if out_dir is None:
        return {"verifier": verifier, "errors": episode.errors}
    return json.loads((Path(out_dir) / "trajectory.json").read_text())


def replay(source: ReplaySource, task: Task, config: EpisodeConfig, out_dir: Path) -> dict:
    """Replay `source` in `task`'s sandbox; write and return its trajectory, with the `replay` section."""
    check_replayable(source, task)
    trajectory = run_commands(task, [s["text"] for s in source.steps], [s["turn"] for s in source.steps], config,
                              out_dir)
    trajectory["num_turns"] = max(source.num_turns, trajectory.get("num_turns", 0))
    trajectory["replay"] = {
        "source": source.name, "source_format": source.format, "logged_task": source.task_id,
        "logged_index": [s["logged_index"] for s in source.steps],
        "fidelity": fidelity(source, trajectory), "unreplayable": source.unreplayable,
    }
    path = Path(out_dir) / "trajectory.json"
    path.write_text(json.dumps(trajectory, indent=1))
    return trajectory


def fidelity(source: ReplaySource, trajectory: dict) -> dict:
    """The replayed reward against the logged one, and which logged observations the replay did not reproduce."""
    replayed = (trajectory.get("verifier") or {}).get("reward")
    compared, differing = 0, []
    for step, record in zip(source.steps, trajectory["commands"]):
        logged = step["observation"]
        if logged is None or (not logged and source.pane):
            continue  # a command list has no observations; a pane log shows one per turn
        compared += 1
        code_differs = step["exit_code"] is not None and record["exit_code"] is not None \
            and step["exit_code"] != record["exit_code"]
        if code_differs or not same_observation(logged, record["observation"], source.pane):
            differing.append(record["index"])
    return {"reward_logged": source.reward, "reward_replayed": replayed,
            "reward_matches": None if source.reward is None or replayed is None else source.reward == replayed,
            "observations_compared": compared, "observations_differing": len(differing),
            "differing_share": round(len(differing) / compared, 4) if compared else None, "differing": differing}


def same_observation(logged: str, replayed: str, pane: bool = False) -> bool:
    """Equal once terminal escapes, carriage returns, printed exit codes, listing times, blank lines and trailing
    blanks are set aside, and a harness's "(no output)" read as nothing; or the logged text (a pane, a tool result
    with a header) contains the whole replayed output. A pane shows the prompt and the typed command whatever the
    output, so a command that printed nothing matches any pane."""
    a, b = _normal(logged), _normal(replayed)
    return a == b or (bool(b) and b in a) or (pane and not b)


def _normal(text: str) -> str:
    text = _CLOCK.sub("<time>", _EXIT_LINE.sub("", _ANSI.sub("", text or "")))
    # Blank lines are set aside: where a program writes both, stdout and stderr interleave differently run to run.
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "" if len(lines) == 1 and lines[0] in NO_OUTPUT_MARKERS else "\n".join(lines)


def problems(source: ReplaySource, trajectory: dict, timeout_s: float) -> list[str]:
    """One line per thing the user must know about a written replay: commands that hung, and divergence."""
    lines = []
    for record in trajectory["commands"]:
        if record["timed_out"]:
            first = (record["text"].splitlines() or [""])[0][:60]
            lines.append(f"{source.name}: command {record['index']} ({first!r}) hung and was stopped after "
                         f"{timeout_s:g} s; the rest was replayed. Raise --timeout if it needs longer, or leave it "
                         "out of the log if it waits for input")
    fid = trajectory["replay"]["fidelity"]
    share = fid["differing_share"]
    if fid["reward_matches"] is False or (share is not None and share > DIVERGENT_SHARE):
        lines.append(f"{source.name}: the replay diverges from the log (reward {fid['reward_replayed']} replayed, "
                     f"{fid['reward_logged']} logged; {fid['observations_differing']} of "
                     f"{fid['observations_compared']} observations differ); check that --task is the version of "
                     "the task the log ran, and what replay.unreplayable lists")
    return lines
