"""Hand-built `depgpo counterfactual --format json --out` results whose scores are known by construction
(tests/report/test_scores.py works them out), for the scores' tests and the report's synthetic results tree."""

from __future__ import annotations

import json
from pathlib import Path

REPEATED = "same output"  # trajectory one shows it after turns 0 and 1: turns 1 and 2 share GiGPO's anchor state

# (task, reward, reproducible, per command: (necessary, reward_without)). One command a turn.
TRAJECTORIES = [
    ("taskA", 1.0, True, [(False, 1.0), (True, 0.0), (True, 0.0), (False, 1.0)]),
    ("taskB", 1.0, True, [(False, 1.0), (True, 0.0)]),
    ("taskC", 1.0, True, [(True, 0.0), (True, 0.0), (True, 0.0)]),
    ("taskD", 0.0, True, [(False, 0.0), (False, 1.0)]),  # a failure: removing command 1 raises the reward
    ("taskE", 1.0, False, [(True, 0.0), (False, 1.0)]),  # not reproducible: left out
]


def trajectory(task: str, reward: float, count: int, repeated: bool) -> dict:
    """A replayed trajectory.json without a trace: the credit falls back to unit factors on it."""
    observations = [f"output {task} {k}" for k in range(count)]
    if repeated:
        observations[0] = observations[1] = REPEATED
    return {"schema_version": 1, "task": {"id": task, "path": f"/tasks/{task}"}, "instruction": f"solve {task}",
            "num_turns": count, "verifier": {"reward": reward},
            "commands": [{"index": k, "turn": k, "text": f"echo {k}", "observation": observations[k], "exit_code": 0}
                         for k in range(count)]}


def counterfactual(task: str, reward: float, reproducible: bool, commands: list[tuple[bool, float]],
                   kept: str) -> dict:
    return {"source": f"{task}.json", "task": task, "reward": reward, "reward_repeat": reward if reproducible else 0.0,
            "reproducible": reproducible, "commands": [
                {"index": k, "turn": k, "text": f"echo {k}", "credit": 0.0, "necessary": necessary,
                 "reward_without": without} for k, (necessary, without) in enumerate(commands)],
            "trajectory": kept}


def write_counterfactuals(directory: Path, name: str = "depgpo.jsonl") -> Path:
    """DIRECTORY/NAME with one object a line, and DIRECTORY/kept/NNN/trajectory.json (named relative to DIRECTORY,
    as the report resolves it)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for number, (task, reward, reproducible, commands) in enumerate(TRAJECTORIES):
        kept = Path("kept") / f"{number:03d}" / "trajectory.json"
        (directory / kept).parent.mkdir(parents=True, exist_ok=True)
        (directory / kept).write_text(json.dumps(trajectory(task, reward, len(commands), number == 0)))
        lines.append(json.dumps(counterfactual(task, reward, reproducible, commands, str(kept))))
    path = directory / name
    path.write_text("\n".join(lines) + "\n")
    return path
