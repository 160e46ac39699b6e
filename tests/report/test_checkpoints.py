"""Byte-identical checkpoints in the report, and whether their credit had to agree (depgpo.report.checkpoints)."""

import copy
import json
from pathlib import Path

from depgpo.report.checkpoints import identical_markdown
from tests.helpers.credit_examples import COUNT_DATASET_TOKENS


def _run(setting: Path, run: str, weights: bytes, rewards: tuple[float, ...] = ()) -> None:
    run_dir = setting / run
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / "model.safetensors").write_bytes(weights)
    (run_dir / "trajectories").mkdir()
    rollouts = []
    for reward in rewards:  # one group: the same task, a supporting read (q 0.5 at β 0.5, 0.25 at β 0.25)
        rollout = copy.deepcopy(COUNT_DATASET_TOKENS.trajectory)
        rollout["verifier"]["reward"] = reward
        rollouts.append(json.dumps(rollout))
    (run_dir / "trajectories" / "update0000.jsonl").write_text("\n".join(rollouts) + "\n")


def test_identical_runs_are_named_with_whether_their_credit_had_to_agree(tmp_path):
    setting = tmp_path / "results" / "tiny" / "tiny"
    _run(setting, "sft", b"sft")
    _run(setting, "rl/frozen/seed0", b"sft")
    _run(setting, "rl/grpo/seed0", b"grpo")  # weights of its own: not listed
    # Equal rewards: advantage 0, so β cannot matter however the read is credited.
    _run(setting, "rl/depgpo_beta0.25/seed0", b"same", rewards=(1.0, 1.0))
    _run(setting, "rl/depgpo_beta0.75/seed0", b"same", rewards=(1.0, 1.0))
    lines = identical_markdown(tmp_path / "results")
    assert len(lines) == 2
    assert "`sft`, `frozen/seed0`" in lines[0] and "SFT policy's weights" in lines[0] and "grpo" not in lines[0]
    assert "`depgpo_beta0.25/seed0`, `depgpo_beta0.75/seed0`: must be equal: on each of the 0 logged" in lines[1]

    # Unequal rewards: the credited read scales a non-zero advantage differently, so equal weights are unexplained.
    _run(setting, "rl/depgpo_beta0.25/seed1", b"again", rewards=(1.0, 0.0))
    _run(setting, "rl/depgpo_beta0.75/seed1", b"again", rewards=(1.0, 0.0))
    lines = identical_markdown(tmp_path / "results")
    assert "not explained: their credit differs on 2 of the 2 logged trajectories" in lines[-1]


def test_no_identical_checkpoints(tmp_path):
    _run(tmp_path / "tiny" / "tiny", "rl/grpo/seed0", b"a")
    _run(tmp_path / "tiny" / "tiny", "rl/depgpo/seed0", b"b")
    assert identical_markdown(tmp_path) == ["- none: every RL run ended on weights of its own"]
