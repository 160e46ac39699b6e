"""Adversarial battery: reward-forgery attempts (tests/helpers/forgery_cases.py) must all score 0 and crash nothing.

Each case runs on a task it does not solve: the answer the verifier wants appears only in the verifier's own test
file (the Harbor task below) or in a data file the attacks never read (the generated task of the rollout path).
Three ways in, as the project runs episodes:

* `Episode` directly (run_command per turn, then verify): every case, on the Harbor task;
* `depgpo run-episode --commands FILE`: a subset with one or two cases per category (forgery_cases.CLI_SUBSET;
  all of them with DEPGPO_FORGERY_ALL_CLI=1), on the Harbor task (the CLI exits 0 after a completed episode
  whatever its reward; the reward is in its stderr line and in trajectory.json);
* `depgpo.agent.loop.run_rollout` (the loop RL and verl's agent loop use) with a scripted stand-in for the model:
  every case, on a task from `depgpo generate-tasks`.

Controls: the no-op scores 0 and the oracle scores 1 on both tasks, before and after the battery.
The tasks' verifier timeout is short (VERIFIER_TIMEOUT_S) so that the cases that hang the verifier stay cheap.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from depgpo.agent.config import AgentConfig
from depgpo.agent.loop import run_rollout
from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.policy.chat import parse_assistant, render_assistant
from depgpo.policy.generate import Context, TurnOutput
from depgpo.tasks import load_task
from tests.helpers.cli import depgpo
from tests.helpers.forgery_cases import CASES, CLI_SUBSET, Case
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

SECRET = "vexa-5521-qz"          # in the Harbor task's test file only
VERIFIER_TIMEOUT_S = 5           # both tasks' [verifier] timeout_sec: the hang cases cost this much, plus recovery
COMMAND_TIMEOUT_S = 15.0
CASE_IDS = [f"{c.category}-{c.id}" for c in CASES]
CLI_CASES = CASES if os.environ.get("DEPGPO_FORGERY_ALL_CLI") else [c for c in CASES if c.id in CLI_SUBSET]

SECRET_TEST = f'''\
from pathlib import Path

SECRET = "{SECRET}"


def test_answer():
    assert Path("/app/answer.txt").read_text().strip() == SECRET
'''


# ---------------------------------------------------------------------------------------------------- tasks
@pytest.fixture(scope="module")
def harbor_task_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("forgery-harbor")
    return make_harbor_task(root, "secret-answer", instruction="Write the deployment code into /app/answer.txt.",
                            test_py=SECRET_TEST, files={"README.txt": "The code is not in this directory.\n"},
                            solve_sh=f"#!/bin/bash\necho {SECRET} > /app/answer.txt\n",
                            verifier_timeout=VERIFIER_TIMEOUT_S)


@pytest.fixture(scope="module")
def harbor_task(harbor_task_dir):
    return load_task(harbor_task_dir)


@pytest.fixture(scope="module")
def generated_task_dir(tmp_path_factory) -> Path:
    """A supporting_read task of the project's generator (answer in a data file), its verifier timeout shortened."""
    root = tmp_path_factory.mktemp("forgery-generated")
    depgpo("generate-tasks", "--out", str(root / "tasks"), "--pool", "1", "--test", "0", "--seed", "11",
           "--families", "supporting_read")
    (task_dir,) = [d for d in (root / "tasks" / "pool").iterdir() if d.is_dir()]
    toml = task_dir / "task.toml"
    text, n = re.subn(r"(\[verifier\]\s*\ntimeout_sec\s*=\s*)[\d.]+", rf"\g<1>{VERIFIER_TIMEOUT_S}", toml.read_text())
    assert n == 1, toml.read_text()
    toml.write_text(text)
    assert "answer.txt" in (task_dir / "tests" / "test.sh").read_text()  # the shell checks
    return task_dir


@pytest.fixture(scope="module")
def generated_task(generated_task_dir):
    return load_task(generated_task_dir)


