"""The paper-scale side of the pipeline that runs without GPUs or data: the job grid of `snakemake --profile slurm`,
per-stage job resources, the local submitit launcher, user-given SFT conversations and task-set checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from depgpo.config import compose
from depgpo.launch import stage_overrides, stage_resources
from tests.helpers import REPO
from tests.helpers.cli import depgpo


def dry_run_jobs(*args: str) -> tuple[dict[str, int], str]:
    """Job counts per rule of a Snakemake dry run from the repository root, and its output."""
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", *args], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    table = run.stdout.split("Job stats:")[1].split("Reasons:")[0]
    rows = [line.split() for line in table.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit()]
    return {rule: int(count) for rule, count in rows}, run.stdout


@pytest.mark.slow
def test_profile_slurm_dry_run_lists_the_papers_grid():
    # The profile deploys envs/*.yaml with conda, which a dry run must find; this machine has none, and no rule uses
    # env modules, so swapping the method changes nothing else.
    jobs, out = dry_run_jobs("--profile", "slurm", "--sdm", "env-modules")
    settings, methods, sweep = 4, 5, 3 + 4  # Table 1's settings; beta in {0.25, 0.75, 1.0} besides 0.5; 4 ablations
    assert jobs["sft"] == jobs["filter"] == jobs["sft_data"] == settings
    assert jobs["data_check"] == 2 + 2  # SETA and TMAX, Terminal-Bench 2.0 and 2.1
    assert jobs["rl_job"] == settings * methods + sweep  # one rule, its {run} wildcard
    assert out.count("output: results/paper/qwen3.5-9b/seta/rl/depgpo_beta0.25/seed0/done.json") == 1
    assert jobs["evaluate"] == settings * (1 + methods) + sweep
    assert jobs["total"] == 77 and jobs["report"] == jobs["counterfactual"] == 1


def test_stage_resources_follow_table_5_per_setting():
    cfg = compose(["scale=paper", "model=qwen3.5-9b", "data=seta"])
    assert stage_resources(cfg, "sft")["gpus_per_node"] == 6
    assert stage_resources(compose(["scale=paper", "model=qwen3.6-27b", "data=tmax"]), "sft")["gpus_per_node"] == 4
    with pytest.raises(KeyError, match="launcher.stages.sft.gpus has no entry for 'tiny/tiny'"):
        stage_resources(compose(["scale=paper"]), "sft")
    assert stage_overrides(["rl", "--out", "x=y/z", "--policy", "p", "scale=ci", "seed=1"]) == \
        ["x=y/z", "scale=ci", "seed=1"]


@pytest.mark.slow
def test_launch_runs_a_stage_as_a_local_submitit_job(tmp_path):
    """Without Slurm, the launcher's job is a local process (submitit's LocalExecutor) with the same protocol."""
    run = subprocess.run([sys.executable, "-m", "depgpo", "launch", "--stage", "sft", "--cluster", "local",
                          "--poll-s", "0.5", "--", "generate-tasks", "--out", "tasks", "--pool", "1", "--test", "0",
                          "--seed", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "local job" in run.stdout and "FINISHED" in run.stdout
    log = Path(run.stdout.split("log ")[1].split()[0])
    assert log.is_relative_to(tmp_path / "results/tiny/submitit/sft")
    assert "Job completed successfully" in log.read_text() and "Job completed successfully" in run.stdout  # streamed
    assert (tmp_path / "tasks/pool/index.json").is_file()


def test_sft_conversations_are_imported_from_jsonl_and_parquet(tmp_path):
    conversation = {"task_id": "t1", "messages": [
        {"role": "user", "content": "Write hello to /app/a.txt"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"command": "echo hello > /app/a.txt"})}}]},
        {"role": "tool", "tool_call_id": "c0", "content": ""},
        {"role": "assistant", "content": "done"}]}
    jsonl = tmp_path / "sft.jsonl"
    jsonl.write_text(json.dumps(conversation) + "\n")
    parquet = tmp_path / "sft.parquet"
    pd.DataFrame([{"task_id": "t1", "messages": json.loads(json.dumps(conversation["messages"]))}]).to_parquet(parquet)
    for source in (jsonl, parquet):
        out = tmp_path / source.suffix[1:]
        depgpo("sft-data", "--import", str(source), "--out", str(out / "c.jsonl"), "--reference", str(out / "r.json"))
        rows = [json.loads(line) for line in (out / "c.jsonl").read_text().splitlines()]
        assert len(rows) == 1 and rows[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "bash"
        reference = json.loads((out / "r.json").read_text())
        assert reference["static"] and len(reference["trajectories"]) == 1


def test_a_malformed_conversation_is_named_with_its_row_and_field(tmp_path):
    bad = tmp_path / "sft.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"
                   + json.dumps({"messages": [{"role": "robot", "content": "x"}]}) + "\n")
    run = subprocess.run([sys.executable, "-m", "depgpo", "sft-data", "--import", str(bad), "--out",
                          str(tmp_path / "c.jsonl"), "--reference", str(tmp_path / "r.json")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and f"{bad} row 1: no assistant message" in run.stderr
    assert not (tmp_path / "c.jsonl").exists()


def test_data_check_writes_the_runnable_task_list(tmp_path):
    depgpo("generate-tasks", "--out", str(tmp_path / "tasks"), "--pool", "2", "--test", "0", "--seed", "1")
    broken = tmp_path / "tasks/pool/broken-task"
    broken.mkdir()
    (broken / "task.toml").write_text("not toml [")
    runnable = tmp_path / "runnable.txt"
    out = depgpo("data", "check", str(tmp_path / "tasks/pool"), "--runnable", str(runnable)).stdout
    assert "FAIL broken-task" in out and "2 of 3 tasks ok" in out
    listed = runnable.read_text().split()
    assert len(listed) == 2 and all(Path(p).is_dir() and "broken" not in p for p in listed)


@pytest.mark.slow
def test_the_docs_give_the_job_counts_the_dry_runs_list():
    """The README's and docs/cluster.md's job counts are the dry runs' own (they drifted once: 44 and 76 for 45, 77)."""
    import re

    readme, cluster = (REPO / "README.md").read_text(), (REPO / "docs" / "cluster.md").read_text()
    tiny = dry_run_jobs()[0]["total"]
    grid = dry_run_jobs("--profile", "slurm", "--sdm", "env-modules")[0]["total"]
    assert [int(n) for n in re.findall(r"\((\d+) jobs at tiny scale\)", readme)] == [tiny]
    assert [int(n) for n in re.findall(r"the grid: (\d+) jobs", readme)] == [grid]
    in_cluster = re.findall(r"grid: (\d+) jobs\]", cluster) + re.findall(r"lists \*\*(\d+) jobs\*\*", cluster)
    assert in_cluster and {int(n) for n in in_cluster} == {grid}
