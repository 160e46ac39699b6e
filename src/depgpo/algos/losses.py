"""Actor loss by method, taken from verl: its registered policy losses and its `agg_loss`.

GRPO, GiGPO and DepGPO use "vanilla" (PPO clip); DAPO uses "vanilla" with clip-higher (clip_ratio_high > low);
DPPO uses "dppo_tv" or "dppo_kl", where the clip ratios are divergence thresholds. The combination mirrors verl's
own actor loss (`verl.workers.utils.losses.ppo_loss`): policy loss minus entropy_coeff x aggregated entropy, plus
kl_loss_coef x the aggregated KL to the reference (SFT) policy when use_kl_loss is set. verl is imported inside the
functions.
"""

from collections.abc import Mapping

import torch

POLICY_LOSSES = ("vanilla", "dppo_tv", "dppo_kl")


def policy_loss_fn(name: str):
    """verl's registered policy loss `name`, limited to the losses the compared methods use."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; valid: {', '.join(POLICY_LOSSES)}")
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    return get_policy_loss_fn(name)


def build_actor_config(actor: Mapping, rollout_n: int):
    """verl's ActorConfig from our `actor` config section (policy_loss, clip ratios, aggregation, entropy_coeff, the
    KL loss: use_kl_loss, kl_loss_coef, kl_loss_type; verl's defaults where the section leaves them out)."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(
        # strategy and the micro-batch size are required by ActorConfig's validation; the loss never reads them.
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=rollout_n,
        policy_loss=PolicyLossConfig(loss_mode=actor["policy_loss"]),
        clip_ratio=actor["clip_ratio_low"],
        clip_ratio_low=actor["clip_ratio_low"],
        clip_ratio_high=actor["clip_ratio_high"],
        clip_ratio_c=actor["clip_ratio_c"],
        loss_agg_mode=actor["loss_agg_mode"],
        entropy_coeff=actor["entropy_coeff"],
        **{key: actor[key] for key in ("use_kl_loss", "kl_loss_coef", "kl_loss_type") if key in actor},
    )


def actor_loss(
    config,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    token_entropy: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy loss for `config.policy_loss.loss_mode`, minus the entropy bonus when entropy_coeff is set, plus the KL
    loss when use_kl_loss is set.

    `config` is verl's ActorConfig (see `build_actor_config`); all tensors are (bs, L) and `response_mask` selects
    the tokens the policy generated. `token_entropy` (see `metrics.token_entropy`) is needed only for the bonus,
    `ref_log_prob` (the reference policy's log-probs of the same tokens) only for the KL loss.
    """
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

    loss_fn = policy_loss_fn(config.policy_loss.loss_mode)
    mask = response_mask.bool()
    loss, metrics = loss_fn(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
    )
    metrics["actor/pg_loss"] = loss.detach().item()
    if config.entropy_coeff:
        if token_entropy is None:
            raise ValueError("entropy_coeff is set but no token_entropy was given")
        entropy = agg_loss(
            loss_mat=token_entropy, loss_mask=mask, loss_agg_mode=config.loss_agg_mode, **config.global_batch_info
        )
        loss = loss - config.entropy_coeff * entropy
        metrics["actor/entropy_loss"] = entropy.detach().item()
    if config.use_kl_loss:
        if ref_log_prob is None:
            raise ValueError("use_kl_loss is set but no ref_log_prob was given")
        kl = agg_loss(loss_mat=kl_penalty(log_prob, ref_log_prob, config.kl_loss_type), loss_mask=mask,
                      loss_agg_mode=config.loss_agg_mode, **config.global_batch_info)
        loss = loss + config.kl_loss_coef * kl
        metrics["actor/kl_loss"] = kl.detach().item()
    return loss, metrics
