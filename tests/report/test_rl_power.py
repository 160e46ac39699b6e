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
    assert gain.mean == pytest.approx((0.125 + 0.25) / 2)  # the mean of the seeds' means
    assert (gain.n_tasks, gain.n_units) == (2, 3)
    # Student's t over 2 seed means (1 degree of freedom): 12.706 x sd / sqrt(2)
    half = 12.706 * statistics.stdev([0.125, 0.25]) / math.sqrt(2)
    assert (gain.low, gain.high) == pytest.approx((gain.mean - half, gain.mean + half))


def test_one_seed_has_no_interval_and_equal_seeds_one_of_zero_width():
    pairs = pd.DataFrame({"seed": [0, 0, 1, 1], "update": [1, 2, 1, 2], "d": [0.1] * 4})
    gain = gain_interval(pairs)
    assert (gain.mean, gain.low, gain.high) == pytest.approx((0.1, 0.1, 0.1))
    alone = gain_interval(pairs[pairs.seed == 0].assign(d=[0.0, 0.2]))
    assert alone.mean == pytest.approx(0.1) and math.isnan(alone.low) and math.isnan(alone.high)
    assert math.isnan(gain_interval(pairs.iloc[:0]).mean)


def test_seeds_that_disagree_widen_the_interval_and_updates_that_disagree_do_not():
    """The seeds are the units: the same eight gains, split between seeds or within them."""
    between = pd.DataFrame({"seed": [0] * 4 + [1] * 4, "update": [1, 2, 3, 4] * 2, "d": [0.0] * 4 + [0.2] * 4})
    within = between.assign(d=[0.0, 0.2] * 4)
    wide, narrow = gain_interval(between), gain_interval(within)
    assert wide.mean == narrow.mean == pytest.approx(0.1)
    assert wide.high - wide.low > 0 and narrow.high - narrow.low == pytest.approx(0.0)


def test_dynamic_sampling_ends_a_seeds_pairs_at_its_first_dropped_group():
    """DAPO's draws leave the control's once a group is dropped, and its reward then averages the kept groups."""
    run = frame([(0, 0, 0.5), (0, 1, 0.75), (0, 2, 0.5), (0, 3, 1.0), (1, 0, 0.5), (1, 1, 0.5)])
    run["dapo/dropped_groups"] = [0, 0, 2, 0, 1, 0]
    frozen = frame([(s, u, 0.5) for s in (0, 1) for u in range(4)])
    pairs = paired_gains(run, frozen)
    assert sorted(zip(pairs.seed, pairs["update"])) == [(0, 1)]  # seed 0 until update 2; seed 1 dropped at 0


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
    assert (numbers.tasks_without_seed_variance <= numbers.tasks).all()
    # the cost: per seed both methods' RL (2 x 90 s), and per task 4 attempts (2 rounds x 2 test sets) of both
    # methods at (10 + 10) s / 40 attempts each; two jobs at a time
    expected = reachable.seeds * (180 + reachable.tasks * 4 * 0.5) / 2 / 3600
    assert list(reachable.hours) == pytest.approx(list(expected))
    assert "Measured on 3 seeds × 10 tasks" in table.notes[0]


def test_with_one_seed_the_report_names_what_power_needs(tmp_path):
    """The CI scale evaluates one seed: power cannot estimate σ²_seed and says which inputs would let it."""
    results = build_results(tmp_path / "results", {0: [0, 0, 0]})
    assert report(results, "--out", str(tmp_path / "out")) == 0
    missing = (tmp_path / "out" / "index.md").read_text().split("## Missing")[1]
    assert "power" in missing and "at least 2 seeds" in missing and "rule `evaluate`" in missing
    assert not (tmp_path / "out" / "power.csv").exists()


def test_every_missing_input_names_a_known_producer():
    """A MissingInput with a kind PRODUCERS lacks would crash the report instead of listing what is missing."""
    import ast

    from depgpo.report.load import PRODUCERS
    from tests.helpers import REPO

    package = REPO / "src" / "depgpo" / "report"
    kinds = {(path.name, call.args[1].value) for path in package.glob("*.py")
             for call in ast.walk(ast.parse(path.read_text())) if isinstance(call, ast.Call)
             and getattr(call.func, "id", None) == "MissingInput" and len(call.args) == 2
             and isinstance(call.args[1], ast.Constant)}
    assert kinds and {kind for _, kind in kinds} <= set(PRODUCERS), sorted(kinds)
