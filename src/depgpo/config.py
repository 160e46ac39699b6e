"""Hydra config composition for every pipeline stage: `config/config.yaml` + groups + `key=value` overrides.

We use Hydra's compose API rather than `@hydra.main`, so that stages keep their own command line (input and output
paths) and write only where Snakemake tells them to.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO_CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


def config_dir() -> Path:
    """`config/` of the repository (override with DEPGPO_CONFIG_DIR for an installed copy)."""
    path = Path(os.environ.get("DEPGPO_CONFIG_DIR", REPO_CONFIG_DIR))
    if not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"{path}/config.yaml not found: run from a checkout of the repository or set "
                                "DEPGPO_CONFIG_DIR to its config/ directory")
    return path


def compose(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The composed, resolved and validated config. Unknown groups or options raise Hydra's own clear errors
    (e.g. `method=dpgpo` -> "Could not find 'method/dpgpo'", with the available options listed)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from depgpo.algos.method_config import validate_method_config
    from depgpo.env.images import BACKENDS, RUNTIMES

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    OmegaConf.resolve(cfg)
    validate_method_config(cfg)
    if cfg.rl.ppo_epochs < 1:
        raise ValueError(f"rl.ppo_epochs={cfg.rl.ppo_epochs}: optimizer steps per update must be at least 1")
    environment = cfg.agent.environment
    if environment.backend not in BACKENDS:
        raise ValueError(f"agent.environment.backend={environment.backend!r}: use host (this machine's system "
                         "directories) or image (each task's container image)")
    if environment.runtime not in ("auto", *RUNTIMES):
        raise ValueError(f"agent.environment.runtime={environment.runtime!r}: use auto, {', '.join(RUNTIMES)}")
    unknown = [run for run in cfg.get("controls", []) if run not in CONTROL_RUNS]
    if unknown:
        raise ValueError(f"controls: unknown control run(s) {', '.join(map(str, unknown))}; valid: "
                         f"{', '.join(CONTROL_RUNS)}")
    return cfg


@functools.lru_cache(maxsize=16)
def compose_cached(overrides: tuple[str, ...]) -> DictConfig:
    """`compose`, once per distinct overrides, for code that needs the config on every call (verl's agent loop
    and advantage step); treat the result as read-only."""
    return compose(overrides)


def run_name(cfg: DictConfig) -> str:
    """results/ run directory name: the method, then the β of a sweep point or the ablation variant."""
    if cfg.method.name != "depgpo":
        return cfg.method.name
    if cfg.credit.variant != "full":
        return f"depgpo_{cfg.credit.variant}"
    if float(cfg.credit.beta) != 0.5:
        return f"depgpo_beta{cfg.credit.beta}"
    return "depgpo"


# Control runs (config `controls`), not methods: `frozen` samples GRPO's draws with the SFT policy and never changes it
# (lr 0), so a method's training reward can be read against the same tasks and sampling seeds (Figure 5a).
CONTROL_RUNS = {"frozen": ["method=grpo", "rl.lr=0"]}


def run_overrides(run: str) -> list[str]:
    """The config overrides that reproduce a run name (inverse of `run_name`, and the control runs)."""
    if run in CONTROL_RUNS:
        return list(CONTROL_RUNS[run])
    if run.startswith("depgpo_beta"):
        return ["method=depgpo", f"credit.beta={run.removeprefix('depgpo_beta')}"]
    if run.startswith("depgpo_"):
        return ["method=depgpo", f"ablation={run.removeprefix('depgpo_')}"]
    return [f"method={run}"]
