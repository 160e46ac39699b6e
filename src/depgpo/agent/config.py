"""What the agent loop runs with, built from the composed config (`agent:` and `credit:` of config/config.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from depgpo.credit import CreditConfig
from depgpo.env.episode import EpisodeConfig
from depgpo.env.sandbox.layout import SandboxLimits


@dataclass
class AgentConfig:
    max_turns: int = 8
    max_context_tokens: int = 1024   # stop before the context outgrows the model (its position embeddings)
    workers: int = 1                 # episodes' commands run side by side (threads: the sandbox releases the GIL)
    decode_batch: int = 32           # rollouts run in lock-step, their turns decoded as one batch (iter_rollouts)
    decode_groups: int = 1           # a batch's rollouts in fixed groups: one decodes while the others' commands run
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    credit: CreditConfig | None = None  # RL: each rollout's step factors, computed once as it ends


def agent_config(cfg: DictConfig, credit: bool = False) -> AgentConfig:
    """The agent loop of a stage; `credit=True` for RL, whose trainers read each rollout's step factors."""
    environment = cfg.agent.environment
    limits = SandboxLimits(disk_bytes=environment.disk_bytes, disk_inodes=environment.disk_inodes,
                           pin=environment.pin_cpu)
    episode = EpisodeConfig(command_timeout_s=cfg.agent.command_timeout_s, backend=environment.backend,
                            runtime=environment.runtime, tampering=environment.tampering, limits=limits,
                            verifier_view=environment.verifier_view,
                            privilege=environment.privilege)
    if environment.cache_dir:
        episode.image_cache = Path(environment.cache_dir)
    if environment.wheel_cache:
        episode.wheel_cache = Path(environment.wheel_cache)
    return AgentConfig(max_turns=cfg.agent.max_turns, max_context_tokens=cfg.agent.max_context_tokens,
                       workers=cfg.agent.workers, decode_batch=cfg.agent.decode_batch,
                       decode_groups=cfg.agent.decode_groups, episode=episode,
                       credit=CreditConfig.from_mapping(OmegaConf.to_container(cfg.credit)) if credit else None)


@dataclass(frozen=True)
class VerlRunSettings:
    """What verl's side of a run reads of our config (its agent loop, its advantage step), composed once where verl's
    config is (`depgpo.train.verl_config.compose_verl_config`) and carried in it under `depgpo` as plain data: verl
    ships its config to its Ray workers, so the settings travel with it, not as override strings to compose again."""

    agent: dict      # `agent:` of the composed config, resolved
    credit: dict     # `credit:`
    gigpo: dict      # `algorithm.gigpo:` (omega, gamma, mode)

    KEY = "depgpo"   # where they live in verl's config

    @classmethod
    def from_config(cls, cfg: DictConfig) -> "VerlRunSettings":
        container = OmegaConf.to_container(cfg, resolve=True)
        return cls(agent=container["agent"], credit=container["credit"], gigpo=container["algorithm"]["gigpo"])

    @classmethod
    def from_verl_config(cls, verl_cfg: Mapping) -> "VerlRunSettings":
        settings = verl_cfg.get(cls.KEY) if hasattr(verl_cfg, "get") else None
        missing = [key for key in ("agent", "credit", "gigpo") if not settings or key not in settings]
        if missing:
            raise ValueError(f"verl's config has no {cls.KEY}.{missing[0]}: compose it with "
                             "depgpo.train.verl_config.compose_verl_config, which adds our settings")
        plain = OmegaConf.to_container(settings) if isinstance(settings, DictConfig) else dict(settings)
        return cls(agent=plain["agent"], credit=plain["credit"], gigpo=plain["gigpo"])

    def to_mapping(self) -> dict:
        return {"agent": self.agent, "credit": self.credit, "gigpo": self.gigpo}

    def agent_config(self) -> AgentConfig:
        """The agent loop's configuration, built by `agent_config` as every other stage builds it."""
        return agent_config(OmegaConf.create({"agent": self.agent, "credit": self.credit}), credit=True)
