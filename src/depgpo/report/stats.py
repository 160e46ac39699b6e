"""95% intervals for pass@1 and for the paired difference of two runs' pass@1: a cluster bootstrap over tasks.

An attempt is one (task, round, seed) of a run on a test set, its `success` 0 or 1. A run's pass@1 (%) is 100 x the
mean over its attempts (the mean of the rounds' pass@1 when every round attempts the same tasks, as `depgpo
evaluate` does). Its interval is the 2.5th to 97.5th percentile of that mean over RESAMPLES resamples that each draw
the test set's tasks with replacement, a drawn task bringing all its attempts (every round of every seed) along. The
RNG is seeded with RNG_SEED on every call, so a report is reproducible to the digit.

Tasks are the resampling unit because they are the sample: the test set is a draw of tasks, and its attempts are
not independent, as a task that is easy is solved in most rounds and seeds. Resampling attempts would shrink the
interval by up to the square root of rounds x seeds; resampling tasks keeps both the spread between tasks and the
correlation of a task's attempts in it. It is an interval for these trained policies on tasks like the test set's:
seed-to-seed variation of the training itself shows only through the attempts of the seeds there are (Figure 5
draws the seeds' spread).

A paired difference matches the two runs' attempts on (task, round, seed), the same task drawn with the same sampling
seed (`depgpo evaluate` seeds round r of seed s with s * 7919 + r), and takes the mean of success_a - success_b over
the matched attempts in percentage points; its interval resamples the matched tasks in the same way. Pairing removes
the tasks' difficulty from the difference, so it is much narrower than two separate intervals suggest. Attempts of a
seed only one run has are left out (n_units says how many were matched); if the runs share no seed at all, each
run's successes are first averaged over its seeds per (task, round), and `matched_on` says so. Frames with a `test`
column (several test sets pooled) are matched within their test set, and a task in both sets is one cluster.

Degenerate cases: no attempt (no matched one) gives NaN for the mean and the interval; fewer than two tasks give the
mean and a NaN interval (one task says nothing of the spread between tasks); where every resample has the same mean
(all attempts succeed, or two runs agree on every attempt) the interval has zero width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

RESAMPLES = 4000
RNG_SEED = 0
LEVEL = 0.95
UNIT = ("task", "round", "seed")


@dataclass(frozen=True)
class Interval:
    mean: float  # pass@1 (%), or the difference in percentage points
    low: float  # the 95% interval; NaN when there are fewer than two tasks
    high: float
    n_tasks: int
    n_units: int  # attempts, or matched attempts (matched (task, round) pairs when seeds were averaged)
    matched_on: tuple[str, ...] = ()  # a paired difference: the columns its attempts were matched on


def cluster_bootstrap(tasks: np.ndarray, values: np.ndarray) -> tuple[float, float, float]:
    """The mean of `values` and the percentile interval of that mean over resamples of the tasks (the clusters)."""
    return cluster_ratio_bootstrap(tasks, values, np.ones(len(values)))


def cluster_ratio_bootstrap(tasks: np.ndarray, numerators: np.ndarray,
                            denominators: np.ndarray) -> tuple[float, float, float]:
    """sum(numerators) / sum(denominators) and its percentile interval over resamples of the tasks (the clusters):
    a precision (true positives over positives), an AUROC (wins over pairs), a share of mass. A resample whose
    denominator is 0 has no value and is left out; NaN when the point itself has a zero denominator."""
    numerators, denominators = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if len(numerators) == 0 or denominators.sum() == 0:
        return math.nan, math.nan, math.nan
    _, cluster = np.unique(tasks, return_inverse=True)
    sums, counts = np.bincount(cluster, weights=numerators), np.bincount(cluster, weights=denominators)
    point = float(numerators.sum() / denominators.sum())
    if len(sums) < 2:
        return point, math.nan, math.nan
    draws = np.random.default_rng(RNG_SEED).integers(0, len(sums), size=(RESAMPLES, len(sums)))
    drawn = counts[draws].sum(axis=1)
    ratios = sums[draws].sum(axis=1)[drawn > 0] / drawn[drawn > 0]
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return point, float(low), float(high)


def pass_at_1_interval(units: pd.DataFrame) -> Interval:
    """pass@1 (%) of one run's attempts (columns task, round, seed, success) and its 95% interval."""
    mean, low, high = cluster_bootstrap(units["task"].to_numpy(), units["success"].to_numpy(dtype=float))
    return Interval(100 * mean, 100 * low, 100 * high, units["task"].nunique(), len(units))


def match_attempts(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The attempts of two runs matched as the module docstring says: the key columns and success_a, success_b;
    and the key."""
    key = [column for column in ("test", *UNIT) if column in a and column in b]
    if not set(a["seed"]) & set(b["seed"]):
        key.remove("seed")
        a, b = (frame.groupby(key, as_index=False)["success"].mean() for frame in (a, b))
    matched = a[[*key, "success"]].merge(b[[*key, "success"]], on=key, suffixes=("_a", "_b"))
    return matched, tuple(key)


def paired_difference(a: pd.DataFrame, b: pd.DataFrame) -> Interval:
    """pass@1 of run `a` minus run `b` (percentage points) over their matched attempts, and its 95% interval."""
    matched, key = match_attempts(a, b)
    difference = (matched["success_a"] - matched["success_b"]).to_numpy(dtype=float)
    mean, low, high = cluster_bootstrap(matched["task"].to_numpy(), difference)
    return Interval(100 * mean, 100 * low, 100 * high, matched["task"].nunique(), len(matched), key)
