"""What the agent loop runs with, built from the composed config (`agent:` and `credit:` of config/config.yaml)."""

from __future__ import annotations

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
    workers: int = 1                 # rollouts run side by side (threads: the model and the sandbox release the GIL)
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    credit: CreditConfig | None = None  # RL: each rollout's step factors, computed once as it ends


def agent_config(cfg: DictConfig, credit: bool = False) -> AgentConfig:
    """The agent loop of a stage; `credit=True` for RL, whose trainers read each rollout's step factors."""
    environment = cfg.agent.environment
    limits = SandboxLimits(disk_bytes=environment.disk_bytes, disk_inodes=environment.disk_inodes)
    episode = EpisodeConfig(command_timeout_s=cfg.agent.command_timeout_s, backend=environment.backend,
                            runtime=environment.runtime, tampering=environment.tampering, limits=limits,
                            privilege=environment.privilege)
    if environment.cache_dir:
        episode.image_cache = Path(environment.cache_dir)
    if environment.wheel_cache:
        episode.wheel_cache = Path(environment.wheel_cache)
    return AgentConfig(max_turns=cfg.agent.max_turns, max_context_tokens=cfg.agent.max_context_tokens,
                       workers=cfg.agent.workers, episode=episode,
                       credit=CreditConfig.from_mapping(OmegaConf.to_container(cfg.credit)) if credit else None)
