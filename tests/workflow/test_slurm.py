"""GPU stages as Slurm jobs through submitit, on a real single-node Slurm (tests/helpers/slurm_cluster.py): `depgpo launch`
alone (job, resources, streamed log, cancel on interrupt) and the CI-scale DAG under `snakemake --profile slurm`.

The daemons run as root, as a site runs them; every job is submitted by an ordinary user (tests/helpers/
ordinary_user.py), as on the clusters this project's users have, so the episodes inside the jobs run rootless.
Skipped where Debian's Slurm packages are missing (`bash envs/setup.sh test` installs them) or not run as root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, ordinary_user
from tests.helpers.slurm_cluster import SlurmCluster, missing_programs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing_programs()), reason=f"Slurm is not installed here (missing: "
                       f"{', '.join(missing_programs())}); `bash envs/setup.sh test` installs it"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster's daemons run as root"),
    pytest.mark.skipif(bool(ordinary_user.unavailable()), reason=f"jobs are submitted by an ordinary user: "
                       f"{ordinary_user.unavailable()}"),
]


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="depgpo-slurm-"))  # the users' sbatch reads its slurm.conf
    root.chmod(0o755)
    with SlurmCluster(root) as running:
        yield running
    subprocess.run(["rm", "-rf", str(root)], capture_output=True)


@pytest.fixture
def user_dir(ordinary_user_ready):
    """The job's working directory, the submitting user's own."""
    path = ordinary_user.own_dir("slurm-job")
    yield path
    subprocess.run(["rm", "-rf", str(path)], capture_output=True)


def as_user(cluster) -> dict:
    """Popen arguments for the ordinary user, with the test cluster's configuration."""
    kwargs = ordinary_user.popen_kwargs()
    kwargs["env"] = {**kwargs["env"], "SLURM_CONF": cluster.env["SLURM_CONF"]}
    return kwargs


def launch(cluster, workdir: Path, stage: str, *command: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "depgpo", "launch", "--stage", stage, "--poll-s", "1", "--",
                             *command], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **as_user(cluster), **kwargs)


def jobs_named(cluster, name: str) -> list[dict]:
    return [job for job in cluster.sacct() if job["name"] == name]


def test_launch_runs_a_stage_as_a_slurm_gpu_job_and_streams_its_log(cluster, user_dir):
    proc = launch(cluster, user_dir, "sft", "generate-tasks", "--out", str(user_dir / "tasks"), "--pool", "1",
                  "--test", "1", "--seed", "0")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "slurm job" in out and "log " in out            # the job id and the log path, then the job's output
    assert (user_dir / "tasks/pool/index.json").is_file()  # the stage ran (on the cluster's node: same filesystem)
    job_id = out.split("slurm job ")[1].split(";")[0]
    job = cluster.job(job_id)
    assert job["name"] == "depgpo-sft" and job["state"] == "COMPLETED" and "gres/gpu=1" in job["tres"], job


def test_an_episode_inside_a_job_runs_rootless(cluster, user_dir):
    """The job runs as the user who submitted it: its episode's sandbox is the rootless one, and the oracle scores."""
    subprocess.run([sys.executable, "-m", "depgpo", "generate-tasks", "--out", str(user_dir / "tasks"), "--pool",
                    "1", "--test", "0", "--seed", "0"], check=True, capture_output=True, cwd=user_dir,
                   **ordinary_user.popen_kwargs())
    task_dir = next(d for d in (user_dir / "tasks/pool").iterdir() if d.is_dir())
    proc = launch(cluster, user_dir, "rl", "run-episode", str(task_dir), "--oracle", "--out", str(user_dir / "ep"))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "environment: sandbox rootless" in out, out
    trajectory = json.loads((user_dir / "ep/trajectory.json").read_text())
    assert trajectory["environment"]["privilege"] == "rootless" and trajectory["verifier"]["reward"] == 1.0
    assert (user_dir / "ep/trajectory.json").stat().st_uid == ordinary_user.ensure().pw_uid


def test_interrupting_the_launcher_cancels_its_job(cluster, user_dir):
    """Ctrl-C (SIGINT) reaches the launcher in Snakemake's process group: the Slurm job must not outlive it."""
    commands = user_dir / "commands.json"
    commands.write_text(json.dumps(["sleep 120"]))
    ordinary_user.give(commands)
    task = user_dir / "tasks/pool"
    subprocess.run([sys.executable, "-m", "depgpo", "generate-tasks", "--out", str(user_dir / "tasks"), "--pool",
                    "1", "--test", "0", "--seed", "0"], check=True, capture_output=True, cwd=user_dir,
                   **ordinary_user.popen_kwargs())
    task_dir = next(d for d in task.iterdir() if d.is_dir())
    proc = launch(cluster, user_dir, "rl", "run-episode", str(task_dir), "--commands", str(commands), "--out",
                  str(user_dir / "episode"), "--timeout", "200")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(j["state"] == "RUNNING" for j in jobs_named(cluster, "depgpo-rl")):
        time.sleep(1)
    assert any(j["state"] == "RUNNING" for j in jobs_named(cluster, "depgpo-rl")), cluster.sacct()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, out
    job_id = out.split("slurm job ")[1].split(";")[0]
    assert cluster.job(job_id)["state"].startswith("CANCELLED"), cluster.sacct()


def test_snakemake_profile_slurm_runs_the_gpu_stages_as_slurm_jobs(cluster, user_dir):
    """The literal `snakemake --profile slurm`, on the CI scale: GPU stages are Slurm jobs, the report is made.

    The profile builds envs/*.yaml with conda; this machine has no conda (and the GPU env needs CUDA), so the test
    swaps the deployment method for env-modules, which no rule uses: jobs run in this test's own environment."""
    run = subprocess.run(["snakemake", "--profile", "slurm", "-d", str(user_dir), "--config", "scale=ci",
                          "--sdm", "env-modules"], cwd=REPO, capture_output=True, text=True, timeout=1200,
                         **as_user(cluster))
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    assert (user_dir / "results/ci/report/table1.md").stat().st_size > 0
    jobs = {stage.name: sorted(d.name for d in stage.iterdir() if d.is_dir())
            for stage in (user_dir / "results/ci/submitit").iterdir()}
    # CI scale: one SFT, one filter, two RL runs, three evaluations (the SFT policy and both runs)
    assert {stage: len(ids) for stage, ids in jobs.items()} == {"sft": 1, "filter": 1, "rl": 2, "evaluate": 3}
    for ids in jobs.values():
        for job_id in ids:
            job = cluster.job(job_id)
            assert job["state"] == "COMPLETED" and "gres/gpu=1" in job["tres"], job
    # The jobs ran as the user who submitted them, so every RL rollout's episode ran rootless.
    levels = {json.loads(line)["environment"]["privilege"]
              for path in (user_dir / "results/ci").glob("*/*/rl/*/seed*/trajectories/update*.jsonl")
              for line in path.read_text().splitlines()}
    assert levels == {"rootless"}, levels
