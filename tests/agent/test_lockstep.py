"""Rollouts in lock-step (depgpo.agent.loop.run_rollouts): turns of many rollouts decoded as one batch, commands run
side by side in their own sandboxes. They must be the rollouts the one-at-a-time loop makes (verl's agent loop runs
that one), and turns that end at different lengths must decode alike in a batch and alone."""

from __future__ import annotations

import json

import pytest
import torch

from depgpo.agent.config import AgentConfig
from depgpo.agent.loop import iter_rollouts, run_rollout
from depgpo.env.episode import EpisodeConfig
from depgpo.policy.generate import Policy, tokenize
from depgpo.policy.chat import IM_END, render_assistant
from depgpo.policy.model import build_tiny_qwen3, train_tokenizer
from depgpo.tasks import load_task
from tests.helpers import DATA
from tests.helpers.harbor_builder import make_harbor_task

PASSING_TEST = "def test_nothing():\n    assert True\n"


@pytest.fixture(scope="module")
def policy():
    """A random tiny Qwen3 whose <|im_end|> embedding (tied to its output row) is scaled up: its logit swings far
    above or below the rest, so turns end after a few tokens or run to the limit, each row at its own step."""
    tokenizer = train_tokenizer(["<bash>echo river > /app/f1.txt</bash>", "<bash>cat /app/data.txt</bash>",
                                 "<done/>", "write the sum to /app/answer.txt"] * 10, 300)
    model = build_tiny_qwen3(tokenizer, hidden=64, layers=2, seed=3).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids(IM_END)] *= 4
    return Policy(model, tokenizer, max_turn_tokens=24, temperature=1.0, observation_chars=1000)


def instructions() -> list[str]:
    return [f"Into /app/f{n}.txt write the word {w}" for n, w in enumerate(["apple", "river", "stone"])] + \
        ["Create /app/f4.py that prints maple", "Count the lines of /app/ocean.log into /app/count.txt", "xyz"]


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.0, 1.0), (0.8, 0.9)])
def test_turns_decoded_together_equal_turns_decoded_alone(policy, temperature, top_p):
    policy.temperature, policy.top_p = temperature, top_p
    contexts = [policy.start(text) for text in instructions()]
    for turn, ctx in enumerate(contexts[:3]):  # contexts of other lengths: some with a turn and an observation
        policy.next_turn(ctx, rng_seed=turn)
        policy.observe(ctx, "x" * (7 * turn), 0)
    seeds = [11 * i + 3 for i in range(len(contexts))]
    alone = [policy.generate(ctx.token_ids, seed) for ctx, seed in zip(contexts, seeds)]
    together = policy.generate_batch([ctx.token_ids for ctx in contexts], seeds)
    assert [ids for ids, _ in together] == [ids for ids, _ in alone]
    assert len({len(ids) for ids, _ in alone}) > 1  # rows left the batch at different steps
    for (_, batched), (_, single) in zip(together, alone):
        torch.testing.assert_close(torch.tensor(batched), torch.tensor(single), atol=1e-4, rtol=0)


class ScriptedTurns(Policy):
    """A stand-in for the model at the one boundary it has (`generate`): rollout `seed`'s turn t is the t-th command
    of SCRIPTS[seed] (then <done/>), tokenized as the model's text would be. Everything else is the real loop."""

    SCRIPTS = {5: ["mkdir -p out", "grep word config/settings.ini | cut -d' ' -f3 > out/greeting.txt",
                   "cat out/greeting.txt"],
               7: ["ls", "cat config/settings.ini", "sleep 2; echo late", "mkdir -p out; echo bye > out/greeting.txt"],
               8: ["mkdir -p out && echo hello > out/greeting.txt"]}

    def generate(self, context_ids, rng_seed):
        script = self.SCRIPTS.get(rng_seed // 1000, [])
        turn = rng_seed % 1000
        ids = tokenize(self.tokenizer, render_assistant(script[turn] if turn < len(script) else None))
        return ids, [0.0] * len(ids)

    def generate_batch(self, contexts, rng_seeds):
        return [self.generate(c, s) for c, s in zip(contexts, rng_seeds)]


@pytest.mark.parametrize("driver,groups", [("model", 1), ("script", 1), ("model", 2), ("script", 2)])
def test_lockstep_rollouts_are_the_rollouts_made_one_at_a_time(policy, driver, groups, tmp_path):
    """In one group, and in two whose decoding and commands overlap (`decode_groups`)."""
    policy.temperature, policy.top_p = 1.0, 1.0
    if driver == "script":
        policy = ScriptedTurns(None, policy.tokenizer, max_turn_tokens=64, observation_chars=1000)
    good = load_task(DATA / "tasks" / "offline-verifier")  # on the host's system directories
    # A sandbox that cannot start (a WORKDIR the harness mounts over): a failed rollout, reward 0, no turns.
    broken = load_task(make_harbor_task(tmp_path, "wd", instruction="Into out/greeting.txt write hello",
                                        test_py=PASSING_TEST, dockerfile_extra="WORKDIR /logs\n"))
    jobs = [(good, 5), (broken, 6), (good, 7), (good, 8)]
    config = AgentConfig(max_turns=4, workers=2, decode_batch=3, decode_groups=groups,
                         episode=EpisodeConfig(command_timeout_s=5))
    together = list(iter_rollouts(policy, jobs, config))
    alone = [run_rollout(policy, task, config, seed) for task, seed in jobs]
    assert [r.task_id for r in together] == [task.id for task, _ in jobs]
    for a, b in zip(together, alone):
        assert (a.response_ids, a.response_mask, a.turn_ids, a.anchor_keys, a.num_turns, a.finished) == \
            (b.response_ids, b.response_mask, b.turn_ids, b.anchor_keys, b.num_turns, b.finished)
        torch.testing.assert_close(torch.tensor(a.old_logprobs), torch.tensor(b.old_logprobs), atol=1e-4, rtol=0)
        assert [c["text"] for c in a.trajectory["commands"]] == [c["text"] for c in b.trajectory["commands"]]
        assert [c["observation"] for c in a.trajectory["commands"]] == \
            [c["observation"] for c in b.trajectory["commands"]]
        assert a.reward == b.reward
    assert together[1].num_turns == 0 and together[1].reward == 0.0
    assert "episode failed to start" in together[1].trajectory["errors"][0]
    if driver == "script":  # commands ran, side by side, and each rollout's verdict is its own
        assert [len(r.trajectory["commands"]) for r in together] == [3, 0, 4, 1]
        assert [r.reward for r in together] == [1.0, 0.0, 0.0, 1.0]
        assert [r.finished for r in together] == [True, False, False, True]  # 7 used its 4 turns on commands
    json.dumps([r.trajectory for r in together])  # the records stay plain data
