"""What RL must do at least: raise the training reward above the frozen control's on the same draws.

The frozen control (depgpo.config.CONTROL_RUNS) samples the SFT policy on GRPO's task draws and sampling seeds and
never changes it. A run's update u of seed s drew the same tasks with the same sampling seeds, so their training
rewards differ only by what the run's updates changed: d(s, u) = reward(run) - reward(frozen). Update 0 is left out:
both are still the SFT policy there, and d = 0 by construction.

The gain is the mean of d over the (seed, update) pairs both runs logged. Its 95% interval is a two-level percentile
bootstrap: seeds drawn with replacement, then each drawn seed's updates with replacement, RESAMPLES times. A seed's
updates share one trajectory of the policy and are not independent; the first level keeps that seed-to-seed spread
in the interval (with 3 seeds it is coarse, and it says so by being wide). The RNG is seeded on every call, so a
report is reproducible to the digit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from depgpo.report.load import MissingInput, ResultsTree, Setting
from depgpo.report.render import Table
from depgpo.report.stats import LEVEL, RNG_SEED, Interval
from depgpo.report.tables import interval_text

RESAMPLES = 4000
FIRST_UPDATE = 1  # the first update whose rollouts a changed policy drew
FROZEN = "frozen"  # the control run (depgpo.config.CONTROL_RUNS)


def paired_gains(run: pd.DataFrame, frozen: pd.DataFrame, reward: str = "reward") -> pd.DataFrame:
    """(seed, update, d) for the pairs both frames have, from frames with columns seed, update and `reward`."""
    both = run[["seed", "update", reward]].merge(frozen[["seed", "update", reward]], on=["seed", "update"],
                                                  suffixes=("", "_frozen")).dropna()
    both = both[both["update"] >= FIRST_UPDATE]
    return both.assign(d=both[reward] - both[f"{reward}_frozen"])[["seed", "update", "d"]]


def gain_interval(pairs: pd.DataFrame) -> Interval:
    """The mean gain and its interval, from (seed, update, reward, frozen) or (seed, update, d) rows. `n_tasks`
    counts seeds here (the first-level unit), `n_units` the pairs."""
    if "d" not in pairs:
        pairs = pairs[pairs["update"] >= FIRST_UPDATE].assign(d=pairs.reward - pairs.frozen).dropna(subset=["d"])
    if pairs.empty:
        return Interval(float("nan"), float("nan"), float("nan"), 0, 0)
    by_seed = [group.d.to_numpy() for _, group in pairs.groupby("seed")]
    mean = float(pairs.d.mean())
    if len(pairs) < 2:
        return Interval(mean, float("nan"), float("nan"), len(by_seed), len(pairs))
    rng = np.random.default_rng(RNG_SEED)
    means = np.empty(RESAMPLES)
    for i in range(RESAMPLES):
        drawn = rng.integers(len(by_seed), size=len(by_seed))
        values = np.concatenate([rng.choice(by_seed[s], size=len(by_seed[s])) for s in drawn])
        means[i] = values.mean()
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(mean, float(low), float(high), len(by_seed), len(pairs))


def rl_vs_frozen(tree: ResultsTree, focal: Setting) -> Table:
    """`rl_vs_frozen`: every RL run of the focal setting against the frozen control, in percentage points of
    training reward (the CSV's columns: run, diff, ci_low, ci_high)."""
    metrics = tree.metrics
    metrics = metrics[(metrics.model == focal.model) & (metrics.data == focal.data)]
    reward = "train/reward_mean"
    frozen = metrics[metrics.run == FROZEN]
    if frozen.empty:
        raise MissingInput(f"{focal.path}/rl/{FROZEN}/seed*/metrics.jsonl (config `controls: [frozen]`)", "rl")
    rows, cells, seeds = [], {}, {}
    for run, frame in metrics[metrics.run != FROZEN].groupby("run"):
        pairs = paired_gains(frame, frozen, reward)
        if pairs.empty:
            continue
        gain = gain_interval(pairs.assign(d=100 * pairs.d))
        rows.append({"run": run, "diff": gain.mean, "ci_low": gain.low, "ci_high": gain.high})
        cells[run] = [interval_text(gain.mean, gain.low, gain.high, signed=True), str(gain.n_tasks),
                      str(gain.n_units)]
        seeds[run] = gain.n_tasks
    if not rows:
        raise MissingInput(f"{focal.path}/rl/*/seed*/metrics.jsonl sharing a (seed, update) with {FROZEN}", "rl")
    frame = pd.DataFrame.from_dict(cells, orient="index", columns=["Δ frozen (points)", "Seeds", "Pairs"])
    frame.index.name = "Run"
    caption = (f"Training reward of each RL run on {focal.label} minus the frozen control's on the same task draws and "
               "sampling seeds (percentage points), over updates ≥ 1 of the seeds both ran, with its 95% interval "
               "(seeds, then updates within a seed, resampled: depgpo.report.rl_gain).")
    notes = ["Above 0: the run's updates raised its reward on its own training tasks. It says nothing of held-out "
             "tasks (Table 1) and nothing of one method against another."]
    return Table(caption, frame, pd.DataFrame(rows, columns=["run", "diff", "ci_low", "ci_high"]), notes=notes)

