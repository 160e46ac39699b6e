"""Copying steps and the cosine schedule of the tiny model's SFT (depgpo.train.induction, depgpo.train.sft)."""

import json

import pytest
import torch

from depgpo.train.induction import (IGNORE_INDEX, copy_examples, induction_examples, recall_examples,
                                    written_tokens)
from depgpo.train.sft import _lr_at, run_sft
from tests.train.test_sft import data_file, sft_config  # noqa: F401  (the hand-made conversations)


def test_a_copying_example_asks_for_the_repeat_and_nothing_else():
    examples = copy_examples([5, 6, 7, 8], 50, torch.Generator().manual_seed(0))
    for ids, labels in examples:
        n = len(ids) // 2
        assert len(ids) == len(labels) == 2 * n and 6 <= n < 48
        assert ids[:n] == ids[n:] and set(ids) <= {5, 6, 7, 8}
        # Hugging Face shifts labels left by one: position i's label is predicted from tokens up to i - 1, so the
        # first copy (and the repeat's first token, which nothing announces) carry no loss.
        assert labels[:n + 1] == [IGNORE_INDEX] * (n + 1) and labels[n + 1:] == ids[n + 1:]
    assert len({tuple(ids) for ids, _ in examples}) == 50
    with pytest.raises(ValueError, match="no assistant tokens"):
        copy_examples([], 1, torch.Generator())


def test_a_recall_example_asks_for_values_by_their_keys():
    tokens = list(range(100, 140))
    for ids, labels in recall_examples(tokens, 50, torch.Generator().manual_seed(0)):
        assert len(ids) == len(labels) and set(ids) <= set(tokens)
        sep = ids[-1]
        items = [tuple(item) for item in _split(ids, sep)]
        keys = [item[0] for item in items]
        length = len(items[0]) - 1
        assert 2 <= length < 6 and all(len(item) == length + 1 for item in items)
        first = len(set(keys))  # the listing: distinct keys; then some of them again, with the same values
        listing, asked = dict((item[0], item[1:]) for item in items[:first]), items[first:]
        assert len(listing) == first and 1 <= len(asked) <= max(1, first // 2) and 3 <= first < 9
        assert all(listing[item[0]] == item[1:] for item in asked)
        assert len({token for value in listing.values() for token in value}) <= 10  # a small alphabet
        # Loss only on the asked values and their separators, never on a key or on the listing.
        unlabelled = len(ids) - len(asked) * (length + 2) + len(asked)  # key, value, sep per asked item
        assert labels.count(IGNORE_INDEX) == unlabelled
        assert [t for t, label in zip(ids, labels) if label != IGNORE_INDEX] == \
            [t for key, *value in map(list, asked) for t in (*value, sep)]
    with pytest.raises(ValueError, match="too few"):
        recall_examples(list(range(10)), 1, torch.Generator())
    batch = induction_examples(tokens, 10, 0.3, torch.Generator().manual_seed(1))
    assert sum(ids[:len(ids) // 2] == ids[len(ids) // 2:] for ids, _ in batch) >= 7  # 7 copies, 3 recalls


def _split(ids, sep):
    item = []
    for token in ids:
        if token == sep:
            yield item
            item = []
        else:
            item.append(token)


def test_the_strings_draw_from_the_tokens_the_assistant_writes():
    examples = [([1, 2, 3, 4], [IGNORE_INDEX, IGNORE_INDEX, 3, 4]), ([1, 9, 2], [IGNORE_INDEX, 9, 0])]
    assert written_tokens(examples, special={0}) == [3, 4, 9]


def test_cosine_schedule_warms_up_then_falls_to_zero():
    cfg = {"lr": 1e-3, "schedule": "cosine", "warmup_steps": 10}
    lrs = [_lr_at(step, 110, cfg) for step in range(110)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] < 1e-6
    assert _lr_at(50, 110, {**cfg, "schedule": "constant"}) == 1e-3


def test_sft_runs_copying_steps_first_and_mixes_them_in(data_file, tmp_path):  # noqa: F811
    cfg = sft_config(["sft.epochs=2", "sft.batch_size=6", "model.hidden=32", "model.layers=1", "sft.schedule=cosine",
                      "sft.warmup_steps=2", "sft.copy.steps=8", "sft.copy.batch=4", "sft.copy.mix=0.5",
                      "sft.copy.recall=0.5"])
    run_sft(data_file, tmp_path, cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    phases = [row["phase"] for row in rows]
    assert phases[:8] == ["copy"] * 8 and phases.count("sft") == 2 * 5  # 30 conversations, 6 a step
    assert 0 < phases[8:].count("copy") < 10  # about half of the SFT steps are followed by one
    assert all(row["tokens"] > 0 and row["loss"] == row["loss"] for row in rows)
