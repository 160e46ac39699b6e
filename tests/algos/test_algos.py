"""Pure-torch parts of depgpo.algos: turn broadcasting, GiGPO step math, DAPO rules, metrics. No verl import."""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import depgpo
from depgpo.algos.advantages import (
    anchor_group_advantages,
    broadcast_turn_values,
    compute_depgpo_advantage,
    compute_gigpo_advantage,
    discounted_returns,
)
from depgpo.algos.dapo import collect_groups, informative_trajectory_mask, overlong_penalty
from depgpo.algos.metrics import (
    gradient_norm,
    masked_mean,
    mean_credit_diagnostics,
    step_factor_std,
    token_entropy,
    update_metrics,
    zero_advantage_group_fraction,
)


def test_pure_modules_do_not_import_verl():
    code = (
        "import sys, depgpo.algos.advantages, depgpo.algos.dapo, depgpo.algos.metrics, depgpo.algos.losses, "
        "depgpo.algos.method_config; assert 'verl' not in sys.modules, 'verl imported'"
    )
    src_dir = str(Path(depgpo.__file__).parents[1])
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": src_dir})


# ---- turn ids -> tokens ----------------------------------------------------------------------------------------

def test_broadcast_puts_each_turn_value_on_its_tokens_and_zero_elsewhere():
    turn_ids = torch.tensor([[0, 0, -1, 1, 1, -1], [0, -1, -1, 1, 2, -1]])
    values = broadcast_turn_values([[2.0, 0.5], [1.0, 0.0, 3.0]], turn_ids)
    assert values.tolist() == [[2.0, 2.0, 0.0, 0.5, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0, 3.0, 0.0]]


def test_broadcast_rejects_a_turn_without_a_value():
    with pytest.raises(ValueError, match="turn 2"):
        broadcast_turn_values([[1.0, 1.0]], torch.tensor([[0, 1, 2]]))


def test_advantages_reject_turn_ids_that_disagree_with_the_response_mask():
    rewards, mask, index = torch.zeros(1, 3), torch.tensor([[1, 1, 0]]), np.array(["g"])
    with pytest.raises(ValueError, match="exactly on response tokens"):
        compute_depgpo_advantage(rewards, mask, index, turn_ids=torch.tensor([[0, -1, -1]]), step_factors=[[1.0]])
    with pytest.raises(ValueError, match="exactly on response tokens"):
        compute_gigpo_advantage(
            rewards, mask, index, turn_ids=torch.tensor([[0, 0, 0]]), anchor_keys=[["s"]], step_rewards=[[0.0]]
        )


@pytest.mark.parametrize(
    "factors, message",
    [([[0.5, 0.5]], "mean 1"), ([[-1.0, 3.0]], ">= 0"), ([[float("nan"), 1.0]], "finite")],
)
def test_depgpo_rejects_factors_that_are_not_nonnegative_with_mean_one(factors, message):
    turn_ids = torch.tensor([[0, 1]])
    with pytest.raises(ValueError, match=message):
        compute_depgpo_advantage(
            torch.zeros(1, 2), torch.ones(1, 2), np.array(["g"]), turn_ids=turn_ids, step_factors=factors
        )


# ---- GiGPO step advantage --------------------------------------------------------------------------------------

def test_discounted_returns_follow_gigpo_eq5():
    assert discounted_returns([0.0, 0.0, 1.0], gamma=0.95) == pytest.approx([0.9025, 0.95, 1.0])
    assert discounted_returns([1.0, 0.0, 2.0], gamma=0.5) == pytest.approx([1.5, 1.0, 2.0])


def test_anchor_groups_are_per_task_and_singletons_get_zero():
    index = np.array(["g", "g", "h"])
    anchors = [["s0", "s1"], ["s0", "s2"], ["s0"]]
    returns = [[1.0, 4.0], [3.0, 5.0], [10.0]]
    # (g, s0) = {1, 3}: mean 2, sample std sqrt(2); s1, s2 and (h, s0) are singletons.
    assert anchor_group_advantages(index, anchors, returns, normalise_by_std=False) == [[-1.0, 0.0], [1.0, 0.0], [0.0]]
    scaled = anchor_group_advantages(index, anchors, returns, normalise_by_std=True, epsilon=0.0)
    flat = [value for row in scaled for value in row]
    assert flat == pytest.approx([-1 / math.sqrt(2), 0.0, 1 / math.sqrt(2), 0.0, 0.0])


def test_repeated_anchor_within_one_trajectory_joins_the_same_group():
    # The agent came back to state "s" at turn 2: returns 2 and 0 at "s" are compared with each other.
    advantages = anchor_group_advantages(np.array(["g"]), [["s", "t", "s"]], [[2.0, 1.0, 0.0]], normalise_by_std=False)
    assert advantages == [[1.0, 0.0, -1.0]]


# ---- DAPO --------------------------------------------------------------------------------------------------------

def test_dynamic_sampling_drops_exactly_the_all_equal_groups():
    group_ids = ["a", "a", "a", "b", "b", "b", "c", "c", "d", "e", "e"]
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 1, 1.0]
    keep = informative_trajectory_mask(group_ids, rewards)
    # a, c, e: every trajectory scored the same (1 and 1.0 are equal); b varies; d has one trajectory, kept as in verl.
    kept_groups = sorted({g for g, k in zip(group_ids, keep, strict=True) if k})
    assert kept_groups == ["b", "d"]
    assert keep.tolist() == [False] * 3 + [True] * 3 + [False] * 2 + [True] + [False] * 2


