"""What RL must do at least: raise the training reward above the frozen control's on the same draws.

The frozen control (depgpo.config.CONTROL_RUNS) samples the SFT policy on GRPO's task draws and sampling seeds and
never changes it. A run's update u of seed s drew the same tasks with the same sampling seeds, so their training
rewards differ only by what the run's updates changed: d(s, u) = reward(run) - reward(frozen). Update 0 is left out:
both are still the SFT policy there, and d = 0 by construction. A run whose dynamic sampling (DAPO) dropped a group
drew other tasks from then on, and its reward averages the groups it kept: its pairs end before that update.

The gain is the mean over seeds of each seed's mean d. A seed's updates share one trajectory of the policy and are
not independent, so the seeds are the units: the 95% interval is Student's t on the seed means (S - 1 degrees of
freedom). With 3 seeds its multiplier is 4.30, and the interval is as wide as three seeds warrant; with one seed
there is none (NaN). A percentile bootstrap over so few clusters would be too narrow.
"""

from __future__ import annotations

import math

import pandas as pd

from depgpo.report.load import MissingInput, ResultsTree, Setting
from depgpo.report.render import Table
from depgpo.report.tables import interval_text
from depgpo.report.stats import Interval

FIRST_UPDATE = 1  # the first update whose rollouts a changed policy drew
FROZEN = "frozen"  # the control run (depgpo.config.CONTROL_RUNS)
DROPPED = "dapo/dropped_groups"  # groups dynamic sampling dropped in an update (depgpo.algos.dapo)
# Student's t, 97.5th percentile, by degrees of freedom; beyond the table its Cornish-Fisher expansion (t_quantile).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086}


def t_quantile(df: int) -> float:
    """The 97.5th percentile of Student's t with `df` degrees of freedom (a 95% two-sided interval)."""
    if df in T975:
        return T975[df]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def comparable(run: pd.DataFrame) -> pd.DataFrame:
    """The updates of each seed before the first one in which dynamic sampling dropped a group."""
    if DROPPED not in run:
        return run
    dropped = run[DROPPED].fillna(0) > 0
    first_drop = run["update"].where(dropped).groupby(run.seed).transform("min")
    return run[first_drop.isna() | (run["update"] < first_drop)]


def paired_gains(run: pd.DataFrame, frozen: pd.DataFrame, reward: str = "reward") -> pd.DataFrame:
    """(seed, update, d) for the pairs both frames have, from frames with columns seed, update and `reward`."""
    run = comparable(run)
    both = run[["seed", "update", reward]].merge(frozen[["seed", "update", reward]], on=["seed", "update"],
                                                  suffixes=("", "_frozen")).dropna()
    both = both[both["update"] >= FIRST_UPDATE]
    return both.assign(d=both[reward] - both[f"{reward}_frozen"])[["seed", "update", "d"]]


def gain_interval(pairs: pd.DataFrame) -> Interval:
    """The mean gain and its interval, from (seed, update, reward, frozen) or (seed, update, d) rows. `n_tasks`
    counts seeds here (the interval's units), `n_units` the pairs."""
    if "d" not in pairs:
        pairs = pairs[pairs["update"] >= FIRST_UPDATE].assign(d=pairs.reward - pairs.frozen).dropna(subset=["d"])
    if pairs.empty:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    seed_means = pairs.groupby("seed").d.mean()
    mean, seeds = float(seed_means.mean()), len(seed_means)
    if seeds < 2:
        return Interval(mean, math.nan, math.nan, seeds, len(pairs))
    half = t_quantile(seeds - 1) * float(seed_means.std(ddof=1)) / math.sqrt(seeds)
    return Interval(mean, mean - half, mean + half, seeds, len(pairs))


def rl_vs_frozen(tree: ResultsTree, focal: Setting) -> Table:
    """`rl_vs_frozen`: every RL run of the focal setting against the frozen control, in percentage points of
    training reward (the CSV's columns: run, diff, ci_low, ci_high)."""
    metrics = tree.metrics
    metrics = metrics[(metrics.model == focal.model) & (metrics.data == focal.data)]
    reward = "train/reward_mean"
    frozen = metrics[metrics.run == FROZEN]
    if frozen.empty:
        raise MissingInput(f"{focal.path}/rl/{FROZEN}/seed*/metrics.jsonl (config `controls: [frozen]`)", "rl")
    rows, cells, left_out = [], {}, []
    for run, frame in metrics[metrics.run != FROZEN].groupby("run"):
        pairs = paired_gains(frame, frozen, reward)
        if pairs.empty:
            left_out.append(run)
            continue
        gain = gain_interval(pairs.assign(d=100 * pairs.d))
        rows.append({"run": run, "diff": gain.mean, "ci_low": gain.low, "ci_high": gain.high})
        cells[run] = [interval_text(gain.mean, gain.low, gain.high, signed=True), str(gain.n_tasks),
                      str(gain.n_units)]
    if not rows:
        raise MissingInput(f"{focal.path}/rl/*/seed*/metrics.jsonl sharing a (seed, update) with {FROZEN}", "rl")
    frame = pd.DataFrame.from_dict(cells, orient="index", columns=["Δ frozen (points)", "Seeds", "Pairs"])
    frame.index.name = "Run"
    caption = (f"Training reward of each RL run on {focal.label} minus the frozen control's on the same task draws and "
               "sampling seeds (percentage points), over updates ≥ 1 of the seeds both ran: the mean of the seeds' "
               "means, with Student's t 95% interval over seeds (none with one seed; depgpo.report.rl_gain).")
    notes = ["Above 0: the run's updates raised its reward on its own training tasks. It says nothing of held-out "
             "tasks (Table 1) and nothing of one method against another."]
    if left_out:
        notes.append(f"No update of {', '.join(left_out)} is comparable with the control's: each seed ran none "
                     "past update 0 on the control's draws, or its dynamic sampling dropped a group from update 0.")
    return Table(caption, frame, pd.DataFrame(rows, columns=["run", "diff", "ci_low", "ci_high"]), notes=notes)

