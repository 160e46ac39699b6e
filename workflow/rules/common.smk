# Shared helpers: paths of the results tree (docs/pipeline.md) and the override strings rules pass to depgpo.
from depgpo.config import run_overrides


def setting_overrides(wildcards):
    """Hydra overrides selecting the scale, model and data of a results/{scale}/{model}/{data} setting."""
    return f"scale={SCALE} model={wildcards.model} data={wildcards.data}"


def run_override_string(run):
    return " ".join(run_overrides(run))
