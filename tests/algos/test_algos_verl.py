"""depgpo.algos against verl 0.9.1: advantages vs verl's GRPO, GiGPO by hand, verl's losses, the estimator registry."""

import importlib

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

from depgpo.algos import verl_registry  # noqa: E402
from depgpo.algos.advantages import compute_depgpo_advantage, compute_gigpo_advantage  # noqa: E402
from depgpo.algos.losses import actor_loss, build_actor_config, policy_loss_fn  # noqa: E402
from depgpo.algos.metrics import token_entropy  # noqa: E402
from depgpo.config import compose  # noqa: E402


def random_multiturn_batch(seed: int, num_groups: int = 3, k: int = 4, length: int = 32):
    """Rows of 1-4 turns (1-4 tokens each) separated by observation tokens, right-padded to different lengths.

    The reward sits on the last response token, as verl's rm_scores do.
    """
    rng = np.random.default_rng(seed)
    batch = num_groups * k
    turn_ids = torch.full((batch, length), -1, dtype=torch.long)
    rewards = torch.zeros(batch, length)
    num_turns = []
    for row in range(batch):
        cursor, turns = 0, int(rng.integers(1, 5))
        for turn in range(turns):
            span = int(rng.integers(1, 5))
            turn_ids[row, cursor : cursor + span] = turn
            cursor += span + int(rng.integers(0, 3))  # observation tokens after the turn
        last_response_token = int((turn_ids[row] >= 0).nonzero().max())
        # task0 always succeeds (a zero-advantage group); other groups mix 0/1 with one fractional reward
        reward = 1.0 if row < k else (rng.random() if row % k == 0 else rng.choice([0.0, 1.0]))
        rewards[row, last_response_token] = float(reward)
        num_turns.append(turns)
    index = np.array([f"task{row // k}" for row in range(batch)], dtype=object)
    return rewards, (turn_ids >= 0).long(), index, turn_ids, num_turns


def random_mean_one_factors(rng, num_turns):
    factors = []
    for turns in num_turns:
        raw = rng.random(turns) * (rng.random(turns) > 0.3)  # some turns get no credit
        raw[rng.integers(turns)] += 0.1  # but never all of them
        factors.append((raw / raw.mean()).tolist())
    return factors


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_depgpo_with_unit_factors_is_verl_grpo(seed, norm_by_std):
    rewards, mask, index, turn_ids, num_turns = random_multiturn_batch(seed)
    expected, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    advantages, returns = compute_depgpo_advantage(
        rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std, turn_ids=turn_ids,
        step_factors=[[1.0] * turns for turns in num_turns],
    )
    torch.testing.assert_close(advantages, expected, atol=1e-6, rtol=0)
    assert returns is advantages


@pytest.mark.parametrize("seed", range(5))
def test_depgpo_redistributes_the_grpo_advantage_over_turns(seed):
    rewards, mask, index, turn_ids, num_turns = random_multiturn_batch(seed)
    factors = random_mean_one_factors(np.random.default_rng(seed), num_turns)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
    advantages, _ = compute_depgpo_advantage(rewards, mask, index, turn_ids=turn_ids, step_factors=factors)
    for row, turns in enumerate(num_turns):
        trajectory_advantage = grpo[row][mask[row].bool()][0].item()
        per_turn = []
        for turn in range(turns):
            tokens = advantages[row][turn_ids[row] == turn]
            # every token of a turn, reasoning and command alike, carries A_traj * f_t ...
            torch.testing.assert_close(tokens, torch.full_like(tokens, trajectory_advantage * factors[row][turn]))
            # ... with the trajectory's sign, or 0 where the turn got no credit
            expected_sign = np.sign(trajectory_advantage) if factors[row][turn] > 0 else 0.0
            assert torch.all(torch.sign(tokens) == expected_sign)
            per_turn.append(tokens[0].item())
        # conservation: the mean over turns of the per-turn advantage is GRPO's trajectory advantage
        assert np.mean(per_turn) == pytest.approx(trajectory_advantage, abs=1e-5)
    assert torch.all(advantages[mask == 0] == 0)


