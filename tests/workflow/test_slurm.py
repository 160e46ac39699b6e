"""GPU stages as Slurm jobs through submitit, on a real single-node Slurm (tests/helpers/slurm_cluster.py): `depgpo launch`
alone (job, resources, streamed log, cancel on interrupt) and the CI-scale DAG under `snakemake --profile slurm`.

Skipped where Debian's Slurm packages are missing (`bash envs/setup.sh test` installs them); they need root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.slurm_cluster import SlurmCluster, missing_programs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing_programs()), reason=f"Slurm is not installed here (missing: "
                       f"{', '.join(missing_programs())}); `bash envs/setup.sh test` installs it"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster's daemons run as root"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


def launch(cluster, workdir: Path, stage: str, *command: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "depgpo", "launch", "--stage", stage, "--poll-s", "1", "--",
                             *command], cwd=workdir, env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


def jobs_named(cluster, name: str) -> list[dict]:
    return [job for job in cluster.sacct() if job["name"] == name]


def test_launch_runs_a_stage_as_a_slurm_gpu_job_and_streams_its_log(cluster, tmp_path):
    proc = launch(cluster, tmp_path, "sft", "generate-tasks", "--out", str(tmp_path / "tasks"), "--pool", "1",
                  "--test", "1", "--seed", "0")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "slurm job" in out and "log " in out            # the job id and the log path, then the job's output
    assert (tmp_path / "tasks/pool/index.json").is_file()  # the stage ran (on the cluster's node: same filesystem)
    job_id = out.split("slurm job ")[1].split(";")[0]
    job = cluster.job(job_id)
    assert job["name"] == "depgpo-sft" and job["state"] == "COMPLETED" and "gres/gpu=1" in job["tres"], job


def test_interrupting_the_launcher_cancels_its_job(cluster, tmp_path):
    """Ctrl-C (SIGINT) reaches the launcher in Snakemake's process group: the Slurm job must not outlive it."""
    commands = tmp_path / "commands.json"
    commands.write_text(json.dumps(["sleep 120"]))
    task = tmp_path / "tasks/pool"
    subprocess.run([sys.executable, "-m", "depgpo", "generate-tasks", "--out", str(tmp_path / "tasks"), "--pool",
                    "1", "--test", "0", "--seed", "0"], check=True, capture_output=True)
    task_dir = next(d for d in task.iterdir() if d.is_dir())
    proc = launch(cluster, tmp_path, "rl", "run-episode", str(task_dir), "--commands", str(commands), "--out",
                  str(tmp_path / "episode"), "--timeout", "200")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(j["state"] == "RUNNING" for j in jobs_named(cluster, "depgpo-rl")):
        time.sleep(1)
    assert any(j["state"] == "RUNNING" for j in jobs_named(cluster, "depgpo-rl")), cluster.sacct()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, out
    job_id = out.split("slurm job ")[1].split(";")[0]
    assert cluster.job(job_id)["state"].startswith("CANCELLED"), cluster.sacct()


def test_snakemake_profile_slurm_runs_the_gpu_stages_as_slurm_jobs(cluster, tmp_path):
    """The literal `snakemake --profile slurm`, on the CI scale: GPU stages are Slurm jobs, the report is made.

    The profile builds envs/*.yaml with conda; this machine has no conda (and the GPU env needs CUDA), so the test
    swaps the deployment method for env-modules, which no rule uses: jobs run in this test's own environment."""
    run = subprocess.run(["snakemake", "--profile", "slurm", "-d", str(tmp_path), "--config", "scale=ci",
                          "--sdm", "env-modules"], cwd=REPO, env=cluster.env | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    assert (tmp_path / "results/ci/report/table1.md").stat().st_size > 0
    jobs = {stage.name: sorted(d.name for d in stage.iterdir() if d.is_dir())
            for stage in (tmp_path / "results/ci/submitit").iterdir()}
    # CI scale: one SFT, one filter, two RL runs, three evaluations (the SFT policy and both runs)
    assert {stage: len(ids) for stage, ids in jobs.items()} == {"sft": 1, "filter": 1, "rl": 2, "evaluate": 3}
    for ids in jobs.values():
        for job_id in ids:
            job = cluster.job(job_id)
            assert job["state"] == "COMPLETED" and "gres/gpu=1" in job["tres"], job
