"""The workflow's own config (`snakemake --config KEY=VALUE`): `scale`, `launcher` and `overrides`, checked before
any job is planned. Each problem is one line that names the key, the value and the fix, and nothing runs
(docs/pipeline.md#any-knob-from-the-workflow).

`overrides` carries any key of the Hydra config to every stage, in the stages' own grammar
(`--config overrides="rl.updates=2 agent.max_turns=6"`). It may not set what the DAG sets per job, its wildcards:
the scale, a setting's model and data, a run's method, β or ablation, a seed.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

# The DAG's own dimensions, each set per job from the grid: an override of one would contradict the job's path.
DAG_DIMENSIONS = {
    "scale": "--config scale=NAME",
    "model": "overrides='settings=[{model: M, data: D}]'",
    "data": "overrides='settings=[{model: M, data: D}]'",
    "method": "overrides='methods=[NAME,...]'",
    "ablation": "overrides='ablations=[NAME,...]'",
    "seed": "overrides='seeds=[0,1]'",
}


def _bad(message: str) -> SystemExit:
    return SystemExit(f"error: --config {message}")


def _shown(value) -> str:
    """A --config value as the user wrote it (Snakemake parses `[a, b]` to a list)."""
    if isinstance(value, list):
        return "[" + ",".join(_shown(item) for item in value) + "]"
    return str(value)


def check_workflow_keys(config: dict, schema_file: str | Path) -> None:
    """Raise SystemExit (one line) for a --config key the workflow does not have or a value its schema rejects."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_file).read_text())
    known = list(schema["properties"])
    for key, value in config.items():
        if key not in known:
            raise _bad(f"{key}={_shown(value)}: not a workflow key ({', '.join(known)}); a key of the Hydra config "
                       f"goes into overrides: --config overrides='{key}={_shown(value)}'")
    for error in jsonschema.Draft202012Validator(schema).iter_errors(config):
        key = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        raise _bad(f"{key}: {error.message} ({schema['properties'].get(key, {}).get('description', '')})")


def parse_overrides(text: str) -> list[str]:
    """`overrides` as a list of `key=value` items, split as a shell splits words (quotes keep spaces)."""
    if not isinstance(text, str):
        raise _bad(f"overrides={_shown(text)}: expected one string of key=value items, e.g. "
                   "--config overrides='rl.updates=2 agent.max_turns=6'")
    try:
        items = shlex.split(text)
    except ValueError as error:
        raise _bad(f"overrides={text!r}: {error}; quote values with spaces as a shell would") from None
    for item in items:
        key = item.split("=", 1)[0].lstrip("+~")
        if "=" not in item or not key:
            raise _bad(f"overrides: {item!r} is not key=value, e.g. rl.updates=2")
        if key in DAG_DIMENSIONS:
            raise _bad(f"overrides: {item}: the DAG sets {key} per job; use {DAG_DIMENSIONS[key]}")
    return items


def compose_checked(scale: str, overrides: list[str], more: Iterable[str] = ()):
    """The composed config of `scale` with the user's overrides (and `more`, a job's own); a problem exits in one
    line naming what was composed."""
    from depgpo.config import compose
    from depgpo.stages import one_line

    more = list(more)
    try:
        return compose([f"scale={scale}", *overrides, *more])
    except ModuleNotFoundError:
        raise
    except Exception as error:  # Hydra's and ConfigError's messages name the key and the valid values
        where = f" (with {' '.join(more)})" if more else ""
        raise _bad(f"overrides={' '.join(overrides)!r}{where}: {one_line(error)}") from None


def check_jobs(scale: str, overrides: list[str], jobs: Iterable[tuple[str, str, str]]) -> None:
    """Compose every (model, data, run) job of the grid as its rule will, so that a value that only a job's own
    overrides make wrong fails now, before any job runs; and check that the overrides leave each run the run its
    directory names (`credit.beta=0.3` would make the run `depgpo` train as `depgpo_beta0.3`)."""
    from depgpo.config import CONTROL_RUNS, run_name, run_overrides

    if not overrides:
        return  # the repository's own configs: each stage validates its composition anyway
    for model, data, run in jobs:
        more = [f"model={model}", f"data={data}", *run_overrides(run)]
        cfg = compose_checked(scale, overrides, more)
        if run not in CONTROL_RUNS and run_name(cfg) != run:
            raise _bad(f"overrides={' '.join(overrides)!r}: run {run} would train as {run_name(cfg)}; the grid's "
                       "runs come from methods, betas, ablations and controls")
