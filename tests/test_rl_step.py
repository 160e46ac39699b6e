"""The local trainer's update on a hand-made batch (no sandbox): `rl.ppo_epochs` steps, where later epochs are
off-policy and the methods' clipping acts, and the first one is the on-policy step every method shares."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from depgpo.agent.loop import Rollout
from depgpo.config import compose
from depgpo.policy.generate import sequence_logprobs, tokenize
from depgpo.policy.model import build_tiny_qwen3, save_policy, train_tokenizer
from depgpo.tasks import load_task
from depgpo.train.rl import Group, RLTrainer

TASK = Path(__file__).parent / "data" / "tasks" / "offline-verifier"


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    tokenizer = train_tokenizer(["cat /app/config/settings.ini", "echo hello > /app/greeting.txt", "done"] * 10, 300)
    directory = tmp_path_factory.mktemp("policy")
    save_policy(build_tiny_qwen3(tokenizer), tokenizer, directory)
    return directory


def batch(trainer: RLTrainer) -> list[Group]:
    """One group of four one-turn rollouts, two passing and two failing, with the sampler's log-probs."""
    prompt = tokenize(trainer.tokenizer, "greet the user")
    rollouts = []
    for i, text in enumerate(["echo hello > /app/greeting.txt", "cat /app/config/settings.ini", "echo hello",
                              "done"]):
        response = tokenize(trainer.tokenizer, text)
        with torch.no_grad():
            old = sequence_logprobs(trainer.model, prompt, response).tolist()
        rollouts.append(Rollout(task_id="offline-verifier", trajectory={"verifier": {"reward": float(i % 2 == 0)}},
                                prompt_ids=prompt, response_ids=response, response_mask=[1] * len(response),
                                turn_ids=[0] * len(response), old_logprobs=old, num_turns=1,
                                anchor_keys=["start"], finished=True))
    return [Group(load_task(TASK), rollouts)]


def step(policy_dir: Path, tmp_path: Path, method: str, epochs: int) -> dict:
    cfg = compose(["scale=ci", f"method={method}", f"rl.ppo_epochs={epochs}", "rl.lr=0.05", "device=cpu"])
    trainer = RLTrainer(cfg, policy_dir, [], tmp_path / f"{method}-{epochs}")
    return trainer.step(batch(trainer))


def test_one_epoch_is_on_policy_and_later_epochs_clip(policy_dir, tmp_path):
    one = {m: step(policy_dir, tmp_path, m, 1) for m in ("grpo", "dapo")}
    # on-policy, every ratio is 1: nothing is clipped, and DAPO's clip-higher changes nothing
    assert one["grpo"]["actor/pg_clipfrac"] == 0.0
    assert one["dapo"]["train/loss"] == pytest.approx(one["grpo"]["train/loss"])
    three = {m: step(policy_dir, tmp_path, m, 3) for m in ("grpo", "dapo")}
    # off-policy epochs move the ratios past 1 ± 0.2: PPO's clip acts, and clip-higher's bound (1.28) gives DAPO
    # another loss on the same batch
    assert three["grpo"]["actor/pg_clipfrac"] > 0.0
    assert three["dapo"]["train/loss"] != pytest.approx(three["grpo"]["train/loss"], rel=1e-3)
