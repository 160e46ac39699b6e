"""rl_vs_frozen (depgpo.report.rl_gain) and the power statement (depgpo.report.power), on worked numbers."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest

from depgpo.report.load import ResultsTree
from depgpo.report.power import DIFFERENCE, tasks_needed, variance_components
from depgpo.report.rl_gain import gain_interval, paired_gains, rl_vs_frozen
from tests.report.test_report import (SEEDS, SETA, UPDATES, build_multi_seed_results, build_results, report,
                                      write_benchmarks, write_frozen)


def frame(rows):
    return pd.DataFrame(rows, columns=["seed", "update", "reward"])


def test_gains_pair_seed_and_update_and_leave_update_0_out():
    run = frame([(0, 0, 0.5), (0, 1, 0.75), (0, 2, 0.5), (1, 0, 0.25), (1, 1, 0.5), (2, 1, 1.0)])
    frozen = frame([(0, 0, 0.5), (0, 1, 0.5), (0, 2, 0.5), (1, 0, 0.25), (1, 1, 0.25)])  # seed 2: no control
    pairs = paired_gains(run, frozen)
    assert sorted(zip(pairs.seed, pairs["update"], pairs.d)) == [(0, 1, 0.25), (0, 2, 0.0), (1, 1, 0.25)]
    gain = gain_interval(pairs)
    assert gain.mean == pytest.approx(0.5 / 3) and (gain.n_tasks, gain.n_units) == (2, 3)
    assert gain.low <= gain.mean <= gain.high
    assert gain_interval(pairs) == gain  # seeded: the same interval every call


def test_a_constant_gain_has_an_interval_of_zero_width_and_no_pair_gives_nan():
    pairs = pd.DataFrame({"seed": [0, 0, 1, 1], "update": [1, 2, 1, 2], "d": [0.1] * 4})
    gain = gain_interval(pairs)
    assert (gain.mean, gain.low, gain.high) == pytest.approx((0.1, 0.1, 0.1))
    assert math.isnan(gain_interval(pairs.iloc[:0]).mean)


def test_seeds_that_disagree_widen_the_interval_more_than_updates_that_disagree():
    """Two-level resampling: the same eight gains, split between seeds or within them."""
    between = pd.DataFrame({"seed": [0] * 4 + [1] * 4, "update": [1, 2, 3, 4] * 2, "d": [0.0] * 4 + [0.2] * 4})
    within = between.assign(d=[0.0, 0.2] * 4)
    wide, narrow = gain_interval(between), gain_interval(within)
    assert wide.mean == narrow.mean == pytest.approx(0.1)
    assert wide.high - wide.low > narrow.high - narrow.low


def test_rl_vs_frozen_has_one_row_per_run_in_points(tmp_path):
    results = build_results(tmp_path / "results")  # every run: reward 0.1 u + 0.02 seed; the control 0.05 u
    write_frozen(results, SEEDS)
    table = rl_vs_frozen(ResultsTree(results), SETA)
    assert list(table.numbers.columns) == ["run", "diff", "ci_low", "ci_high"]
    assert "frozen" not in set(table.numbers.run) and len(table.numbers) == 12  # 5 methods, 3 betas, 4 ablations
    expected = 100 * (statistics.fmean(0.05 * u for u in range(1, UPDATES)) + 0.02 * statistics.fmean(SEEDS))
    assert table.numbers.set_index("run").loc["grpo", "diff"] == pytest.approx(expected)
    assert report(results, "--out", str(tmp_path / "out")) == 0
    written = pd.read_csv(tmp_path / "out" / "rl_vs_frozen.csv")
    assert list(written.columns) == ["run", "diff", "ci_low", "ci_high"] and (written.ci_low <= written["diff"]).all()


def test_without_the_control_the_report_names_what_is_missing(tmp_path):
    results = build_results(tmp_path / "results")
    assert report(results, "--out", str(tmp_path / "out")) == 0
    missing = (tmp_path / "out" / "index.md").read_text().split("## Missing")[1]
    assert "rl_vs_frozen" in missing and "controls: [frozen]" in missing
    assert not (tmp_path / "out" / "rl_vs_frozen.csv").exists()


def test_variance_components_of_an_additive_layout():
    """d = seed effect + task effect, no rest: the components are the effects' sample variances."""
    seed_effect, task_effect = np.array([-4.0, 0.0, 10.0]), np.array([5.0, -5.0, 0.0, 20.0])
    cells = pd.DataFrame(seed_effect[:, None] + task_effect[None, :])
    components = variance_components(cells)
    assert components["rest"] == pytest.approx(0.0, abs=1e-9)
    assert components["seed"] == pytest.approx(np.var(seed_effect, ddof=1))
    assert components["task"] == pytest.approx(np.var(task_effect, ddof=1))


def test_tasks_needed_solves_the_variance_bound():
    components = {"seed": 2.0, "task": 30.0, "rest": 300.0}
    target = 3.0
    t = tasks_needed(components, 5, target)
    variance = lambda tasks: 2.0 / 5 + 30.0 / tasks + 300.0 / (5 * tasks)  # noqa: E731
    assert variance(t) <= target < variance(t - 1)
    assert tasks_needed(components, 1, 2.0) == math.inf  # the seeds' share alone exceeds the bound


def test_power_table_from_a_three_seed_tree(tmp_path):
    results = build_multi_seed_results(tmp_path / "results")
    write_benchmarks(results, SETA, ("grpo", "depgpo"), (0, 1, 2), rl_s=90.0, eval_s=10.0)
    from depgpo.report.power import power

    table = power(ResultsTree(results), SETA)
    numbers = table.numbers
    assert list(numbers.seeds) == [3, 5, 10, 20, 50]
    assert (numbers.measured_seeds == 3).all() and (numbers.difference == DIFFERENCE).all()
    reachable = numbers[np.isfinite(numbers.tasks)]
    assert (reachable.tasks.diff().dropna() <= 0).all()  # more seeds never need more tasks
    assert (reachable.hours.diff().dropna() > 0).all() or len(reachable) < 2
    assert "Measured on 3 seeds" in table.notes[0]