def draws_of(batches):
    """A draw(first, size) that serves the groups of `batches` in order and records each call."""
    served, calls = iter(batches), []

    def draw(first, size):
        calls.append((first, size))
        groups = next(served)
        assert len(groups) == size
        return groups

    return draw, calls


def test_dynamic_sampling_redraws_what_is_missing_and_keeps_the_dropped_groups_apart():
    draw, calls = draws_of([[[1, 1], [0, 1]], [[0, 0]], [[1, 0]]])
    kept, dropped = collect_groups(draw, lambda group: group, wanted=2, dynamic_sampling=True, max_num_gen_batches=10)
    assert kept == [[0, 1], [1, 0]] and dropped == [[1, 1], [0, 0]]
    assert calls == [(0, 2), (2, 1), (3, 1)]  # draw numbers continue where the last round stopped


def test_dynamic_sampling_stops_at_its_budget_of_draws_and_without_it_keeps_everything():
    draw, calls = draws_of([[[1, 1], [1, 1]], [[1, 1], [1, 1]], [[0, 0], [1, 1]]])
    kept, dropped = collect_groups(draw, lambda group: group, wanted=2, dynamic_sampling=True, max_num_gen_batches=3)
    assert kept == [] and len(dropped) == 6 and calls == [(0, 2), (2, 2), (4, 2)]
    draw, calls = draws_of([[[1, 1], [0, 0]]])
    kept, dropped = collect_groups(draw, lambda group: group, wanted=2, dynamic_sampling=False, max_num_gen_batches=3)
    assert kept == [[1, 1], [0, 0]] and dropped == [] and calls == [(0, 2)]


def test_overlong_penalty_matches_verl_dapo_reward_manager_by_hand():
    # max 20, buffer 4: free up to 16 tokens, then -1/4 per token down to -1 at 20.
    penalty = overlong_penalty([10, 16, 17, 18, 20], max_resp_len=20, buffer_len=4, penalty_factor=1.0)
    assert penalty.tolist() == [0.0, 0.0, -0.25, -0.5, -1.0]
    half = overlong_penalty(torch.tensor([18, 20]), max_resp_len=20, buffer_len=4, penalty_factor=0.5)
    assert half.tolist() == [-0.25, -0.5]


@pytest.mark.parametrize("max_resp_len, buffer_len", [(20, 0), (3, 4)])
def test_overlong_penalty_rejects_the_settings_verl_rejects(max_resp_len, buffer_len):
    with pytest.raises(ValueError):
        overlong_penalty([1], max_resp_len=max_resp_len, buffer_len=buffer_len, penalty_factor=1.0)


# ---- metrics -------------------------------------------------------------------------------------------------------

def test_the_logged_policy_entropy_is_the_masked_mean_over_generated_tokens():
    logits = torch.zeros(1, 3, 8)
    logits[0, 2, 0] = 50.0  # a near-deterministic position, masked out below
    entropy = masked_mean(token_entropy(logits), torch.tensor([[1, 1, 0]]))
    assert entropy == pytest.approx(math.log(8), rel=1e-6)


def test_gradient_norm_is_the_global_l2_norm():
    first, second = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    untouched = torch.nn.Parameter(torch.zeros(1))
    (3 * first[0] + 4 * second[0]).backward()
    assert gradient_norm([first, second, untouched]) == pytest.approx(5.0)


def test_zero_advantage_fraction_counts_groups_with_equal_rewards():
    # a and c are all-equal, b varies, d is a single trajectory.
    assert zero_advantage_group_fraction(list("aabbcccd"), [1, 1, 0, 1, 0, 0, 0, 1]) == 0.5


def test_step_factor_std_and_credit_diagnostics_are_averaged_over_trajectories():
    assert step_factor_std([[1.0, 1.0], [0.5, 1.5]]) == pytest.approx(0.25)
    diagnostics = [
        {"usable": True, "commands": np.int64(6), "fallback": None, "positive_writes": 0.5, "credits": [1.0]},
        {"usable": False, "commands": 8, "fallback": "missing_trace", "positive_writes": 0.0, "credits": []},
    ]
    assert mean_credit_diagnostics(diagnostics) == {
        "credit/usable": 0.5,
        "credit/commands": 7.0,
        "credit/positive_writes": 0.25,
        "credit/fallback=missing_trace": 0.5,
    }


def test_update_metrics_adds_depgpo_metrics_only_when_given():
    common = {"rewards": [1.0, 0.0, 1.0, 1.0], "group_ids": ["a", "a", "b", "b"], "entropy": 0.7, "grad_norm": 2.0}
    assert update_metrics(**common) == {
        "train/reward_mean": 0.75,
        "train/zero_adv_group_frac": 0.5,
        "actor/entropy": 0.7,
        "actor/grad_norm": 2.0,
    }
    factors = [[1.0], [1.0], [0.0, 2.0], [1.0]]
    depgpo = update_metrics(**common, step_factors=factors, credit_diagnostics=[{"usable": True}])
    assert depgpo["depgpo/step_factor_std"] == pytest.approx(0.25)
    assert depgpo["credit/usable"] == 1.0
