# Shared helpers: paths of the results tree (docs/pipeline.md) and the overrides rules pass to depgpo.
import os

from depgpo.config import run_overrides


def setting_overrides(wildcards):
    """Hydra overrides selecting the scale, model and data of a results/{scale}/{model}/{data} setting."""
    return f"scale={SCALE} model={wildcards.model} data={wildcards.data}"


def run_override_string(run):
    return " ".join(run_overrides(run))


def eval_policy(wildcards):
    """The checkpoint an evaluation reads: the SFT policy, or an RL run (through its done.json)."""
    setting = f"{R}/{wildcards.model}/{wildcards.data}"
    if wildcards.run == "sft":
        return f"{setting}/sft/checkpoint"
    return f"{setting}/rl/{wildcards.run}/seed{wildcards.seed}/done.json"
