"""Our Hydra config as verl's own: the overrides that turn verl's `ppo_trainer.yaml` into one of our RL runs.

    overrides = verl_overrides(cfg)          # ["data.train_batch_size=4", "actor_rollout_ref.rollout.n=8", ...]
    verl_cfg = compose_verl_config(cfg)      # verl's config composed with them (struct mode: a key verl does not
                                             # know is an error, so this mapping cannot drift silently)

On GPUs, `depgpo rl ... rl.backend=verl` (depgpo.train.verl_trainer) adds the run's data set and trainer mode to
these overrides and runs verl's trainer with vLLM rollouts. The local CPU trainer (depgpo.train.rl) reads the same
sections of our config, so both paths train the same method.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf


VERL_FILTER_METRICS = {"reward": "seq_final_reward"}  # our name -> verl's (DAPO's dynamic sampling)


def verl_config_dir() -> Path:
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def verl_overrides(cfg: DictConfig, policy: str | None = None, n_gpus: int = 1, out_dir: str = "checkpoints"
                   ) -> list[str]:
    """verl overrides for the RL run that `cfg` (a composed depgpo config) describes, starting from `policy` (the
    SFT checkpoint; default: the model config's path)."""
    policy = policy or cfg.model.get("path")
    if not policy:
        raise ValueError(f"model={cfg.model.name} has no path: give the checkpoint to start from (policy=...)")
    actor, algorithm, rl, agent = cfg.actor, cfg.algorithm, cfg.rl, cfg.agent
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    overrides = {
        # one update = tasks_per_update tasks x K trajectories (Table 7)
        "data.train_batch_size": rl.tasks_per_update,
        "data.train_max_samples": rl.train_max_tasks,  # verl draws the subset with data.seed, as the local trainer
        "data.seed": cfg.seed,
        "data.max_prompt_length": agent.max_context_tokens // 4,
        "data.max_response_length": agent.max_context_tokens,
        "data.return_raw_chat": True,
        "actor_rollout_ref.model.path": policy,
        f"{a}.optim.lr": rl.lr,
        f"{a}.optim.weight_decay": rl.weight_decay,
        f"{a}.grad_clip": rl.grad_clip,
        f"{a}.ppo_mini_batch_size": rl.tasks_per_update,  # one mini-batch: ppo_epochs steps per update, as locally
        f"{a}.ppo_micro_batch_size_per_gpu": 1,
        f"{r}.log_prob_micro_batch_size_per_gpu": 1,  # verl's validate_config requires one of the two sizes
        f"{a}.ppo_epochs": rl.ppo_epochs,
        f"{a}.use_kl_loss": actor.use_kl_loss,
        f"{a}.kl_loss_coef": actor.kl_loss_coef,
        f"{a}.kl_loss_type": actor.kl_loss_type,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 1,  # the reference (SFT) policy, for the KL loss
        f"{a}.policy_loss.loss_mode": actor.policy_loss,
        f"{a}.clip_ratio_low": actor.clip_ratio_low,
        f"{a}.clip_ratio_high": actor.clip_ratio_high,
        f"{a}.clip_ratio_c": actor.clip_ratio_c,
        f"{a}.loss_agg_mode": actor.loss_agg_mode,
        f"{a}.entropy_coeff": actor.entropy_coeff,
        f"{r}.name": "vllm",
        f"{r}.mode": "async",
        f"{r}.n": rl.k,
        f"{r}.tensor_model_parallel_size": cfg.rollout.vllm.tensor_parallel_size,  # the model config's (verl: 2)
        f"{r}.temperature": agent.temperature,
        f"{r}.top_p": agent.top_p,
        f"{r}.prompt_length": agent.max_context_tokens // 4,
        f"{r}.response_length": agent.max_context_tokens,
        f"{r}.multi_turn.enable": True,
        f"{r}.multi_turn.max_assistant_turns": agent.max_turns,
        f"{r}.agent.default_agent_loop": "depgpo_terminal",
        "algorithm.adv_estimator": algorithm.adv_estimator,
        "algorithm.norm_adv_by_std_in_grpo": algorithm.norm_adv_by_std,
        "algorithm.use_kl_in_reward": False,
        "algorithm.filter_groups.enable": algorithm.filter_groups.enable,
        "algorithm.filter_groups.metric": VERL_FILTER_METRICS[algorithm.filter_groups.metric],
        "algorithm.filter_groups.max_num_gen_batches": algorithm.filter_groups.max_num_gen_batches,
        "trainer.total_training_steps": rl.updates,
        "trainer.total_epochs": rl.updates,  # at least one step per epoch: the update count is what stops the run
        "trainer.save_freq": rl.checkpoint_every,
        "trainer.resume_mode": "auto",  # a requeued job resumes from its last checkpoint
        "trainer.n_gpus_per_node": n_gpus,
        "trainer.nnodes": 1,
        "trainer.default_local_dir": out_dir,
        "trainer.logger": "[console,tensorboard]",
        "trainer.project_name": "depgpo",
        "trainer.experiment_name": f"{cfg.model.name}-{cfg.data.name}-{cfg.method.name}-seed{cfg.seed}",
    }
    return [f"{key}={hydra_value(value)}" for key, value in overrides.items()]


def hydra_value(value) -> str:
    """A value as Hydra override text: booleans in lower case, list literals ("[a,b]") as they are, and strings
    that Hydra's grammar would read otherwise (a comma makes a sweep; = ( ) ' and spaces are syntax) quoted."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and not value.startswith("[") and any(c in value for c in " ,=()[]{}'\"\\$~*?"):
        return "'" + value.replace("'", "\\'") + "'"  # in Hydra's quoted strings only the quote is escaped
    return str(value)


def compose_verl_config(cfg: DictConfig, extra_overrides: list[str] = (), **kwargs) -> DictConfig:
    """verl's `ppo_trainer` config with `verl_overrides(cfg, **kwargs)` and then `extra_overrides` (Hydra raises on
    any key verl does not have), and our own settings under `depgpo` (depgpo.agent.config.VerlRunSettings)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from depgpo.agent.config import VerlRunSettings

    GlobalHydra.instance().clear()  # our own config may have been composed in this process already
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        verl_cfg = compose(config_name="ppo_trainer", overrides=[*verl_overrides(cfg, **kwargs), *extra_overrides])
    # Our settings as data beside verl's own keys (no Hydra grammar, so no override can clash with verl's schema).
    OmegaConf.update(verl_cfg, VerlRunSettings.KEY, VerlRunSettings.from_config(cfg).to_mapping(), force_add=True)
    return verl_cfg


def validate_verl_config(verl_cfg: DictConfig) -> None:
    """verl's own checks of a composed config (batch sizes, micro-batches, ...), as `verl.trainer.main_ppo.main`
    runs them before training; raises verl's ValueError naming the key."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=verl_cfg, use_reference_policy=need_reference_policy(verl_cfg),
                    use_critic=need_critic(verl_cfg))