def gigpo_example():
    """Task g: three trajectories, state s0 shared by all, s1 by A and B; task h: D also sees a state named s0.

    Layout per row: turn tokens, with one observation token (-1) after each turn but the last.
    """
    # A: 3 turns, reward 1; B: 2 turns, reward 0; C: 2 turns, reward 1; D, E: 1 turn each, reward 0 (task h).
    turn_ids = torch.tensor([
        [0, 0, -1, 1, -1, 2, 2],
        [0, -1, 1, 1, -1, -1, -1],
        [0, -1, 1, -1, -1, -1, -1],
        [0, 0, -1, -1, -1, -1, -1],
        [0, -1, -1, -1, -1, -1, -1],
    ])
    mask = (turn_ids >= 0).long()
    rewards = torch.zeros(5, 7)
    rewards[0, 6] = 1.0
    rewards[2, 2] = 1.0
    index = np.array(["g", "g", "g", "h", "h"], dtype=object)
    anchors = [["s0", "s1", "s2"], ["s0", "s1"], ["s0", "s3"], ["s0"], ["s4"]]
    step_rewards = [[0.0, 0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0], [0.0]]
    return rewards, mask, index, turn_ids, anchors, step_rewards


def per_turn_values(advantages, turn_ids):
    return [
        [advantages[row][turn_ids[row] == turn][0].item() for turn in range(int(turn_ids[row].max()) + 1)]
        for row in range(turn_ids.shape[0])
    ]


def test_gigpo_matches_hand_computed_advantages_mean_norm():
    rewards, mask, index, turn_ids, anchors, step_rewards = gigpo_example()
    advantages, _ = compute_gigpo_advantage(
        rewards, mask, index, turn_ids=turn_ids, anchor_keys=anchors, step_rewards=step_rewards, omega=1.0,
        gamma=0.95, mode="mean_norm",
    )
    # Episode: task g scores (1, 0, 1), mean 2/3 -> (1/3, -2/3, 1/3); task h scores (0, 0) -> 0.
    # Returns (gamma 0.95): A (0.9025, 0.95, 1), B (0, 0), C (0.95, 1), D (0), E (0).
    # (g, s0) = {0.9025, 0, 0.95}, mean 0.6175 -> A +0.285, B -0.6175, C +0.3325.
    # (g, s1) = {0.95, 0}, mean 0.475 -> A +0.475, B -0.475. s2, s3, (h, s0), s4 are singletons -> 0.
    expected = [
        [1 / 3 + 0.285, 1 / 3 + 0.475, 1 / 3],
        [-2 / 3 - 0.6175, -2 / 3 - 0.475],
        [1 / 3 + 0.3325, 1 / 3],
        [0.0],
        [0.0],
    ]
    got = per_turn_values(advantages, turn_ids)
    for got_row, expected_row in zip(got, expected, strict=True):
        assert got_row == pytest.approx(expected_row, abs=1e-6)
    assert torch.all(advantages[mask == 0] == 0)


def test_gigpo_matches_hand_computed_advantages_mean_std_norm_with_omega():
    rewards, mask, index, turn_ids, anchors, step_rewards = gigpo_example()
    advantages, _ = compute_gigpo_advantage(
        rewards, mask, index, turn_ids=turn_ids, anchor_keys=anchors, step_rewards=step_rewards, omega=0.5,
        mode="mean_std_norm",
    )
    eps = 1e-6
    episode_std = np.std([1.0, 0.0, 1.0], ddof=1)  # 0.57735
    s0_std = np.std([0.9025, 0.0, 0.95], ddof=1)  # 0.53530
    s1_std = np.std([0.95, 0.0], ddof=1)  # 0.67175
    a_ep, b_ep = (1 / 3) / (episode_std + eps), (-2 / 3) / (episode_std + eps)
    expected = [
        [a_ep + 0.5 * 0.285 / (s0_std + eps), a_ep + 0.5 * 0.475 / (s1_std + eps), a_ep],
        [b_ep - 0.5 * 0.6175 / (s0_std + eps), b_ep - 0.5 * 0.475 / (s1_std + eps)],
        [a_ep + 0.5 * 0.3325 / (s0_std + eps), a_ep],
        [0.0],
        [0.0],
    ]
    for got_row, expected_row in zip(per_turn_values(advantages, turn_ids), expected, strict=True):
        assert got_row == pytest.approx(expected_row, abs=1e-5)


