"""Supervised fine-tuning of the tiny Qwen3 on hand-made conversations: it learns, and only from assistant tokens."""

import argparse
import json

import pytest

from depgpo import stages
from depgpo.config import compose
from depgpo.policy.chat import IM_END, conversation_segments, messages_to_turns, render_assistant
from depgpo.policy.generate import Policy, tokenize
from depgpo.policy.model import load_policy
from depgpo.train.sft import IGNORE_INDEX, encode_segments, run_sft
from tests.policy.test_policy import conversation

WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "amber", "ocean", "pixel", "lemon"]


def hand_made_conversations() -> list[dict]:
    """30 three-turn tasks: the word and the file name in the instruction must be copied into the commands."""
    conversations = []
    for number, word in enumerate(WORDS):
        name = f"f{number}"
        conversations += [
            conversation(f"Into /app/{name}.txt write the word {word}",
                         [(f"echo {word} > /app/{name}.txt", "", 0), (f"cat /app/{name}.txt", word, 0)]),
            conversation(f"Create /app/{name}.py that prints {word}",
                         [(f"cat > /app/{name}.py <<'EOF'\nprint('{word}')\nEOF", "", 0),
                          (f"python3 /app/{name}.py", word, 0)]),
            conversation(f"Count the lines of /app/{word}.log into /app/count.txt",
                         [(f"wc -l < /app/{word}.log > /app/count.txt", "", 0), ("cat /app/count.txt", "12", 0)]),
        ]
    return conversations


def depgpo_sft(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    stages.add_sft(parser)
    return stages.run_sft(parser.parse_args(argv))


# Plain SFT (the tiny scale adds copying steps and a cosine lr: tests/train/test_induction.py)
PLAIN = ["sft.schedule=constant", "sft.copy.steps=0", "sft.copy.mix=0"]


def sft_config(overrides: list[str]):
    """The tiny scale, with the observation limit these hand-made conversations were tokenized with."""
    return compose(["scale=tiny", "agent.observation_chars=1000", "model.max_positions=4096", *PLAIN, *overrides])


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sft") / "conversations.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in hand_made_conversations()))
    return path


@pytest.fixture(scope="module")
def trained(data_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft_run")
    cfg = sft_config(["sft.epochs=60", "sft.batch_size=6", "sft.lr=3e-3", "model.hidden=64", "model.layers=2"])
    checkpoint = run_sft(data_file, out, cfg)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return checkpoint, metrics


def test_loss_falls_far_below_its_start(trained):
    _, metrics = trained
    assert len(metrics) == 60 * 5
    assert [row["step"] for row in metrics] == list(range(1, 301))
    assert all(row["tokens"] > 0 for row in metrics)
    first = sum(row["loss"] for row in metrics[:5]) / 5
    last = sum(row["loss"] for row in metrics[-10:]) / 10
    assert last < 0.15 * first, (first, last)


def test_trained_policy_greedily_replays_training_episodes_token_for_token(trained):
    checkpoint, _ = trained
    model, tokenizer = load_policy(checkpoint)
    policy = Policy(model, tokenizer, max_turn_tokens=40, temperature=0, observation_chars=1000)
    for word, name in [("river", "f1"), ("pixel", "f8")]:
        ctx = policy.start(f"Into /app/{name}.txt write the word {word}")
        assert policy.next_turn(ctx, rng_seed=0).command == f"echo {word} > /app/{name}.txt"
        policy.observe(ctx, "", 0)
        assert policy.next_turn(ctx, rng_seed=0).command == f"cat /app/{name}.txt"
        policy.observe(ctx, word, 0)
        assert policy.next_turn(ctx, rng_seed=0).command is None  # <done/>
        # The episode is the training conversation, with the same tokens and the same trained positions.
        stored = hand_made_conversations()[3 * WORDS.index(word)]
        ids, labels = encode_segments(tokenizer, conversation_segments(*messages_to_turns(stored), 1000))
        assert ctx.token_ids == ids
        assert [0] * len(ctx.prompt_ids) + ctx.response_mask == [int(label != IGNORE_INDEX) for label in labels]


def test_loss_is_on_assistant_tokens_only(trained):
    _, tokenizer = load_policy(trained[0])
    stored = hand_made_conversations()[1]
    segments = conversation_segments(*messages_to_turns(stored), observation_chars=1000)
    ids, labels = encode_segments(tokenizer, segments)
    assert len(ids) == len(labels)
    labelled = [token for token, label in zip(ids, labels) if label != IGNORE_INDEX]
    assert all(label in (IGNORE_INDEX, token) for token, label in zip(ids, labels))
    _, commands, _ = messages_to_turns(stored)
    assert labelled == sum((tokenize(tokenizer, render_assistant(c)) for c in commands), [])
    assert tokenizer.decode(labelled, skip_special_tokens=False).count(IM_END) == 3


def test_cli_runs_with_overrides_and_is_deterministic(data_file, tmp_path, capsys):
    for run in ("a", "b"):
        assert depgpo_sft(["--data", str(data_file), "--out", str(tmp_path / run),
                            "sft.epochs=1", "sft.batch_size=10", "model.hidden=32", *PLAIN]) == 0
    assert (tmp_path / "a" / "metrics.jsonl").read_text().count("\n") == 3
    losses = [[json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
              for run in ("a", "b")]
    assert losses[0] == losses[1]
    assert load_policy(tmp_path / "a" / "checkpoint")[0].config.hidden_size == 32


def test_cli_rejects_unknown_keys(data_file, tmp_path, capsys):
    with pytest.raises(SystemExit, match="learning_rate"):
        depgpo_sft(["--data", str(data_file), "--out", str(tmp_path), "sft.learning_rate=1"])
