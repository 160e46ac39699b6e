"""pass@1 on a test set: one attempt per task per round, several rounds, mean ± SD over rounds (paper Table 1)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from depgpo.agent.config import AgentConfig
from depgpo.agent.loop import attempt_tasks
from depgpo.tasks import Task
from depgpo.train.progress import Progress


def evaluate(policy, tasks: list[Task], agent: AgentConfig, rounds: int, seed: int, run: str, test_set: str) -> dict:
    per_round = []
    note = f"{rounds} rounds x {len(tasks)} tasks"
    with Progress(rounds * len(tasks), f"eval {run} {test_set}", "episode", note=note) as progress:
        for r in range(rounds):
            rewards = attempt_tasks(policy, tasks, 1, agent, seed=seed * 7919 + r, on_rollout=progress.rollout_done)
            per_round.append({"round": r, "tasks": {t: int(rs[0] >= 1.0) for t, rs in rewards.items()}})
    pass_at_1 = [100.0 * sum(r["tasks"].values()) / max(1, len(r["tasks"])) for r in per_round]
    return {"run": run, "test_set": test_set, "rounds": per_round, "pass_at_1": pass_at_1,
            "mean": statistics.fmean(pass_at_1), "sd": statistics.stdev(pass_at_1) if len(pass_at_1) > 1 else 0.0}


def write_evaluation(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
