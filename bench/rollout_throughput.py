"""Rollouts per second of a policy at the tiny scale's settings: a baseline commit's code against this checkout's,
side by side in one run.

    .venv/bin/python bench/rollout_throughput.py --policy results/tiny/tiny/tiny/sft/checkpoint \
        --tasks results/tiny/tiny/tiny/filter/rl_train.txt [--baseline 14d01cb] [--tasks-per-round 4] [--k 8] \
        [--repeats 2] [--out bench/results/rollout_throughput.json]

Each round is one RL update's rollouts: `--tasks-per-round` training tasks x `--k` rollouts, the same tasks and seeds
for both codes, through each code's own `depgpo.agent.loop.iter_rollouts` with `compose(["scale=tiny"])`'s agent
settings (the baseline's config is its own). The baseline runs from a `git worktree` of `--baseline` under a
temporary directory, in its own process, as the current code does; the two alternate round by round so that the
machine's load hits both alike. The last line is `ratio N.NN`: current over baseline rollouts per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Run in a child process whose PYTHONPATH is one code's src/: prints rollouts/s and what the rollouts were.
ROUND = """
import json, sys, time
from depgpo.agent.config import agent_config
from depgpo.agent.loop import iter_rollouts
from depgpo.config import compose
from depgpo.policy.generate import make_policy
from depgpo.policy.model import load_policy
from depgpo.tasks import load_task
import torch
policy_dir, task_dirs, k, seed = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cfg = compose(["scale=tiny"])
torch.set_num_threads(cfg.torch_threads)
model, tokenizer = load_policy(policy_dir)
policy = make_policy(model.eval(), tokenizer, cfg)
jobs = [(load_task(d), seed * 1000 + 10 * t + i) for t, d in enumerate(task_dirs) for i in range(k)]
started = time.perf_counter()
rollouts = list(iter_rollouts(policy, jobs, agent_config(cfg, credit=True)))
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "rollouts": len(rollouts), "per_s": len(rollouts) / seconds,
                  "mean_reward": sum(r.reward for r in rollouts) / len(rollouts),
                  "mean_turns": sum(r.num_turns for r in rollouts) / len(rollouts),
                  "cmds": sum(len(r.trajectory["commands"]) for r in rollouts)}))
"""


def run_round(src: Path, policy: Path, tasks: list[str], k: int, seed: int) -> dict:
    done = subprocess.run([sys.executable, "-c", ROUND, str(policy), json.dumps(tasks), str(k), str(seed)],
                          env={"PYTHONPATH": str(src), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home())},
                          capture_output=True, text=True, cwd=src.parent)
    if done.returncode != 0:
        raise SystemExit(f"rollout round in {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", type=Path, required=True, help="a policy checkpoint (the SFT stage's)")
    ap.add_argument("--tasks", type=Path, required=True, help="a task list (filtering's rl_train.txt) or task dir")
    ap.add_argument("--baseline", default="14d01cb", help="the commit to compare against")
    ap.add_argument("--tasks-per-round", type=int, default=4)
    ap.add_argument("--k", type=int, default=8, help="rollouts per task (the paper's K)")
    ap.add_argument("--repeats", type=int, default=2, help="rounds per code, alternating")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/rollout_throughput.json")
    args = ap.parse_args()
    listed = args.tasks.read_text().split() if args.tasks.is_file() else \
        [str(p) for p in sorted(args.tasks.iterdir()) if p.is_dir()]
    tasks = [str(Path(t).resolve()) for t in listed[:args.tasks_per_round]]
    with tempfile.TemporaryDirectory(prefix="depgpo-baseline-") as tmp:
        worktree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.baseline],
                       check=True, capture_output=True)
        try:
            codes = {"baseline": worktree / "src", "current": REPO / "src"}
            rounds: dict[str, list[dict]] = {name: [] for name in codes}
            for repeat in range(args.repeats):
                for name, src in codes.items():
                    result = run_round(src, args.policy.resolve(), tasks, args.k, seed=repeat)
                    rounds[name].append(result)
                    print(f"{name:8s} round {repeat}: {result['rollouts']} rollouts in {result['seconds']:.1f} s = "
                          f"{result['per_s']:.2f}/s (reward {result['mean_reward']:.2f}, turns "
                          f"{result['mean_turns']:.2f}, commands {result['cmds']})", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)],
                           capture_output=True)
    per_s = {name: statistics.median(r["per_s"] for r in results) for name, results in rounds.items()}
    ratio = per_s["current"] / per_s["baseline"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    args.out.write_text(json.dumps({"baseline": args.baseline, "current": head.stdout.strip(), "tasks": tasks,
                                    "k": args.k, "rounds": rounds, "median_per_s": per_s, "ratio": ratio}, indent=1))
    print(f"median rollouts/s: baseline {per_s['baseline']:.2f}, current {per_s['current']:.2f}")
    print(f"ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
