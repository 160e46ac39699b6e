"""verl on CPU: our config composed into verl's own (unknown keys fail), and the registered terminal agent loop
driven by a CPU generation backend (HFServerManager in place of vLLM) through the real traced sandbox."""

from __future__ import annotations

import asyncio

import pytest

from depgpo.config import compose

pytestmark = pytest.mark.slow

PAPER = ["scale=paper", "model=qwen3.5-9b", "data=seta"]


@pytest.mark.parametrize("method", ["grpo", "dapo", "dppo", "gigpo", "depgpo"])
def test_our_config_composes_into_verls_config(method):
    from depgpo.train.verl_config import compose_verl_config, validate_verl_config

    cfg = compose([*PAPER, f"method={method}"])
    verl_cfg = compose_verl_config(cfg, n_gpus=8)
    validate_verl_config(verl_cfg)  # verl's own checks, as its main_ppo runs them (micro-batch sizes, ...)
    actor = verl_cfg.actor_rollout_ref.actor
    assert verl_cfg.algorithm.adv_estimator == cfg.algorithm.adv_estimator
    assert actor.policy_loss.loss_mode == cfg.actor.policy_loss
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (cfg.actor.clip_ratio_low, cfg.actor.clip_ratio_high)
    assert actor.optim.lr == 1e-6 and verl_cfg.actor_rollout_ref.rollout.n == 8   # Table 7
    assert verl_cfg.data.train_batch_size == 4 and verl_cfg.trainer.total_training_steps == 150
    assert verl_cfg.algorithm.filter_groups.enable == (method == "dapo")
    assert verl_cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "depgpo_terminal"


def test_the_kl_loss_reaches_verl_with_a_reference_policy():
    from verl.trainer.ppo.utils import need_reference_policy

    from depgpo.train.verl_config import compose_verl_config, validate_verl_config

    cfg = compose([*PAPER, "method=grpo", "actor.use_kl_loss=true", "actor.kl_loss_coef=0.05"])
    verl_cfg = compose_verl_config(cfg, n_gpus=8)
    validate_verl_config(verl_cfg)  # with a reference policy, verl checks its micro-batch size too
    actor = verl_cfg.actor_rollout_ref.actor
    assert need_reference_policy(verl_cfg)
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (True, 0.05, "low_var_kl")
    assert not need_reference_policy(compose_verl_config(compose([*PAPER, "method=grpo"]), n_gpus=8))


def test_a_key_verl_does_not_know_is_an_error(monkeypatch):
    from hydra.errors import ConfigCompositionException

    from depgpo.train import verl_config

    original = verl_config.verl_overrides
    monkeypatch.setattr(verl_config, "verl_overrides",
                        lambda cfg, **kw: original(cfg, **kw) + ["actor_rollout_ref.actor.clip_ratio_hgh=0.3"])
    with pytest.raises(ConfigCompositionException, match="clip_ratio_hgh"):
        verl_config.compose_verl_config(compose(PAPER))


def _turn_runs(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of 1s."""
    runs, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


@pytest.mark.sandbox
def test_registered_agent_loop_emits_turn_spans_and_factors(sft_policy):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from depgpo.agent.config import agent_config
    from depgpo.agent.loop import run_rollout
    from depgpo.agent.verl_loop import AGENT_LOOP_NAME, HFServerManager, TerminalAgentLoop
    from depgpo.policy.generate import make_policy
    from depgpo.policy.model import load_policy
    from depgpo.tasks import load_task
    from depgpo.train.verl_config import compose_verl_config

    assert AGENT_LOOP_NAME in _agent_loop_registry
    root, checkpoint, train = sft_policy
    task_dir = train.read_text().split()[0]
    overrides = ["scale=ci"]
    cfg = compose(overrides)
    model, tokenizer = load_policy(checkpoint)
    verl_cfg = compose_verl_config(cfg, policy=str(checkpoint))
    loop = TerminalAgentLoop(trainer_config=DictConfigWrap(verl_cfg), server_manager=HFServerManager(model, tokenizer),
                             tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
                             data_config=DictConfigWrap(verl_cfg.data))
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0},
                               extra_info={"task_dir": task_dir, "seed": 11}))

    turn_ids, factors = out.extra_fields["turn_ids"], out.extra_fields["step_factors"]
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == len(turn_ids)
    runs = _turn_runs(out.response_mask)
    assert out.num_turns >= 1 and len(runs) == out.num_turns   # each model turn is one run of 1s in the mask
    for turn, (start, end) in enumerate(runs):
        assert set(turn_ids[start:end]) == {turn}
    assert all(t == -1 for t, m in zip(turn_ids, out.response_mask) if m == 0)
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask) if m == 0)
    assert len(factors) == out.num_turns and sum(factors) == pytest.approx(out.num_turns)  # mean 1
    assert out.reward_score in (0.0, 1.0)

    # The same seed through the local trainer's policy gives the same trajectory, token for token.
    local = run_rollout(make_policy(model, tokenizer, cfg), load_task(task_dir), agent_config(cfg, credit=True), seed=11)
    assert local.response_ids == out.response_ids and local.reward == out.reward_score
    assert local.turn_ids == turn_ids and local.step_factors == factors
