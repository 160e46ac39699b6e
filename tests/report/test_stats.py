"""The 95% intervals of depgpo.report.stats on hand-made attempts whose answer is known."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from depgpo.report.stats import paired_difference, pass_at_1_interval


def attempts(outcome, tasks: int = 10, rounds: int = 2, seeds=(0, 1, 2), test: str | None = None) -> pd.DataFrame:
    """Attempts of `tasks` tasks x rounds x seeds; outcome(task index, round, seed) gives the success."""
    rows = [{"task": f"t{t}", "round": r, "seed": s, "success": int(outcome(t, r, s))}
            for t in range(tasks) for r in range(rounds) for s in seeds]
    frame = pd.DataFrame(rows, columns=["task", "round", "seed", "success"])
    return frame if test is None else frame.assign(test=test)


def width(interval) -> float:
    return interval.high - interval.low


def test_pass_at_1_is_the_mean_over_attempts_and_its_interval_contains_it():
    interval = pass_at_1_interval(attempts(lambda t, r, s: t < 4 or (t == 4 and r == 0)))
    assert interval.mean == pytest.approx(100 * (4 * 6 + 3) / 60)
    assert interval.low < interval.mean < interval.high
    assert 0 <= interval.low and interval.high <= 100
    assert (interval.n_tasks, interval.n_units) == (10, 60)


def test_the_interval_is_the_binomial_spread_of_tasks():
    """Half of 100 tasks always solved: a resample's mean is Binomial(100, 1/2) / 100, whose 2.5% and 97.5%
    quantiles are 40 and 60."""
    interval = pass_at_1_interval(attempts(lambda t, r, s: t % 2 == 0, tasks=100))
    assert interval.mean == 50
    assert interval.low == pytest.approx(40, abs=1) and interval.high == pytest.approx(60, abs=1)


def test_rounds_and_seeds_of_a_task_do_not_narrow_it():
    """Tasks are the unit: repeating every task's outcome over more rounds and seeds adds no information."""
    outcome = lambda t, r, s: t in (0, 2, 3, 7)  # noqa: E731
    once = pass_at_1_interval(attempts(outcome, rounds=1, seeds=(0,)))
    often = pass_at_1_interval(attempts(outcome, rounds=3, seeds=(0, 1, 2)))
    assert (often.low, often.mean, often.high) == pytest.approx((once.low, once.mean, once.high))
    assert (once.n_units, often.n_units) == (10, 90)


def test_more_tasks_narrow_it():
    outcome = lambda t, r, s: t % 10 in (0, 2, 3, 7)  # noqa: E731
    ten, forty = pass_at_1_interval(attempts(outcome)), pass_at_1_interval(attempts(outcome, tasks=40))
    assert ten.mean == forty.mean == 40
    assert width(forty) < 0.6 * width(ten)  # about half: the width goes with 1 / sqrt(tasks)


def test_it_is_reproducible_and_independent_of_row_order():
    frame = attempts(lambda t, r, s: (t + r + s) % 3 == 0)
    first, again = pass_at_1_interval(frame), pass_at_1_interval(frame.sample(frac=1, random_state=1))
    assert first == again


def test_degenerate_cases():
    single = pass_at_1_interval(attempts(lambda t, r, s: r == 0, tasks=1))
    assert single.mean == 50 and math.isnan(single.low) and math.isnan(single.high) and single.n_tasks == 1
    solved = pass_at_1_interval(attempts(lambda t, r, s: True))
    assert (solved.low, solved.mean, solved.high) == (100, 100, 100)
    empty = pass_at_1_interval(attempts(lambda t, r, s: True, tasks=0))
    assert math.isnan(empty.mean) and math.isnan(empty.low) and empty.n_units == 0


def test_identical_runs_differ_by_zero():
    frame = attempts(lambda t, r, s: (t * 7 + r + s) % 4 == 0)
    difference = paired_difference(frame, frame.copy())
    assert (difference.mean, difference.low, difference.high) == (0, 0, 0)
    assert (difference.n_tasks, difference.n_units, difference.matched_on) == (10, 60, ("task", "round", "seed"))


