# Shared helpers: paths of the results tree (docs/pipeline.md) and the overrides rules pass to depgpo.
import os
import re
import shlex
import sys

from depgpo.config import run_overrides

# GPU stages (sft, filter, rl, evaluate) run as submitit jobs with `launcher: submitit` (the slurm profile sets it):
# `depgpo launch` submits the same depgpo command and waits for it. Otherwise they run here, in the rule's process.
LAUNCHER = config["launcher"]  # none or submitit (workflow/schemas/config.schema.yaml)


def gpu_stage(stage):
    """The command prefix of a GPU stage's rule."""
    return DEPGPO if LAUNCHER == "none" else f"{DEPGPO} launch --stage {stage} --"


# Task sets. Generated ones (data=tiny; test sets without a path) come from `generate_tasks` and are read as their
# directory; a user's data set (data.tasks, eval.test_sets.*) is first checked by `data_check`, and stages read the
# list of its runnable tasks. It is not a Snakemake input, so that a dry run works where the data are absent.
DATA = {s["data"]: compose_checked(SCALE, OVERRIDES, [f"data={s['data']}"]).data for s in CFG.settings}
EXTERNAL = {name: data.tasks for name, data in DATA.items() if data.kind != "generated"}
EXTERNAL |= {name: path for name, path in CFG.eval.test_sets.items() if path}


def task_set_file(name, generated_as):
    """The file that stands for task set `name` in the DAG."""
    return f"{R}/data/{name}.txt" if name in EXTERNAL else f"{R}/tasks/{generated_as}/index.json"


def task_set_arg(path):
    """What a stage's --tasks gets for that file: the task list itself, or the generated set's directory."""
    return path if path.endswith(".txt") else os.path.dirname(path)


def pool_file(wildcards):
    return task_set_file(wildcards.data, "pool")


def sft_tasks_file(wildcards):
    """Generated data: the tasks whose oracle runs are the SFT data, the sft split (the pool where tasks.sft is 0)."""
    return f"{R}/tasks/sft/index.json" if CFG.tasks.sft else pool_file(wildcards)


def sft_data_source(wildcards, input):
    """Generated data: the oracle runs of the sft split; a user's data set: its SFT conversations file."""
    if wildcards.data in EXTERNAL:
        return f"--import {DATA[wildcards.data].sft_conversations}"
    return (f"--tasks {task_set_arg(input[0])} --variants {CFG.sft_data.variants}"
            f" --incomplete {CFG.sft_data.incomplete}")


def setting_overrides(wildcards):
    """Hydra overrides selecting the scale, model and data of a results/{scale}/{model}/{data} setting, then the
    user's (--config overrides=...); a rule's run and seed follow them."""
    return " ".join([f"scale={SCALE}", f"model={wildcards.model}", f"data={wildcards.data}",
                     *map(shlex.quote, OVERRIDES)])


def run_override_string(run):
    return " ".join(run_overrides(run))


def eval_policy(wildcards):
    """The checkpoint an evaluation reads: the SFT policy, or an RL run (through its done.json)."""
    setting = f"{R}/{wildcards.model}/{wildcards.data}"
    if wildcards.run == "sft":
        return f"{setting}/sft/checkpoint"
    return f"{setting}/rl/{wildcards.run}/seed{wildcards.seed}/done.json"


# Paths the configs take from DEPGPO_* variables (`${oc.env:DEPGPO_X,DEFAULT}`): each one that is unset and whose
# default this DAG uses is named on stderr, one line each, so that a dry run never plans /data/... without a word.
ENV_DEFAULT = re.compile(r"\$\{oc\.env:(DEPGPO_\w+),([^}]*)\}")


def _leaves(node, key=""):
    """(dotted key, value) of every leaf of a plain config container."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from _leaves(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, list):
        for position, value in enumerate(node):
            yield from _leaves(value, f"{key}[{position}]")
    else:
        yield key, node


def env_fallbacks():
    """(variable, default, config key, config file) of each DEPGPO_* path that is unset and that the DAG uses."""
    from omegaconf import OmegaConf

    from depgpo.config import config_dir

    root = config_dir()
    declared = {}
    for path in sorted(root.rglob("*.yaml")):
        for variable, default in ENV_DEFAULT.findall(path.read_text()):
            declared.setdefault(variable, (default.strip().strip("'\""), path.relative_to(root.parent)))
    unset = {variable: found for variable, found in declared.items() if variable not in os.environ}
    if not unset:
        return []
    # Each setting composed as its stages compose it: its model's path and its data's files are only there.
    configs = [CFG, *(compose_checked(SCALE, OVERRIDES, [f"model={s['model']}", f"data={s['data']}"])
                      for s in CFG.settings)]
    used = {}
    for cfg in configs:
        for key, value in _leaves(OmegaConf.to_container(cfg, resolve=True)):
            used.setdefault(value, key) if isinstance(value, str) else None
    return [(variable, default, used[default], path) for variable, (default, path) in sorted(unset.items())
            if default in used]


for _variable, _default, _key, _file in env_fallbacks():
    print(f"{_variable} is not set: {_key} falls back to {_default} ({_file})", file=sys.stderr)


onstart:
    # Stage jobs write to their own log (the `log:` of each job above); that is where their progress lines go.
    print(f"progress of each stage: tail -f {R}/logs/MODEL/DATA/STAGE.log (named as `log:` of each job)",
          file=sys.stderr)