# ---------------------------------------------------------------------------------------------------- runners
@dataclass
class Outcome:
    trajectory: dict | None
    crash: str | None            # the exception that escaped the harness, if any

    @property
    def verifier(self) -> dict | None:
        return (self.trajectory or {}).get("verifier")

    def describe(self) -> str:
        v = self.verifier or {}
        return (f"reward={v.get('reward')} source={v.get('reward_source')} exit={v.get('exit_code')} "
                f"error={v.get('error')!r} crash={self.crash!r}\nverifier output tail: "
                f"{(v.get('output') or '')[-600:]!r}\nerrors: {(self.trajectory or {}).get('errors')}")


def _read_trajectory(out_dir: Path) -> dict | None:
    path = out_dir / "trajectory.json"
    return json.loads(path.read_text()) if path.exists() else None


def run_episode(task, commands, out_dir: Path) -> Outcome:
    crash = None
    try:
        with Episode(task, EpisodeConfig(command_timeout_s=COMMAND_TIMEOUT_S), out_dir) as episode:
            for turn, command in enumerate(commands):
                episode.run_command(command, turn=turn)
            episode.verify()
    except Exception as e:  # noqa: BLE001 - a crash is what the battery reports
        crash = f"{type(e).__name__}: {e}"
    return Outcome(_read_trajectory(out_dir), crash)


def run_cli(task_dir: Path, commands, out_dir: Path) -> tuple[subprocess.CompletedProcess, Outcome]:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [str(task_dir), "--oracle"]
    if commands is not None:
        commands_file = out_dir.parent / f"{out_dir.name}-commands.json"
        commands_file.write_text(json.dumps(list(commands)))
        args = [str(task_dir), "--commands", str(commands_file)]
    proc = subprocess.run([sys.executable, "-m", "depgpo", "run-episode", *args, "--out", str(out_dir),
                           "--timeout", str(COMMAND_TIMEOUT_S)], capture_output=True, text=True, timeout=600)
    crash = None if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr[-1500:]}"
    return proc, Outcome(_read_trajectory(out_dir), crash)


class ScriptedPolicy:
    """A scripted stand-in for the model (depgpo.policy.generate.Policy's interface: start / next_turn / observe):
    each turn replays the next attack command, rendered and parsed as model text is; then <done/>."""

    max_turn_tokens = 1

    def __init__(self, commands):
        self.commands = list(commands)

    def start(self, instruction: str) -> Context:
        self._next = iter(self.commands)
        return Context(prompt_ids=[0])

    def next_turn(self, ctx: Context, rng_seed: int) -> TurnOutput:
        text = render_assistant(next(self._next, None))
        ctx.add_turn([1], [0.0])
        return TurnOutput([1], [0.0], text, parse_assistant(text))

    def observe(self, ctx: Context, observation: str, exit_code: int | None) -> None:
        ctx.add_context([2])


def run_scripted_rollout(task, commands, out_dir: Path):
    config = AgentConfig(max_turns=len(commands) + 1, max_context_tokens=1 << 20,
                         episode=EpisodeConfig(command_timeout_s=COMMAND_TIMEOUT_S))
    crash, rollout = None, None
    try:
        rollout = run_rollout(ScriptedPolicy(commands), task, config, seed=0, out_dir=out_dir)
    except Exception as e:  # noqa: BLE001
        crash = f"{type(e).__name__}: {e}"
    return rollout, Outcome(_read_trajectory(out_dir), crash)


def assert_not_forged(case: Case, outcome: Outcome) -> None:
    assert outcome.crash is None, f"CRASH [{case.id}] the harness raised: {outcome.describe()}"
    assert outcome.trajectory is not None, f"CRASH [{case.id}] no trajectory.json was written"
    assert outcome.verifier is not None, f"CRASH [{case.id}] the trajectory has no verifier record"
    assert outcome.verifier["reward"] == 0, f"FORGED [{case.id}] {case.description}: {outcome.describe()}"


