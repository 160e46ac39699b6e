"""Bad configuration and input fail fast and clearly: through the real `depgpo` command, one stderr line naming the
key or file and the fix, exit code 2, and nothing written. And a kill in the middle of a checkpoint save leaves a
run that resumes, never one that the next start deletes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import TESTS
from tests.helpers.cli import depgpo

NATIVE = TESTS / "data" / "offline" / "native_traced.json"


def run_depgpo(*args: object, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "depgpo", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def refused(proc: subprocess.CompletedProcess, *expected: str) -> str:
    """Assert exit code 2 and a single stderr line (no traceback) holding every `expected` string; return it."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def snapshot(directory: Path) -> dict[str, bytes] | None:
    """Every file under `directory` with its content; None when it does not exist."""
    if not directory.exists():
        return None
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file()}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A generated task set, a task list, a conversations file, and a tiny (untrained) policy checkpoint."""
    from depgpo.policy.model import build_tiny_qwen3, save_policy, train_tokenizer

    root = tmp_path_factory.mktemp("inputs")
    depgpo("generate-tasks", "--out", str(root / "tasks"), "--pool", "1", "--test", "1", "--seed", "3",
           "--families", "supporting_read")
    pool = root / "tasks" / "pool"
    train = root / "rl_train.txt"
    train.write_text("".join(f"{d}\n" for d in sorted(pool.iterdir()) if d.is_dir()))
    conversations = root / "conversations.jsonl"
    conversations.write_text(json.dumps({"messages": [{"role": "user", "content": "say hi"},
                                                      {"role": "assistant", "content": "hi"}]}) + "\n")
    tokenizer = train_tokenizer(["echo hello > /app/greeting.txt", "cat /app/data.txt", "done"] * 10, 300)
    policy = root / "policy"
    save_policy(build_tiny_qwen3(tokenizer), tokenizer, policy)
    return {"pool": pool, "test": root / "tasks" / "test_tb20", "train": train, "data": conversations,
            "policy": policy}


def stage_args(stage: str, inputs: dict[str, Path], out: Path, policy: Path | None = None) -> list[object]:
    policy = policy or inputs["policy"]
    return {"sft": ["sft", "--data", inputs["data"], "--out", out],
            "rl": ["rl", "--policy", policy, "--train", inputs["train"], "--out", out],
            "filter": ["filter", "--policy", policy, "--tasks", inputs["pool"], "--out", out],
            "evaluate": ["evaluate", "--policy", policy, "--tasks", inputs["test"], "--run", "sft", "--out", out],
            }[stage]


# ---------------------------------------------------------------------- configuration

@pytest.mark.parametrize("stage, override, expected", [
    ("rl", "rl.lr=abc", ["rl.lr='abc' is not a number", "set rl.lr=<float>", "e.g. rl.lr="]),
    ("rl", "rl.k=0", ["rl.k=0 must be >= 1", "e.g. rl.k="]),
    ("rl", "rl.k=2.5", ["rl.k=2.5 is not an integer", "set rl.k=<int>"]),
    ("sft", "sft.epochs=-1", ["sft.epochs=-1 must be >= 0", "e.g. sft.epochs="]),
    ("sft", "sft.lr=fast", ["sft.lr='fast' is not a number"]),
    ("filter", "filter.val_fraction=1.5", ["filter.val_fraction=1.5 must lie in [0, 1)"]),
    ("evaluate", "eval.rounds=0", ["eval.rounds=0 must be >= 1"]),
    ("evaluate", "agent.top_p=0", ["agent.top_p=0 must lie in (0, 1]"]),
    ("rl", "rl.backend=gpu", ["rl.backend='gpu'", "local", "verl"]),
    ("sft", "method=dpgpo", ["Could not find 'method/dpgpo'", "depgpo, dppo"]),
])
def test_a_bad_config_value_is_one_line_exit_2_and_writes_nothing(inputs, tmp_path, stage, override, expected):
    out = tmp_path / "out"
    line = refused(run_depgpo(*stage_args(stage, inputs, out), "scale=ci", override), *expected)
    assert line.startswith("error: config: ")
    assert not out.exists()


def test_launch_refuses_a_bad_config_value_before_submitting(inputs, tmp_path):
    out = tmp_path / "out"
    refused(run_depgpo("launch", "--stage", "rl", "--cluster", "local", "--", *stage_args("rl", inputs, out),
                       "scale=ci", f"launcher.folder={tmp_path / 'submitit'}", "rl.lr=abc"),
            "error: config: rl.lr='abc' is not a number")
    assert not out.exists() and not (tmp_path / "submitit").exists()


def test_a_bad_config_value_leaves_an_existing_run_directory_as_it_was(inputs, tmp_path):
    out = tmp_path / "rl"
    (out / "checkpoint").mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"update": 0}\n')
    (out / "checkpoint" / "trainer_state.pt").write_bytes(b"state")
    before = snapshot(out)
    refused(run_depgpo(*stage_args("rl", inputs, out), "scale=ci", "rl.k=0"), "rl.k=0")
    assert snapshot(out) == before


def test_every_scale_and_method_passes_the_checks():
    from depgpo.config import compose

    for scale in ("tiny", "ci", "paper"):
        for method in ("grpo", "dapo", "dppo", "gigpo", "depgpo"):
            compose([f"scale={scale}", f"method={method}"])


# ---------------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("stage, kind, expected", [
    ("rl", "missing", "no such directory"),
    ("rl", "empty", "the directory is empty"),
    ("evaluate", "empty", "the directory is empty"),
    ("filter", "config only", "no model weights and no tokenizer"),
    ("evaluate", "empty weights", "no model weights"),
])
def test_a_missing_or_empty_checkpoint_is_named_with_what_is_expected(inputs, tmp_path, stage, kind, expected):
    checkpoint = tmp_path / "checkpoint"
    if kind != "missing":
        checkpoint.mkdir()
    if kind == "config only":
        (checkpoint / "config.json").write_text("{}")
    if kind == "empty weights":  # a save killed after creating the weights file
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            (checkpoint / name).write_bytes((inputs["policy"] / name).read_bytes())
        (checkpoint / "model.safetensors").write_bytes(b"")
    out = tmp_path / "out"
    refused(run_depgpo(*stage_args(stage, inputs, out, policy=checkpoint), "scale=ci"),
            f"--policy {checkpoint}: {expected}", "expected a policy checkpoint directory")
    assert not out.exists()


# ---------------------------------------------------------------------- input files

def test_a_conversations_file_in_invalid_utf8_is_named(inputs, tmp_path):
    data = tmp_path / "conversations.jsonl"
    data.write_bytes(b'{"messages": [{"role": "user", "content": "caf\xe9"}]}\n')
    out = tmp_path / "sft"
    refused(run_depgpo("sft", "--data", data, "--out", out, "scale=ci"), f"{data}: not UTF-8 text")
    assert not out.exists()


def test_a_commands_file_in_invalid_utf8_is_named(inputs, tmp_path):
    # env/cli.py's load_commands says it (SystemExit with the message); depgpo.cli makes that exit code 2
    commands = tmp_path / "commands.json"
    commands.write_bytes(b'["echo caf\xe9 > /app/out.txt"]')
    task = next(d for d in sorted(inputs["pool"].iterdir()) if d.is_dir())
    out = tmp_path / "episode"
    refused(run_depgpo("run-episode", task, "--commands", commands, "--out", out), str(commands), "UTF-8")
    assert not out.exists()


def bad_trajectory(tmp_path: Path, name: str, **changes) -> Path:
    trajectory = json.loads(NATIVE.read_text())
    if "reward" in changes:
        trajectory["verifier"]["reward"] = changes.pop("reward")
    trajectory.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(trajectory))
    return path


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("changes, expected", [
    ({"reward": "high"}, ["verifier.reward: expected a number or null, got 'high'", '"reward": 1.0']),
    ({"schema_version": 2}, ["schema_version: unknown version 2", "reads version 1"]),
    ({"schema_version": "1"}, ["schema_version: unknown version '1'"]),
])
def test_credit_names_the_file_and_field_of_a_bad_trajectory(tmp_path, changes, expected, static):
    path = bad_trajectory(tmp_path, "trajectory.json", **changes)
    graph = tmp_path / "graph.png"
    proc = run_depgpo("credit", path, "--graph", graph, *(["--static"] if static else []))
    refused(proc, f"depgpo credit: error: {path}: ", *expected)
    assert proc.stdout == "" and not graph.exists()


@pytest.fixture
def results(tmp_path) -> Path:
    from tests.report.test_report import build_results

    return build_results(tmp_path / "results")


def rewrite_first(path: Path, change) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    change(rows[0])
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.parametrize("what, expected", [
    ("reward", "line 1: verifier.reward: expected a number or null, got 'high'"),
    ("schema_version", "line 1: schema_version: unknown version 7"),
    ("reference reward", "trajectories[0].reward: expected a number, got 'high'"),
])
def test_report_names_the_file_of_a_bad_trajectory_and_writes_nothing(results, what, expected):
    rollouts = results / "qwen3.5-9b/seta/rl/gigpo/seed0/trajectories/update0003.jsonl"
    reference = results / "qwen3.5-9b/seta/sft/reference_credit.json"
    if what == "reward":
        rewrite_first(rollouts, lambda row: row["verifier"].update(reward="high"))
    elif what == "schema_version":
        rewrite_first(rollouts, lambda row: row.update(schema_version=7))
    else:
        content = json.loads(reference.read_text())
        content["trajectories"][0]["reward"] = "high"
        reference.write_text(json.dumps(content))
    bad = reference if what == "reference reward" else rollouts
    refused(run_depgpo("report", "--results", results), f"error: {bad}", expected)
    assert not (results / "report").exists()


# ---------------------------------------------------------------------- a kill during a checkpoint save

class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler catches it."""


