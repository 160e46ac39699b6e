"""How many seeds and test tasks a DepGPO − GRPO comparison of held-out pass@1 needs, from the run's own variance.

The paired differences d(s, t) = success(DepGPO) − success(GRPO) (percentage points; a task's attempts of one seed
averaged over rounds and test sets) are read as d = μ + a_s + b_t + e_st: a seed effect (training runs of the two
methods in seed s differ as a whole), a task effect (some tasks favour one method in every seed) and the rest. The
method of moments of the two-way layout without replication gives the three variances (negative estimates are
taken as 0), from the seeds and tasks with an attempt of both runs in every cell. A new experiment of S seeds and
T tasks estimates μ with variance σ²_seed / S + σ²_task / T + σ²_rest / (S T); it detects DIFFERENCE points with
POWER at a two-sided LEVEL when (z_(1 − α/2) + z_power) × its standard error ≤ DIFFERENCE.

The cost of such a run is extrapolated linearly from measured times: the RL jobs' and evaluation jobs' seconds in
this results tree's Snakemake benchmarks (`benchmarks/{model}/{data}/rl_{run}_seed{s}.tsv`, `eval_…`), scaled to S
seeds of both methods and T tasks, run JOBS at a time as the tiny DAG does. SFT and filtering, shared by every seed, are
left out.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import pandas as pd

from depgpo.report.load import MissingInput, ResultsTree, Setting
from depgpo.report.render import NOT_AVAILABLE, Table
from depgpo.report.tables import POOLED, attempts

DIFFERENCE = 5.0  # percentage points of held-out pass@1
POWER = 0.8
LEVEL = 0.95
SEEDS = (3, 5, 10, 20, 50)  # the designs the table prints
MAX_TASKS = 100_000  # above this, a design is called out of reach
JOBS = 2  # Snakemake jobs at a time on the 2-core machine (the README's command runs one job a core)
NODE_CORES = 16  # a GPU node as the lent ones (one GPU, 16 cores): an estimate that it runs one job a core too
COMPARED = ("depgpo", "grpo")


def variance_components(cells: pd.DataFrame) -> dict[str, float]:
    """σ²_seed, σ²_task, σ²_rest from a complete seeds × tasks frame of d (rows seeds, columns tasks)."""
    s, t = cells.shape
    grand = cells.to_numpy().mean()
    seed_means, task_means = cells.mean(axis=1), cells.mean(axis=0)
    residual = cells.sub(seed_means, axis=0).sub(task_means, axis=1) + grand
    ms_rest = float((residual ** 2).to_numpy().sum() / ((s - 1) * (t - 1)))
    ms_seed = float(t * ((seed_means - grand) ** 2).sum() / (s - 1))
    ms_task = float(s * ((task_means - grand) ** 2).sum() / (t - 1))
    return {"seed": max(0.0, (ms_seed - ms_rest) / t), "task": max(0.0, (ms_task - ms_rest) / s), "rest": ms_rest}


def tasks_needed(components: dict[str, float], seeds: int, target_variance: float) -> float:
    """The fewest tasks T with σ²_seed/S + σ²_task/T + σ²_rest/(S T) ≤ target; inf where no T reaches it."""
    room = target_variance - components["seed"] / seeds
    if room <= 0:
        return math.inf
    per_task = components["task"] + components["rest"] / seeds
    return max(2.0, math.ceil(per_task / room)) if per_task > 0 else 2.0


def benchmark_seconds(tree: ResultsTree, focal: Setting, prefix: str) -> list[float]:
    """Wall seconds of the Snakemake benchmark files `{prefix}*.tsv` of the focal setting."""
    files = sorted((tree.root / "benchmarks" / focal.model / focal.data).glob(f"{prefix}*.tsv"))
    return [float(pd.read_csv(path, sep="\t")["s"].iloc[0]) for path in files]


def power(tree: ResultsTree, focal: Setting) -> Table:
    """`power`: the seeds × test tasks that would detect a DIFFERENCE-point DepGPO − GRPO difference, and the cost."""
    tasks = tree.eval_tasks
    runs = {run: attempts(tasks, focal, run, POOLED) for run in COMPARED}
    for run, frame in runs.items():
        if frame.empty:
            raise MissingInput(f"{focal.path}/eval/{run}/seed*/*.json", "eval")
    both = runs["depgpo"].merge(runs["grpo"], on=["test", "task", "round", "seed"], suffixes=("_a", "_b"))
    both = both.assign(d=100.0 * (both.success_a - both.success_b))
    cells = both.groupby(["seed", "task"]).d.mean().unstack("task").dropna(axis=1)  # tasks every seed attempted
    both = both[both.task.isin(cells.columns)]
    seeds, n_tasks = cells.shape
    if seeds < 2 or n_tasks < 2:
        raise MissingInput(f"{focal.path}/eval/{{depgpo,grpo}}/seed*/ in at least 2 seeds (config interval_seeds) "
                           "with 2 tasks in common", "eval")
    components = variance_components(cells)
    z = NormalDist().inv_cdf(1 - (1 - LEVEL) / 2) + NormalDist().inv_cdf(POWER)
    target = (DIFFERENCE / z) ** 2

    rl_s = {run: benchmark_seconds(tree, focal, f"rl_{run}_seed") for run in COMPARED}
    eval_s = {run: benchmark_seconds(tree, focal, f"eval_{run}_seed") for run in COMPARED}
    if not all(rl_s.values()) or not all(eval_s.values()):
        raise MissingInput(f"benchmarks/{focal.path}/{{rl,eval}}_{{depgpo,grpo}}_seed*.tsv", "rl")
    rl_per_seed = sum(sum(v) / len(v) for v in rl_s.values())
    attempts_per_seed = len(both) / seeds  # one method's attempts of one seed (matched)
    eval_per_attempt = sum(sum(v) / len(v) for v in eval_s.values()) / attempts_per_seed  # both methods
    attempts_per_task = attempts_per_seed / n_tasks  # rounds x test sets a task is in

    rows, cells_text = [], {}
    no_seed_spread = {**components, "seed": 0.0}  # σ²_seed has S - 1 degrees of freedom: the other end of its range
    for s in SEEDS:
        t = tasks_needed(components, s, target)
        t0 = tasks_needed(no_seed_spread, s, target)
        reachable = t <= MAX_TASKS
        hours = (s * (rl_per_seed + t * attempts_per_task * eval_per_attempt) / JOBS / 3600) if reachable else math.inf
        node_hours = hours * JOBS / NODE_CORES
        rows.append({"seeds": s, "tasks": t if reachable else math.inf, "hours": hours,
                     "node_hours_estimate": node_hours, "tasks_without_seed_variance": t0})
        cells_text[str(s)] = [f"{int(t)}" if reachable else "out of reach",
                              f"{hours:.1f}" if reachable else NOT_AVAILABLE,
                              f"{node_hours:.2f}" if reachable else NOT_AVAILABLE, f"{int(t0)}"]
    frame = pd.DataFrame.from_dict(cells_text, orient="index",
                                   columns=["Test tasks", "Hours here", f"Hours, {NODE_CORES}-core GPU node (est.)",
                                            "Test tasks if σ²_seed = 0"])
    frame.index.name = "Seeds"
    numbers = pd.DataFrame(rows).assign(var_seed=components["seed"], var_task=components["task"],
                                        var_rest=components["rest"], measured_seeds=seeds, measured_tasks=n_tasks,
                                        difference=DIFFERENCE, power=POWER)
    observed = float(cells.to_numpy().mean())
    se_now = math.sqrt(components["seed"] / seeds + components["task"] / n_tasks
                       + components["rest"] / (seeds * n_tasks))
    caption = (f"Seeds × test tasks that detect a {DIFFERENCE:g}-point DepGPO − GRPO difference of held-out pass@1 at "
               f"{POWER:.0%} power (two-sided, {LEVEL:.0%}), from this run's variance (depgpo.report.power), and "
               f"the hours such a run takes on this machine ({JOBS} jobs at a time).")
    notes = [f"Measured on {seeds} seeds × {n_tasks} tasks: DepGPO − GRPO {observed:+.1f} points (standard error "
             f"{se_now:.1f} under this model); variance (points²) of seeds {components['seed']:.1f}, tasks "
             f"{components['task']:.1f}, the rest {components['rest']:.1f}.",
             f"Cost per seed: {rl_per_seed / 60:.1f} min of RL (both methods) and {eval_per_attempt:.2f} s of "
             f"evaluation per task attempt (both methods), {attempts_per_task:g} attempts a task; SFT and filtering "
             "(once for all seeds) left out.",
             f"The GPU node's hours are an estimate, not a measurement (the lent GPU machine has no strace or "
             f"bubblewrap, so no episode runs there): the episodes, not the model, take most of a tiny rollout "
             f"(docs/benchmarks.md#rollout-throughput), so {NODE_CORES} cores run {NODE_CORES} jobs where this "
             f"machine runs {JOBS}.",
             f"σ²_seed rests on {seeds - 1} degree(s) of freedom and could be far smaller or larger; the last column "
             "is the design if it were 0. The seed rows are as uncertain as that estimate.",
             "The design counts seeds as a source of variance, as a new experiment must; Table 1's Δ intervals "
             "resample tasks only (its seeds fixed), so at the same design they are narrower.",
             "Generated tiny tasks come in any number; Terminal-Bench 2.0 has 89, so a design above that needs "
             "more seeds or another benchmark."]
    return Table(caption, frame, numbers, notes=notes)
