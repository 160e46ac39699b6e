"""A Slurm dry run with no DEPGPO_* variable set names every /data/... and /models/... path it falls back to, one line
each on stderr, and says nothing of a variable that is set or a default the DAG does not use (the tiny DAG); a run
says where each stage's progress goes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.helpers import REPO

FALLBACKS = {
    "DEPGPO_MODEL_qwen3_5_9b": "model.path falls back to /models/Qwen3.5-9B (config/model/qwen3.5-9b.yaml)",
    "DEPGPO_MODEL_qwen3_6_27b": "model.path falls back to /models/Qwen3.6-27B (config/model/qwen3.6-27b.yaml)",
    "DEPGPO_SETA_SFT": "data.sft_conversations falls back to /data/seta-sft.jsonl (config/data/seta.yaml)",
    "DEPGPO_SETA_TASKS": "data.tasks falls back to /data/seta-env/Dataset (config/data/seta.yaml)",
    "DEPGPO_TB20_TASKS": "eval.test_sets.test_tb20 falls back to /data/terminal-bench-2.0 (config/scale/paper.yaml)",
    "DEPGPO_TB21_TASKS": "eval.test_sets.test_tb21 falls back to /data/terminal-bench-2.1 (config/scale/paper.yaml)",
    "DEPGPO_TMAX_SFT": "data.sft_conversations falls back to /data/tmax-sft.jsonl (config/data/tmax.yaml)",
    "DEPGPO_TMAX_TASKS": "data.tasks falls back to /data/TMax-15K-Harbor (config/data/tmax.yaml)",
}


def snakemake(tmp_path, *args: str, **variables: str) -> subprocess.CompletedProcess:
    """Snakemake from the repository root (where `--profile slurm` is found), working in tmp_path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DEPGPO_")} | variables
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                           *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def fallback_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.match(r"DEPGPO_\w+ is not set: ", line)]


def test_a_slurm_dry_run_names_every_path_it_falls_back_to(tmp_path):
    # --sdm env-modules: the profile's conda is not installed here, and no rule uses env modules
    run = snakemake(tmp_path, "-n", "--profile", "slurm", "--sdm", "env-modules")
    assert run.returncode == 0, run.stderr[-3000:]
    assert fallback_lines(run.stderr) == [f"{name} is not set: {words}" for name, words in FALLBACKS.items()]
    assert "/data/seta-env/Dataset" in run.stdout  # what it planned with


def test_a_variable_that_is_set_is_not_named_and_is_used(tmp_path):
    run = snakemake(tmp_path, "-n", "--profile", "slurm", "--sdm", "env-modules",
                    DEPGPO_SETA_TASKS=str(tmp_path / "seta"), DEPGPO_MODEL_qwen3_6_27b=str(tmp_path / "27b"))
    assert run.returncode == 0, run.stderr[-3000:]
    named = [line.split()[0] for line in fallback_lines(run.stderr)]
    assert named == [name for name in FALLBACKS if name not in ("DEPGPO_SETA_TASKS", "DEPGPO_MODEL_qwen3_6_27b")]
    assert f"data check {tmp_path / 'seta'} " in run.stdout


def test_the_tiny_dag_uses_no_fallback_and_a_run_says_where_progress_goes(tmp_path):
    dry = snakemake(tmp_path, "-n", "--cores", "1", "--config", "scale=tiny")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert fallback_lines(dry.stderr) == [] and "progress of each stage" not in dry.stderr
    run = snakemake(tmp_path, "--cores", "1", "--config", "scale=ci", "--", "generate_tasks")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "progress of each stage: tail -f results/ci/logs/MODEL/DATA/STAGE.log" in run.stderr