@pytest.mark.parametrize("mode, norm_by_std", [("mean_norm", False), ("mean_std_norm", True)])
def test_gigpo_without_repeated_anchor_states_is_the_episode_advantage(mode, norm_by_std):
    rewards, mask, index, turn_ids, num_turns = random_multiturn_batch(seed=7)
    anchors = [[f"row{row}-turn{turn}" for turn in range(turns)] for row, turns in enumerate(num_turns)]
    step_rewards = [[1.0] * turns for turns in num_turns]
    advantages, _ = compute_gigpo_advantage(
        rewards, mask, index, turn_ids=turn_ids, anchor_keys=anchors, step_rewards=step_rewards, mode=mode
    )
    episode, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    torch.testing.assert_close(advantages, episode, atol=1e-6, rtol=0)


# ---- losses ---------------------------------------------------------------------------------------------------------

def method_actor(method: str) -> dict:
    """The method's `actor` section as composed (config/method/base/common.yaml + config/method/METHOD.yaml)."""
    return OmegaConf.to_container(compose([f"method={method}"]).actor)


@pytest.mark.parametrize("name", ["vanilla", "dppo_tv", "dppo_kl"])
def test_policy_losses_are_verl_registry_entries(name):
    assert policy_loss_fn(name) is core_algos.POLICY_LOSS_REGISTRY[name]
    with pytest.raises(ValueError, match="vanilla, dppo_tv, dppo_kl"):
        policy_loss_fn("gspo")


def ratio_batch(ratio: float, advantage: float):
    old_log_prob = torch.full((2, 3), np.log(0.5))
    log_prob = (old_log_prob + np.log(ratio)).requires_grad_()
    return old_log_prob, log_prob, torch.full((2, 3), advantage), torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_clip_higher_keeps_the_gradient_that_symmetric_clipping_removes():
    # ratio 1.25 with a positive advantage: inside DAPO's 1 + 0.28, outside GRPO's 1 + 0.2.
    gradients = {}
    for method in ("dapo", "grpo"):
        config = build_actor_config(method_actor(method), rollout_n=8)
        old_log_prob, log_prob, advantages, mask = ratio_batch(1.25, advantage=1.0)
        loss, _ = actor_loss(config, old_log_prob, log_prob, advantages, mask)
        (gradients[method],) = torch.autograd.grad(loss, log_prob)
    assert torch.all(gradients["dapo"][0] < 0)
    assert torch.all(gradients["grpo"] == 0)


@pytest.mark.parametrize("policy_loss", ["vanilla", "dppo_tv", "dppo_kl"])
def test_losses_give_finite_nonzero_gradients(policy_loss):
    actor = method_actor("dapo" if policy_loss == "vanilla" else "dppo") | {"policy_loss": policy_loss}
    config = build_actor_config(actor, rollout_n=4)
    generator = torch.Generator().manual_seed(0)
    old_log_prob = -torch.rand(4, 6, generator=generator) * 2
    log_prob = (old_log_prob + 0.05 * torch.randn(4, 6, generator=generator)).requires_grad_()
    advantages = torch.randn(4, 1, generator=generator).expand(4, 6)
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    loss, metrics = actor_loss(config, old_log_prob, log_prob, advantages, mask)
    (gradient,) = torch.autograd.grad(loss, log_prob)
    assert torch.isfinite(loss) and torch.all(torch.isfinite(gradient))
    assert gradient.abs().sum() > 0
    assert torch.all(gradient[mask == 0] == 0)
    assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl"} <= metrics.keys()


