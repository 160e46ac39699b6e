"""The pipeline stages for real, at the smallest size: SFT data from oracle episodes, SFT, RL that resumes after a
kill, and the whole CI-scale Snakemake DAG (which also checks that a completed DAG reruns nothing)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO
from tests.helpers.cli import depgpo

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


def test_sft_data_are_passing_oracle_conversations(sft_policy):
    root, _, _ = sft_policy
    conversations = [json.loads(line) for line in (root / "sft" / "conversations.jsonl").read_text().splitlines()]
    assert len(conversations) == 2 and all(c["reward"] == 1.0 for c in conversations)
    tool_calls = [m for c in conversations for m in c["messages"] if m.get("tool_calls")]
    assert tool_calls and all(m["tool_calls"][0]["function"]["name"] == "bash" for m in tool_calls)
    reference = json.loads((root / "sft" / "reference_credit.json").read_text())["trajectories"]
    assert all(0.0 < t["connected_fraction"] <= 1.0 for t in reference)  # every oracle touches what E holds


def test_incomplete_conversations_stop_one_oracle_command_short(sft_policy, tmp_path):
    """--incomplete adds, per task, a conversation that leaves out the oracle's last two commands and ends with "done":
    the verifier fails it, it is kept (an unverified teacher's mistake), and it stays out of Figure 1(d)'s reference."""
    from depgpo.tasks.generate import oracle_commands

    root, _, _ = sft_policy
    out = tmp_path / "sft"
    counts = json.loads(depgpo("sft-data", "--tasks", str(root / "tasks" / "pool"), "--out", str(out / "c.jsonl"),
                               "--reference", str(out / "r.json"), "--variants", "1", "--incomplete", "1",
                               "--max-distractors", "0", "scale=ci").stdout.splitlines()[-1])
    assert counts == {"conversations": 4, "failed_oracle_runs": 0, "incomplete": 2}
    conversations = [json.loads(line) for line in (out / "c.jsonl").read_text().splitlines()]
    for task_dir in sorted(d for d in (root / "tasks" / "pool").iterdir() if d.is_dir()):
        oracle = oracle_commands(task_dir)
        runs = {c["reward"]: c for c in conversations if c["task"] == task_dir.name}
        commands = {r: [json.loads(m["tool_calls"][0]["function"]["arguments"])["command"]
                        for m in c["messages"] if m.get("tool_calls")] for r, c in runs.items()}
        assert commands == {1.0: oracle, 0.0: oracle[:-2]}
        assert runs[0.0]["messages"][-1] == {"role": "assistant", "content": "done"}
    assert len(json.loads((out / "r.json").read_text())["trajectories"]) == 2  # the complete runs only
    # Asking for incomplete runs leaves the complete conversations as they were (they have their own draws).
    plain = tmp_path / "plain"
    depgpo("sft-data", "--tasks", str(root / "tasks" / "pool"), "--out", str(plain / "c.jsonl"), "--reference",
           str(plain / "r.json"), "--variants", "2", "scale=ci")
    again = tmp_path / "again"
    depgpo("sft-data", "--tasks", str(root / "tasks" / "pool"), "--out", str(again / "c.jsonl"), "--reference",
           str(again / "r.json"), "--variants", "2", "--incomplete", "1", "scale=ci")
    complete = [c for c in map(json.loads, (again / "c.jsonl").read_text().splitlines()) if c["reward"] == 1.0]
    assert [c["messages"] for c in complete] == [json.loads(line)["messages"]
                                                 for line in (plain / "c.jsonl").read_text().splitlines()]


def test_rl_resumes_from_its_last_checkpoint_after_a_kill(sft_policy, tmp_path):
    _, checkpoint, train = sft_policy
    out = tmp_path / "rl"
    args = [sys.executable, "-m", "depgpo", "rl", "--policy", str(checkpoint), "--train", str(train), "--out",
            str(out), "scale=ci", "method=depgpo", "rl.updates=3", "rl.checkpoint_every=1", "rl.k=2",
            "rl.tasks_per_update=1"]
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (out / "checkpoint" / "trainer_state.pt").exists():
        assert time.monotonic() < deadline and first.poll() is None, "no checkpoint was written"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not (out / "done.json").exists()
    resumed = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    updates = [json.loads(line)["update"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert updates == [0, 1, 2]  # no update lost, none counted twice
    assert json.loads((out / "done.json").read_text())["updates"] == 3
    again = subprocess.run(args, capture_output=True, text=True, timeout=120)  # a finished run does nothing
    assert again.returncode == 0 and "update" not in again.stdout


def test_ci_dag_end_to_end(tmp_path):
    """The CI variant of the reproduction DAG, then a second invocation that must find nothing to do."""
    base = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "2",
            "--config", "scale=ci"]
    run = subprocess.run(base, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    report = tmp_path / "results" / "ci" / "report"
    for name in ["table1.md", "table1.tex", "table1.csv", "table6.csv", "table11.csv", "fig1a.png", "fig1d.pdf",
                 "fig5.png", "fig6.png"]:
        assert (report / name).stat().st_size > 0, name
    metrics = tmp_path / "results/ci/tiny/tiny/rl/depgpo/seed0/metrics.jsonl"
    assert len(metrics.read_text().splitlines()) == 2
    rerun = subprocess.run(base + ["-n"], capture_output=True, text=True, timeout=120)
    assert "Nothing to be done" in rerun.stdout + rerun.stderr
    # A changed override changes the commands, and Snakemake reruns what they made: results never mix configs
    changed = subprocess.run(base + ["overrides=rl.updates=1", "-n"], capture_output=True, text=True, timeout=120)
    assert "Nothing to be done" not in changed.stdout and "rl_job" in changed.stdout, changed.stdout[-3000:]


@pytest.mark.parametrize("method", ["grpo", "dapo", "dppo", "gigpo", "depgpo"])
def test_every_method_takes_a_real_update(sft_policy, tmp_path, method):
    """One update per method: rollouts in the sandbox, the method's estimator and verl loss, an AdamW step."""
    _, checkpoint, train = sft_policy
    out = tmp_path / method
    depgpo("rl", "--policy", str(checkpoint), "--train", str(train), "--out", str(out), "scale=ci",
           f"method={method}", "rl.updates=1", "rl.k=2", "rl.tasks_per_update=1",
           "algorithm.filter_groups.max_num_gen_batches=1")
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["update"] == 0 and "train/reward_mean" in metrics
    if "actor/grad_norm" in metrics:  # DAPO may drop a group whose rewards are all equal: then no step
        assert metrics["actor/grad_norm"] >= 0.0
    assert (out / "checkpoint" / "trainer_state.pt").is_file()
