"""Learning curves of GRPO on the filtered training tasks against the frozen control, for choosing the tiny scale's RL
sizes (learning rate, K, tasks per update, updates) from measurements rather than by hand.

    .venv/bin/python bench/rl_learning_curves.py --policy results/tiny/tiny/tiny/sft/checkpoint \
        --train results/tiny/tiny/tiny/filter/rl_train.txt --work /tmp/curves \
        [--lrs 1e-4 3e-4 1e-3] [--seeds 0 1] [--k 8] [--tasks-per-update 4] [--updates 12] [--jobs 2] \
        [--out bench/results/rl_learning_curves]

Every (lr, seed) is one `depgpo rl` run with `method=grpo`; every seed also gets the frozen control (`rl.lr=0`: the
same task draws and sampling seeds, the policy never changed). Runs go `--jobs` at a time, as the DAG's jobs do, and
a finished run is not run again (its metrics.jsonl is kept under --work). Written to --out: `curves.csv` (one row
per run and update: training reward, the frozen control's on the same draws, seconds), `summary.csv` (per lr: the
mean gain over the frozen control in points of training reward, over updates >= 1 and seeds, its 95% interval from
depgpo.report.rl_gain (Student's t over the seeds' means), and the trainer's seconds per run) and `curves.png`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from depgpo.report.rl_gain import gain_interval  # noqa: E402


def run_one(policy: Path, train: Path, out: Path, overrides: list[str]) -> None:
    """One `depgpo rl` run, unless it has finished before."""
    if (out / "done.json").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "depgpo", "rl", "--policy", str(policy), "--train", str(train),
                               "--out", str(out), "scale=tiny", "model=tiny", "data=tiny", *overrides],
                              stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{out}: depgpo rl failed (exit {done.returncode}); see {out.parent / (out.name + '.log')}")


def read_metrics(out: Path, **labels) -> pd.DataFrame:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    frame = pd.DataFrame(rows)[["update", "train/reward_mean", "time/update_s"]]
    return frame.rename(columns={"train/reward_mean": "reward", "time/update_s": "update_s"}).assign(**labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="run directories (kept: a rerun resumes)")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--tasks-per-update", type=int, default=4)
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/rl_learning_curves")
    args = parser.parse_args()

    sizes = [f"rl.k={args.k}", f"rl.tasks_per_update={args.tasks_per_update}", f"rl.updates={args.updates}",
             f"rl.checkpoint_every={args.updates}"]
    runs = {(0.0, seed): args.work / f"frozen_seed{seed}" for seed in args.seeds}
    runs |= {(lr, seed): args.work / f"grpo_lr{lr:g}_seed{seed}" for lr in args.lrs for seed in args.seeds}
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda item: run_one(args.policy, args.train, item[1],
                                           ["method=grpo", f"rl.lr={item[0][0]:g}", f"seed={item[0][1]}", *sizes]),
                      runs.items()))
    curves = pd.concat([read_metrics(out, lr=lr, seed=seed) for (lr, seed), out in runs.items()])
    frozen = curves[curves.lr == 0][["seed", "update", "reward"]].rename(columns={"reward": "reward_frozen"})
    curves = curves[curves.lr > 0].merge(frozen, on=["seed", "update"], how="left")
    args.out.mkdir(parents=True, exist_ok=True)
    curves.to_csv(args.out / "curves.csv", index=False)

    summary = []
    for lr, group in curves.groupby("lr"):
        gain = gain_interval(group.assign(reward=100 * group.reward, frozen=100 * group.reward_frozen))  # points
        summary.append({"lr": lr, "gain": gain.mean, "ci_low": gain.low, "ci_high": gain.high, "pairs": gain.n_units,
                        "run_s": group.groupby("seed").update_s.sum().mean(),  # the trainer's own timing
                        "k": args.k, "tasks_per_update": args.tasks_per_update, "updates": args.updates})
    summary = pd.DataFrame(summary)
    summary.to_csv(args.out / "summary.csv", index=False)
    plot(curves, args.out / "curves.png")
    print(summary.to_string(index=False))


def plot(curves: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for lr, group in curves.groupby("lr"):
        gain = (100 * (group.reward - group.reward_frozen)).groupby(group["update"]).mean()
        ax.plot(gain.index, gain.values, marker="o", markersize=3,
                label=f"lr {lr:g}, mean of {group.seed.nunique()} seeds")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("update")
    ax.set_ylabel("training reward − frozen control's (points)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
