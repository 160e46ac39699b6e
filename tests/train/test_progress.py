"""Progress of the long stages (depgpo.train.progress): a tqdm bar on a terminal (a real pseudo-terminal here), a
line every 10% or every minute in a log, nothing under CI; SFT, filtering, RL and evaluation report through it, and
their results are bitwise the same whether it prints or not."""

from __future__ import annotations

import json
import os
import fcntl
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from depgpo.train.progress import Progress
from tests.helpers import DATA
from tests.train.test_sft import hand_made_conversations

QUIET = {"CI", "DEPGPO_PROGRESS"}


@pytest.fixture
def console(monkeypatch):
    """Neither CI nor DEPGPO_PROGRESS set, whatever the machine running the tests sets."""
    for name in QUIET:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_log_gets_a_line_every_10_percent(console, tmp_path):
    log = tmp_path / "stage.log"
    with log.open("w") as stream, Progress(100, "sft", "step", stream=stream) as progress:
        for step in range(100):
            progress.advance(loss=f"{1 / (step + 1):.3f}")
    lines = lines_of(log)
    assert lines[0] == "[sft] 0/100 steps" and len(lines) == 11
    assert lines[1].startswith("[sft] 10/100 steps (10%), ") and "left; loss 0.100" in lines[1]
    assert lines[-1].startswith("[sft] 100/100 steps (100%), ") and lines[-1].endswith("loss 0.010")
    assert "\r" not in log.read_text()  # no bar's carriage returns in a log


def test_a_log_gets_a_line_every_interval_when_the_work_is_slow(console, tmp_path):
    log = tmp_path / "stage.log"
    with log.open("w") as stream, Progress(1000, "filter", "attempt", stream=stream, every_s=0.05) as progress:
        for _ in range(3):
            time.sleep(0.06)
            progress.advance()
    assert [line.split(" (")[0] for line in lines_of(log)] == [
        "[filter] 0/1000 attempts", "[filter] 1/1000 attempts", "[filter] 2/1000 attempts", "[filter] 3/1000 attempts"]


