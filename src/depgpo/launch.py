"""Run one pipeline stage as a submitit job: a Slurm GPU job where Slurm is present, a local process otherwise.

    depgpo launch --stage rl -- rl --policy P --train T --out O scale=paper model=qwen3.5-9b data=seta method=grpo

Everything after `--` is the `depgpo` command the job runs; its `key=value` arguments are the stage's Hydra
overrides, and the job's resources come from the composed `launcher` config (partition, account, GPUs, CPUs,
memory, hours per stage; config/config.yaml and config/scale/paper.yaml). The launcher

- prints the job id and the path of the job's log, then copies the log to its own stdout while it waits,
- cancels the job when it is interrupted (Ctrl-C reaches Snakemake's whole process group; SIGTERM too),
- lets Slurm requeue the job on preemption or at its time limit (submitit's checkpoint protocol): the stage
  command runs again and resumes from its last checkpoint (`depgpo rl` does; the other stages restart).

The Snakemake rules call this with `launcher: submitit` in the workflow config (the slurm profile sets it).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

STAGES = ("sft", "filter", "rl", "evaluate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", required=True, choices=STAGES, help="whose resources (launcher.stages.*) to use")
    parser.add_argument("--cluster", choices=("slurm", "local", "debug"), default=None,
                        help="force a submitit executor (default: launcher.cluster, else Slurm where sbatch exists)")
    parser.add_argument("--poll-s", type=float, default=2.0, help="seconds between looks at the job")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the depgpo command the job runs")


def stage_overrides(command: list[str]) -> list[str]:
    """The Hydra overrides of a stage command line: its `key=value` words (options start with '-')."""
    return [word for word in command if "=" in word and not word.startswith("-")]


def stage_resources(cfg, stage: str) -> dict:
    """submitit parameters of one stage. `gpus` may be a number or a mapping from "model/data" to a number
    (Table 5's device counts differ per setting)."""
    launcher = cfg.launcher
    res = launcher.stages[stage]
    gpus = res.gpus
    if not isinstance(gpus, int):
        setting = f"{cfg.model.name}/{cfg.data.name}"
        if setting not in gpus:
            raise KeyError(f"config launcher.stages.{stage}.gpus has no entry for {setting!r}: add one "
                           f"(known: {', '.join(gpus)})")
        gpus = gpus[setting]
    params = {"name": f"depgpo-{stage}", "timeout_min": int(res.hours * 60), "gpus_per_node": int(gpus),
              "cpus_per_task": int(res.cpus), "mem_gb": float(res.mem_gb), "tasks_per_node": 1, "nodes": 1,
              "slurm_signal_delay_s": int(launcher.signal_delay_s)}
    for key in ("partition", "account", "qos"):
        if launcher.get(key):
            params[f"slurm_{key}"] = str(launcher[key])
    return params


class StageJob:
    """What the submitit job runs: `python -m depgpo <command>`. submitit calls `checkpoint` when Slurm signals
    preemption or the time limit; returning the same call makes it requeue the job, and the stage resumes."""

    def __init__(self, command: list[str]):
        self.command = command

    def __call__(self) -> int:
        subprocess.run([sys.executable, "-m", "depgpo", *self.command], check=True)
        return 0

    def checkpoint(self):
        import submitit

        return submitit.helpers.DelayedSubmission(self)


def _copy_new_output(path: Path, offset: int) -> int:
    """Write what `path` gained since `offset` to stdout; the new offset."""
    if not path.is_file():
        return offset
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    if data:
        sys.stdout.write(data.decode(errors="replace"))
        sys.stdout.flush()
    return offset + len(data)


def submit_and_wait(command: list[str], stage: str, cfg, cluster: str | None, poll_s: float) -> int:
    import submitit

    folder = Path(cfg.launcher.folder) / stage / "%j"
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster or cfg.launcher.get("cluster"),
                                     slurm_max_num_timeout=int(cfg.launcher.max_requeues))
    executor.update_parameters(**stage_resources(cfg, stage))
    job = executor.submit(StageJob(command))
    print(f"[launch] {stage}: {executor.cluster} job {job.job_id}; log {job.paths.stdout}", flush=True)

    def cancel(signum, _frame):
        print(f"[launch] {signal.Signals(signum).name}: cancelling job {job.job_id}", flush=True)
        job.cancel(check=False)
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, cancel) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        offsets = {"out": 0, "err": 0}
        while not job.done():
            time.sleep(poll_s)
            offsets["out"] = _copy_new_output(job.paths.stdout, offsets["out"])
            offsets["err"] = _copy_new_output(job.paths.stderr, offsets["err"])
        _copy_new_output(job.paths.stdout, offsets["out"])
        _copy_new_output(job.paths.stderr, offsets["err"])
        try:
            job.result()
        except Exception as e:  # submitit's FailedJobError / UncompletedJobError carry the job's traceback
            print(f"[launch] {stage}: job {job.job_id} failed ({job.state}); log {job.paths.stderr}\n{e}",
                  file=sys.stderr, flush=True)
            return 1
        print(f"[launch] {stage}: job {job.job_id} {job.state}", flush=True)
        return 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run(args: argparse.Namespace) -> int:
    from depgpo.config import compose

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("error: depgpo launch: give the stage command after `--`", file=sys.stderr)
        return 2
    try:
        cfg = compose(stage_overrides(command))
    except Exception as e:  # as the stage itself would say it, before a job is submitted
        from depgpo.stages import one_line

        print(f"error: config: {one_line(e)}", file=sys.stderr)
        return 2
    return submit_and_wait(command, args.stage, cfg, args.cluster, args.poll_s)