@pytest.fixture(scope="module")
def trainer_factory(inputs):
    from depgpo.config import compose
    from depgpo.train.rl import RLTrainer

    cfg = compose(["scale=ci", "device=cpu"])
    return lambda out: RLTrainer(cfg, inputs["policy"], [], out)


def kill_during_save(monkeypatch, trainer, next_update: int, point: str) -> None:
    """Run save_checkpoint and kill it at `point`: "writing" (trainer_state.pt not yet in place), "first rename"
    (checkpoint -> checkpoint.old done, checkpoint.tmp not yet moved), "second rename" (before checkpoint.old is
    deleted)."""
    import depgpo.train.checkpoint as checkpoint_module

    if point == "writing":
        def replace(*_):
            raise Killed
        monkeypatch.setattr(checkpoint_module.os, "replace", replace)
    else:
        renames = []
        rename = Path.rename

        def counted(self, target):
            result = rename(self, target)
            if self.name.startswith("checkpoint"):
                renames.append(target)
                if len(renames) == {"first rename": 1, "second rename": 2}[point]:
                    raise Killed
            return result
        monkeypatch.setattr(Path, "rename", counted)
    with pytest.raises(Killed):
        trainer.save_checkpoint(next_update)
    monkeypatch.undo()


@pytest.mark.parametrize("point, resumes_at", [("writing", 1), ("first rename", 2), ("second rename", 2)])
def test_a_kill_during_a_checkpoint_save_resumes_instead_of_deleting_the_run(monkeypatch, trainer_factory, tmp_path,
                                                                              point, resumes_at):
    out = tmp_path / "rl"
    trainer = trainer_factory(out)
    trainer.save_checkpoint(1)
    metrics = '{"update": 0}\n{"update": 1}\n'
    (out / "metrics.jsonl").write_text(metrics)
    (out / "notes.txt").write_text("not the trainer's")
    kill_during_save(monkeypatch, trainer, 2, point)
    if point == "first rename":  # the state the old code answered by deleting the whole run directory
        assert not (out / "checkpoint").exists() and (out / "checkpoint.old").is_dir()

    resumed = trainer_factory(out)
    assert resumed.start_update == resumes_at
    assert (out / "notes.txt").read_text() == "not the trainer's"
    assert (out / "metrics.jsonl").read_text() == metrics[:len('{"update": 0}\n') * resumes_at]
    assert sorted(path.name for path in out.iterdir() if path.name.startswith("checkpoint")) == ["checkpoint"]


def test_a_kill_during_the_first_save_starts_over_but_keeps_other_files(monkeypatch, trainer_factory, tmp_path):
    out = tmp_path / "rl"
    trainer = trainer_factory(out)
    (out / "metrics.jsonl").write_text('{"update": 0}\n{"upd')  # the last line cut short by the kill
    (out / "notes.txt").write_text("not the trainer's")
    kill_during_save(monkeypatch, trainer, 1, "first rename")  # the first save has only the one rename
    assert (out / "checkpoint").is_dir()
    assert trainer_factory(out).start_update == 1  # the save was complete once renamed

    (out / "metrics.jsonl").write_text('{"update": 0}\n{"upd')
    import shutil
    shutil.rmtree(out / "checkpoint")
    kill_during_save(monkeypatch, trainer, 1, "writing")
    fresh = trainer_factory(out)
    assert fresh.start_update == 0
    assert not (out / "metrics.jsonl").exists() and (out / "notes.txt").is_file()
    assert not any(path.name.startswith("checkpoint") for path in out.iterdir())