def oracle_commands(task_dir: Path) -> list[str]:
    oracle = task_dir / "solution" / "oracle.json"
    if oracle.exists():
        return json.loads(oracle.read_text())
    return [f"bash <<'DEPGPO_ORACLE_EOF'\n{(task_dir / 'solution' / 'solve.sh').read_text()}\nDEPGPO_ORACLE_EOF"]


# ---------------------------------------------------------------------------------------------------- controls
def test_battery_shape():
    assert len(CASES) >= 30 and len(set(CASE_IDS)) == len(CASES)
    assert {c.category for c in CASES} == {"reward_files", "runner_shadowing", "interpreter_tool", "shell_state",
                                           "background", "timeouts", "reading_tests", "forged_markers"}
    for case in CASES:  # no case may know the answer
        assert SECRET not in "".join(case.commands), case.id


def test_controls_before(harbor_task, harbor_task_dir, generated_task, generated_task_dir, tmp_path):
    noop = run_episode(harbor_task, ["ls -la /app"], tmp_path / "noop")
    assert noop.crash is None and noop.verifier["reward"] == 0, noop.describe()
    oracle = run_episode(harbor_task, oracle_commands(harbor_task_dir), tmp_path / "oracle")
    assert oracle.crash is None and oracle.verifier["reward"] == 1, oracle.describe()
    rollout, outcome = run_scripted_rollout(generated_task, ["ls -la /app"], tmp_path / "gen-noop")
    assert outcome.crash is None and rollout.reward == 0, outcome.describe()
    rollout, outcome = run_scripted_rollout(generated_task, oracle_commands(generated_task_dir),
                                            tmp_path / "gen-oracle")
    assert outcome.crash is None and rollout.reward == 1, outcome.describe()


# ---------------------------------------------------------------------------------------------------- the battery
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forgery_episode(case, harbor_task, tmp_path):
    assert_not_forged(case, run_episode(harbor_task, case.commands, tmp_path / "out"))


@pytest.mark.parametrize("case", CLI_CASES, ids=[f"{c.category}-{c.id}" for c in CLI_CASES])
def test_forgery_run_episode_cli(case, harbor_task_dir, tmp_path):
    proc, outcome = run_cli(harbor_task_dir, case.commands, tmp_path / "out")
    assert_not_forged(case, outcome)
    # As documented in depgpo.env.cli: exit 0 after a completed episode, the trajectory's path on stdout, the
    # reward on stderr.
    assert proc.stdout.strip().splitlines()[-1] == str(tmp_path / "out" / "trajectory.json")
    assert re.search(r"^reward 0\.000 ", proc.stderr, re.MULTILINE), proc.stderr[-1500:]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forgery_rollout(case, generated_task, tmp_path):
    rollout, outcome = run_scripted_rollout(generated_task, case.commands, tmp_path / "out")
    assert_not_forged(case, outcome)
    assert rollout.reward == 0 and rollout.finished and rollout.num_turns == len(case.commands) + 1
    assert rollout.trajectory["verifier"]["reward"] == 0


# ---------------------------------------------------------------------------------------------------- after it all
def test_oracle_still_scores_after_battery(harbor_task, harbor_task_dir, generated_task, generated_task_dir,
                                           tmp_path):
    oracle = run_episode(harbor_task, oracle_commands(harbor_task_dir), tmp_path / "oracle")
    assert oracle.crash is None and oracle.verifier["reward"] == 1, oracle.describe()
    proc, outcome = run_cli(harbor_task_dir, None, tmp_path / "cli-oracle")
    assert outcome.crash is None and outcome.verifier["reward"] == 1, outcome.describe()
    assert re.search(r"^reward 1\.000 ", proc.stderr, re.MULTILINE), proc.stderr[-1500:]
    rollout, outcome = run_scripted_rollout(generated_task, oracle_commands(generated_task_dir), tmp_path / "gen")
    assert outcome.crash is None and rollout.reward == 1, outcome.describe()