def test_a_run_that_succeeds_where_the_other_fails():
    difference = paired_difference(attempts(lambda t, r, s: True), attempts(lambda t, r, s: False))
    assert (difference.mean, difference.low, difference.high) == (100, 100, 100)
    opposite = paired_difference(attempts(lambda t, r, s: False), attempts(lambda t, r, s: True))
    assert opposite.mean == -100


def test_a_known_difference_and_its_interval():
    """Of four tasks, run a solves 0 and 1, run b only 0: +25 pp. A resample holds X ~ Binomial(4, 1/4) copies of
    task 1, whose 2.5% and 97.5% quantiles are 0 and 3 (P(X = 0) = 0.32, P(X <= 2) = 0.95, P(X <= 3) = 0.996: well
    clear of the percentiles for any RNG seed): [0, 75]."""
    difference = paired_difference(attempts(lambda t, r, s: t < 2, tasks=4), attempts(lambda t, r, s: t < 1, tasks=4))
    assert difference.mean == pytest.approx(25)
    assert difference.low == pytest.approx(0) and difference.high == pytest.approx(75)


def test_pairing_is_narrower_than_the_runs_own_intervals():
    """Two runs that agree on the hard and the easy tasks alike: their difference is far surer than their levels."""
    a = attempts(lambda t, r, s: t % 2 == 0 or (t == 1 and s == 0), tasks=40)
    b = attempts(lambda t, r, s: t % 2 == 0, tasks=40)
    difference = paired_difference(a, b)
    assert difference.mean == pytest.approx(100 * 2 / 240)
    assert width(difference) < 0.25 * width(pass_at_1_interval(b))


def test_only_the_seeds_both_runs_have_are_matched():
    """b solves everything with seeds 1 and 2 and nothing with seed 0, which is a's only seed: matched on seed 0,
    the runs do not differ, though b's pass@1 is 67 pp above a's."""
    a = attempts(lambda t, r, s: False, seeds=(0,))
    b = attempts(lambda t, r, s: s != 0)
    difference = paired_difference(a, b)
    assert (difference.mean, difference.low, difference.high) == (0, 0, 0)
    assert (difference.n_units, difference.matched_on) == (20, ("task", "round", "seed"))
    assert pass_at_1_interval(b).mean - pass_at_1_interval(a).mean == pytest.approx(200 / 3)


def test_runs_without_a_common_seed_are_matched_on_task_and_round():
    """a (seeds 0, 1) solves tasks 0-4 with seed 0 only: averaged over its seeds, 0.5 on those tasks; b (seed 2)
    solves nothing; so +25 pp, over the (task, round) pairs."""
    a = attempts(lambda t, r, s: t < 5 and s == 0, seeds=(0, 1))
    b = attempts(lambda t, r, s: False, seeds=(2,))
    difference = paired_difference(a, b)
    assert difference.mean == pytest.approx(25)
    assert (difference.n_tasks, difference.n_units, difference.matched_on) == (10, 20, ("task", "round"))


def test_pooled_test_sets_are_matched_within_each_and_a_task_is_one_cluster():
    a = pd.concat([attempts(lambda t, r, s: t < 3, tasks=5, test=test) for test in ("x", "y")])
    b = pd.concat([attempts(lambda t, r, s: t < 2, tasks=5, test="x"),
                   attempts(lambda t, r, s: False, tasks=5, test="y")])
    difference = paired_difference(a, b)
    assert difference.mean == pytest.approx(100 * (1 + 3) / 10)  # a task in x and three in y, of 5 + 5
    assert (difference.n_tasks, difference.n_units) == (5, 60)
    assert difference.matched_on == ("test", "task", "round", "seed")


def test_runs_without_common_attempts_give_nan():
    a = attempts(lambda t, r, s: True)
    b = a.assign(task="other " + a.task)
    difference = paired_difference(a, b)
    assert math.isnan(difference.mean) and math.isnan(difference.low) and difference.n_units == 0
