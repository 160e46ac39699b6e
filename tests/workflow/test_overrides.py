"""Any Hydra key from the workflow: `snakemake --config overrides="..."` reaches every stage's command, and a bad
key or value stops the workflow before any job, in one line (depgpo.workflow_config)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO


def snakemake(tmp_path, *config: str, dry: bool = True) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "1",
            "-p", *(["-n"] if dry else []), "--config", *config]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def commands(output: str) -> dict[str, list[str]]:
    """The planned `depgpo STAGE ...` command lines, by stage."""
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        if " -m depgpo " in line:
            stage = line.split(" -m depgpo ", 1)[1].split()[0]
            found.setdefault(stage, []).append(line)
    return found


def test_overrides_reach_every_stage_that_composes_the_config(tmp_path):
    run = snakemake(tmp_path, "scale=tiny", "overrides=rl.updates=1 agent.max_turns=5 tasks.test=3")
    assert run.returncode == 0, run.stderr[-3000:]
    planned = commands(run.stdout + run.stderr)
    # Every stage that takes Hydra overrides gets the user's, after its setting's and before its run's own
    for stage in ["sft-data", "sft", "filter", "rl", "evaluate", "counterfactual-sample"]:
        assert planned.get(stage), f"no {stage} job planned"
        for line in planned[stage]:
            assert "data=tiny rl.updates=1 agent.max_turns=5 tasks.test=3" in line, line
    frozen = next(line for line in planned["rl"] if "/rl/frozen/" in line)
    assert frozen.index("rl.updates=1") < frozen.index("rl.lr=0") < frozen.index("seed=")
    # The DAG's own plan follows the composed config too: generate-tasks takes tasks.test from it
    assert all("--test 3" in line for line in planned["generate-tasks"])


def test_overrides_that_change_the_grid_change_the_plan(tmp_path):
    full = commands(snakemake(tmp_path, "scale=ci").stdout)
    small = snakemake(tmp_path, "scale=ci", "overrides=methods=[grpo] betas=[0.5] ablations=[] controls=[]")
    assert small.returncode == 0, small.stderr[-3000:]
    runs = sorted({line.split("/rl/")[1].split("/")[0] for line in commands(small.stdout)["rl"]})
    assert runs == ["grpo"] and len(full["rl"]) > len(commands(small.stdout)["rl"])


@pytest.mark.parametrize("config, message", [
    (["overrides=rl.updatez=2"], "error: --config overrides='rl.updatez=2': Could not override 'rl.updatez'"),
    (["overrides=rl.lr=abc"], "rl.lr='abc' is not a number; set rl.lr=<float>"),
    (["overrides=method=grpo"], "the DAG sets method per job; use overrides='methods=[NAME,...]'"),
    (["overrides=seed=3"], "the DAG sets seed per job"),
    (["overrides=credit.beta=0.3"], "run depgpo would train as depgpo_beta0.3"),
    (["overrides=rl.updates"], "'rl.updates' is not key=value"),
    (["overrides=agent.max_turns='6"], "No closing quotation"),
    (["methods=[grpo]"], "--config methods=[grpo]: not a workflow key (scale, launcher, overrides)"),
    (["scale=huge"], "--config scale: 'huge' is not one of"),
])
def test_a_bad_key_or_value_is_one_line_and_nothing_runs(tmp_path, config, message):
    out = tmp_path / "results"
    run = snakemake(tmp_path, *config, dry=False)
    assert run.returncode != 0
    errors = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "File \"" not in run.stderr
    assert not out.exists()  # no stage ran, no file written
