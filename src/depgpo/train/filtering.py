"""Four-attempt task selection (paper Table 6): keep the tasks the SFT policy sometimes, but not always, solves.

A task solved in none or all of its attempts gives every trajectory of its group the same reward, so a zero
group-relative advantage: no learning signal (Figure 1(a)). The retained tasks are split into RL training and
validation sets.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from depgpo.agent.config import AgentConfig
from depgpo.agent.loop import attempt_tasks
from depgpo.tasks import Task
from depgpo.train.progress import Progress


def select_tasks(success_counts: dict[str, int], attempts: int, val_fraction: float, seed: int
                 ) -> tuple[list[str], list[str], dict]:
    """(train ids, validation ids, Table 6 counts) from the number of successful attempts per task."""
    zero = [t for t, k in success_counts.items() if k == 0]
    every = [t for t, k in success_counts.items() if k == attempts]
    retained = sorted(t for t, k in success_counts.items() if 0 < k < attempts)
    random.Random(seed).shuffle(retained)
    n_val = round(len(retained) * val_fraction) if len(retained) > 1 else 0
    val, train = sorted(retained[:n_val]), sorted(retained[n_val:])
    counts = {"candidates": len(success_counts), "zero_success": len(zero), "all_success": len(every),
              "retained": len(retained), "rl_train": len(train), "rl_val": len(val), "attempts": attempts,
              # Figure 1(a): with K = attempts, the share of tasks whose advantages are all zero
              "zero_advantage_fraction": (len(zero) + len(every)) / max(1, len(success_counts))}
    return train, val, counts


def run_filter(policy, tasks: list[Task], agent: AgentConfig, attempts: int, val_fraction: float, seed: int,
               out_dir: Path) -> dict:
    note = f"{len(tasks)} tasks x {attempts} attempts; the selection goes to {out_dir}"
    with Progress(len(tasks) * attempts, "filter", "attempt", note=note) as progress:
        rewards = attempt_tasks(policy, tasks, attempts, agent, seed, on_rollout=progress.rollout_done)
    success = {task_id: sum(r >= 1.0 for r in rs) for task_id, rs in rewards.items()}
    train, val, counts = select_tasks(success, attempts, val_fraction, seed)
    by_id = {t.id: t for t in tasks}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "rl_train.txt").write_text("".join(f"{by_id[t].root}\n" for t in train))
    (out_dir / "rl_val.txt").write_text("".join(f"{by_id[t].root}\n" for t in val))
    summary = {**counts, "success_counts": success}
    (out_dir / "filter.json").write_text(json.dumps(summary, indent=1))
    return summary
