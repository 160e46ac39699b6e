"""The local trainer's update on a hand-made batch (no sandbox): `rl.ppo_epochs` steps, where later epochs are
off-policy and the methods' clipping acts, and the first one is the on-policy step every method shares."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from depgpo.agent.loop import Rollout
from depgpo.config import compose
from depgpo.policy.generate import sequence_logprobs, tokenize
from depgpo.policy.model import build_tiny_qwen3, load_policy, save_policy, train_tokenizer
from depgpo.tasks import load_task
from depgpo.train.rl import Group, RLTrainer
from tests.helpers import DATA

TASK = DATA / "tasks" / "offline-verifier"


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


def step(policy_dir: Path, tmp_path: Path, name: str, epochs: int, *overrides: str) -> tuple[dict, RLTrainer]:
    cfg = compose(["scale=ci", f"rl.ppo_epochs={epochs}", "rl.lr=0.05", "device=cpu", *overrides])
    trainer = RLTrainer(cfg, policy_dir, [], tmp_path / f"{name}-{epochs}")
    return trainer.step(batch(trainer)), trainer


def adam_steps(trainer: RLTrainer) -> set[int]:
    return {int(state["step"]) for state in trainer.optimizer.state.values()}


def test_one_epoch_is_on_policy_and_later_epochs_clip(policy_dir, tmp_path):
    grpo = ["method=grpo"]
    higher = ["method=grpo", "actor.clip_ratio_high=0.28"]  # DAPO's clip-higher, nothing else of DAPO
    one, trainer = step(policy_dir, tmp_path, "grpo", 1, *grpo)
    one_higher, _ = step(policy_dir, tmp_path, "higher", 1, *higher)
    assert adam_steps(trainer) == {1}
    # on-policy, every ratio is 1: nothing is clipped, so the upper clip bound changes nothing
    assert one["actor/pg_clipfrac"] == 0.0
    assert one_higher["train/loss"] == pytest.approx(one["train/loss"])
    three, trainer = step(policy_dir, tmp_path, "grpo", 3, *grpo)
    three_higher, _ = step(policy_dir, tmp_path, "higher", 3, *higher)
    assert adam_steps(trainer) == {3}
    # the second and third steps are off-policy: ratios pass 1 ± 0.2, PPO's clip acts, and the upper bound matters
    assert three["actor/pg_clipfrac"] > 0.0
    assert three_higher["train/loss"] != pytest.approx(three["train/loss"], rel=1e-3)


def test_ppo_epochs_reaches_verl_and_is_checked():
    from depgpo.train.verl_config import verl_overrides

    cfg = compose(["scale=paper", "rl.ppo_epochs=2"])
    assert "actor_rollout_ref.actor.ppo_epochs=2" in verl_overrides(cfg, "/models/policy")
    with pytest.raises(ValueError, match="rl.ppo_epochs=0"):
        compose(["scale=tiny", "rl.ppo_epochs=0"])


def test_kl_loss_anchors_the_update_to_the_sft_policy(policy_dir, tmp_path):
    # The reference is the policy the run started from: its KL to the policy is 0 on the first epoch, and grows as
    # the steps move away from it; a larger coefficient holds the policy closer.
    _, free = step(policy_dir, tmp_path, "free", 3, "method=grpo")
    kl, anchored = step(policy_dir, tmp_path, "kl", 3, "method=grpo", "actor.use_kl_loss=true",
                        "actor.kl_loss_coef=50")
    assert anchored.reference is not None and free.reference is None
    assert not any(p.requires_grad for p in anchored.reference.parameters())
    assert kl["actor/kl_loss"] > 0.0  # the mean over the three epochs: 0 on the first, positive after it

    def distance(trainer):  # how far the trained weights moved from the SFT checkpoint
        start = load_policy(policy_dir)[0].state_dict()
        return sum(float((p.detach() - start[n]).abs().sum()) for n, p in trainer.model.named_parameters())

    assert distance(anchored) < distance(free)


def test_train_max_tasks_draws_a_seeded_subset_as_verl_does(policy_dir, tmp_path):
    from depgpo.train.rl import training_subset
    from depgpo.train.verl_config import verl_overrides

    tasks = [f"task-{i:02d}" for i in range(13)]
    subsets = {seed: training_subset(tasks, 2, seed) for seed in range(6)}
    assert all(len(s) == 2 and s == sorted(s) for s in subsets.values())  # two tasks, in their original order
    assert training_subset(tasks, 2, 3) == subsets[3]  # the seed fixes the subset ...
    assert len({tuple(s) for s in subsets.values()}) > 1  # ... and another seed draws others
    assert training_subset(tasks, -1, 0) == tasks and training_subset(tasks, 20, 0) == tasks
    cfg = compose(["scale=tiny", "rl.train_max_tasks=2", "seed=4", "device=cpu"])
    trainer = RLTrainer(cfg, policy_dir, [load_task(TASK)] * 5, tmp_path / "subset")
    assert len(trainer.tasks) == 2
    overrides = verl_overrides(compose(["scale=paper", "rl.train_max_tasks=100", "seed=4"]), "/models/policy")
    assert {"data.train_max_samples=100", "data.seed=4"} <= set(overrides)