def pty_output(write, columns: int = 120) -> str:
    """What `write(stream)` shows on a real pseudo-terminal `columns` wide."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    with os.fdopen(follower, "w") as stream:
        write(stream)
    chunks = []
    while select.select([leader], [], [], 0.2)[0]:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def count_to_ten(stream) -> None:
    with Progress(10, "eval", "episode", stream=stream) as progress:
        for _ in range(10):
            progress.advance(solved=3)


@pytest.mark.parametrize("columns", [120, 0])  # 0: a terminal that does not say its width
def test_a_terminal_gets_a_tqdm_bar(console, columns):
    shown = pty_output(count_to_ten, columns)
    assert "eval: 100%|" in shown and "10/10" in shown and "solved=3" in shown and "\r" in shown


@pytest.mark.parametrize("on_terminal", [True, False])
def test_ci_gets_nothing(console, tmp_path, on_terminal):
    console.setenv("CI", "true")
    if on_terminal:
        assert pty_output(count_to_ten) == ""
    else:
        with (tmp_path / "ci.log").open("w") as stream:
            count_to_ten(stream)
        assert (tmp_path / "ci.log").read_text() == ""


def test_depgpo_progress_chooses(console, tmp_path):
    console.setenv("DEPGPO_PROGRESS", "lines")
    assert pty_output(count_to_ten).splitlines()[-1].startswith("[eval] 10/10 episodes (100%)")
    console.setenv("DEPGPO_PROGRESS", "off")
    assert pty_output(count_to_ten) == ""


# ---- the stages ---------------------------------------------------------------------------------------------------

def sft(data: Path, out: Path, env: dict) -> subprocess.CompletedProcess:
    overrides = ["scale=tiny", "agent.observation_chars=1000", "model.max_positions=4096", "model.hidden=32",
                 "model.layers=1", "sft.epochs=4", "sft.batch_size=6", "sft.copy.steps=3", "sft.copy.mix=0.5",
                 "torch_threads=1"]
    return subprocess.run([sys.executable, "-m", "depgpo", "sft", "--data", str(data), "--out", str(out),
                           *overrides], env=env, capture_output=True, text=True, timeout=600)


def without_times(path: Path) -> list[dict]:
    """Metrics lines without what the clock and the process measure."""
    return [{key: value for key, value in json.loads(line).items()
             if not key.startswith(("time", "memory")) and not key.endswith(("_ms", "time_s"))}
            for line in path.read_text().splitlines()]


def weights(checkpoint: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(checkpoint.glob("*.safetensors")))


def test_sft_reports_its_steps_in_its_log_and_trains_the_same_under_ci(tmp_path):
    data = tmp_path / "conversations.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in hand_made_conversations()))
    plain = {key: value for key, value in os.environ.items() if key not in QUIET}
    logged, quiet = sft(data, tmp_path / "logged", plain), sft(data, tmp_path / "ci", plain | {"CI": "true"})
    assert logged.returncode == 0 and quiet.returncode == 0, logged.stderr[-2000:] + quiet.stderr[-2000:]
    progress = [line for line in logged.stderr.splitlines() if line.startswith("[sft] ")]
    # 3 copying steps, then 4 epochs of 5 batches
    metrics = tmp_path / "logged" / "metrics.jsonl"
    assert progress[0] == f"[sft] 30 conversations, 23 steps; the loss of each in {metrics}"
    assert progress[-1].startswith("[sft] 23/23 steps (100%), ") and " loss " in progress[-1]
    assert 8 <= len(progress) <= 14
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("[sft] ")]
    # the mixed-in copying steps draw from the same generator either way: the runs are identical
    assert without_times(tmp_path / "logged" / "metrics.jsonl") == without_times(tmp_path / "ci" / "metrics.jsonl")
    assert weights(tmp_path / "logged" / "checkpoint") == weights(tmp_path / "ci" / "checkpoint")


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    from depgpo.policy.model import build_tiny_qwen3, save_policy, train_tokenizer

    tokenizer = train_tokenizer(["<bash>echo 42 > /app/answer.txt</bash>", "<done/>", "cat /app/question.txt"] * 10,
                                300)
    directory = tmp_path_factory.mktemp("policy")
    save_policy(build_tiny_qwen3(tokenizer), tokenizer, directory)
    return directory


def stage_config(*more: str):
    from depgpo.config import compose

    return compose(["scale=ci", "device=cpu", "agent.max_turns=2", "rl.updates=2", "rl.k=2", "rl.tasks_per_update=1",
                    "rl.checkpoint_every=2", *more])


@pytest.mark.sandbox
def test_filtering_evaluation_and_rl_report_and_are_unchanged_under_ci(policy_dir, tmp_path, console, capsys):
    from depgpo.agent.config import agent_config
    from depgpo.evaluate import evaluate
    from depgpo.policy.generate import make_policy
    from depgpo.policy.model import load_policy
    from depgpo.tasks import load_task
    from depgpo.train.filtering import run_filter
    from depgpo.train.rl import RLTrainer

    tasks = [load_task(DATA / "tasks" / name) for name in ("write-answer", "offline-verifier")]
    cfg = stage_config()

    def stages(out: Path) -> tuple[dict, dict, list[dict], bytes]:
        model, tokenizer = load_policy(policy_dir)
        policy = make_policy(model, tokenizer, cfg)
        selected = run_filter(policy, tasks, agent_config(cfg), 2, 0.0, 0, out / "filter")
        scored = evaluate(policy, tasks, agent_config(cfg), 2, 0, "sft", "test")
        RLTrainer(cfg, policy_dir, tasks, out / "rl").run()
        return selected, scored, without_times(out / "rl" / "metrics.jsonl"), weights(out / "rl" / "checkpoint")

    logged = stages(tmp_path / "logged")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]  # not transformers' own
    assert err[0] == f"[filter] 2 tasks x 2 attempts; the selection goes to {tmp_path / 'logged' / 'filter'}"
    assert [line for line in err if line.startswith("[filter] 4/4 attempts (100%)")]
    assert "[eval sft test] 2 rounds x 2 tasks" in err
    assert [line for line in err if line.startswith("[eval sft test] 4/4 episodes (100%)")]
    rl = [line for line in err if line.startswith("[rl logged/rl] ")]
    assert rl[0] == (f"[rl logged/rl] updates 1-2; metrics in {tmp_path / 'logged' / 'rl' / 'metrics.jsonl'}, "
                     f"TensorBoard in {tmp_path / 'logged' / 'rl' / 'tb'}")
    assert rl[1].startswith("[rl logged/rl] 1/2 updates (50%)") and " reward " in rl[1]
    assert rl[2].startswith("[rl logged/rl] 2/2 updates (100%)") and len(rl) == 3
    console.setenv("CI", "true")
    quiet = stages(tmp_path / "ci")
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert quiet[:2] == logged[:2]  # the selection and the scores
    assert quiet[2] == logged[2] and quiet[3] == logged[3]  # RL's metrics and weights