def test_entropy_bonus_subtracts_the_token_mean_entropy():
    actor = method_actor("grpo") | {"entropy_coeff": 0.01}
    config = build_actor_config(actor, rollout_n=8)
    old_log_prob, log_prob, advantages, mask = ratio_batch(1.0, advantage=0.5)
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1))
    entropy = token_entropy(logits)
    loss, metrics = actor_loss(config, old_log_prob, log_prob, advantages, mask, token_entropy=entropy)
    mean_entropy = entropy[mask.bool()].mean().item()
    assert metrics["actor/entropy_loss"] == pytest.approx(mean_entropy)
    assert loss.item() == pytest.approx(metrics["actor/pg_loss"] - 0.01 * mean_entropy)
    with pytest.raises(ValueError, match="token_entropy"):
        actor_loss(config, old_log_prob, log_prob, advantages, mask)


def test_kl_loss_adds_the_token_mean_k3_divergence_and_pulls_toward_the_reference():
    actor = method_actor("grpo") | {"use_kl_loss": True, "kl_loss_coef": 0.5, "kl_loss_type": "low_var_kl"}
    config = build_actor_config(actor, rollout_n=8)
    old_log_prob, log_prob, _, mask = ratio_batch(1.0, advantage=0.0)  # no policy gradient: only the KL acts
    ref_log_prob = old_log_prob - torch.tensor([[0.3, -0.2, 0.1], [0.0, 0.4, 9.0]])  # 9.0 sits on a masked token
    loss, metrics = actor_loss(config, old_log_prob, log_prob, torch.zeros(2, 3), mask, ref_log_prob=ref_log_prob)
    delta = (ref_log_prob - log_prob.detach())[mask.bool()]
    k3 = (delta.exp() - delta - 1).mean().item()  # Schulman's k3 estimator of KL(policy || reference)
    assert metrics["actor/kl_loss"] == pytest.approx(k3, rel=1e-5)
    assert loss.item() == pytest.approx(metrics["actor/pg_loss"] + 0.5 * k3, rel=1e-5)
    (gradient,) = torch.autograd.grad(loss, log_prob)
    # above the reference the loss pushes the log-prob down, below it up; masked tokens get nothing
    assert torch.all(torch.sign(gradient[mask.bool()]) == torch.sign(-delta))
    assert gradient[1, 2] == 0
    with pytest.raises(ValueError, match="ref_log_prob"):
        actor_loss(config, old_log_prob, log_prob, torch.zeros(2, 3), mask)


@pytest.mark.parametrize("method", ["grpo", "dapo", "dppo", "gigpo", "depgpo"])
def test_every_method_actor_section_builds_a_verl_actor_config(method):
    config = build_actor_config(method_actor(method), rollout_n=8)
    assert config.policy_loss.loss_mode == method_actor(method)["policy_loss"]
    assert (config.clip_ratio_low, config.clip_ratio_high) == (
        method_actor(method)["clip_ratio_low"], method_actor(method)["clip_ratio_high"]
    )


# ---- registry -------------------------------------------------------------------------------------------------------

def test_estimators_resolve_through_verl_registry_and_registration_is_idempotent():
    importlib.reload(verl_registry)
    importlib.import_module("depgpo.algos.verl_registry")
    assert core_algos.get_adv_estimator_fn("depgpo") is compute_depgpo_advantage
    assert core_algos.get_adv_estimator_fn("gigpo") is compute_gigpo_advantage


def test_registered_depgpo_accepts_verl_keyword_call():
    rewards, mask, index, turn_ids, num_turns = random_multiturn_batch(seed=3)
    estimator = core_algos.get_adv_estimator_fn("depgpo")
    # verl's legacy trainer calls estimators with these keywords (config = the algorithm section).
    advantages, _ = estimator(
        token_level_rewards=rewards, response_mask=mask, index=index, config=core_algos.AlgoConfig(),
        turn_ids=turn_ids, step_factors=[[1.0] * turns for turns in num_turns],
    )
    expected, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
    torch.testing.assert_close(advantages, expected, atol=1e-6, rtol=0)
