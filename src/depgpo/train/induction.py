"""Copying batches: random token strings written twice, the loss on the second copy.

A policy that solves tasks it has not seen must copy values, names and paths from its context into its commands,
which in a transformer takes induction heads. The tiny model trained from scratch on a few hundred conversations
does not form them: it writes the values it was trained on (docs/changelog.md#issue-19-session-1). A few
hundred of these steps before SFT, at a batch of 64 strings drawn from the tokens the conversations' assistant turns
write, do (the copy's loss falls from 5.1 to 0.45 within 200 steps; at a batch of 16, or drawn from the whole
vocabulary, it does not within 3,000), and some of them mixed into SFT keep them.

Copying alone does not find a value by its key: `cat` shows `limit: 8140` among other lines, and the answer needs
the digits after `limit`. Recall examples (multi-query associative recall, as in Arora et al. 2023, "Zoology") list
key-value pairs, then ask for some keys again; the values are spelled from a small alphabet, as numbers are from
ten digits, so that the token before a value's digit does not tell which digit comes next: only the key does.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100  # the label of a token without loss (Hugging Face's default)


def written_tokens(examples: list[tuple[list[int], list[int]]], special: set[int]) -> list[int]:
    """The token ids the examples' assistant turns write (their labels), without special tokens."""
    return sorted({label for _, labels in examples for label in labels if label != IGNORE_INDEX} - special)


def copy_examples(tokens: list[int], count: int, generator: torch.Generator, low: int = 6, high: int = 48
                  ) -> list[tuple[list[int], list[int]]]:
    """`count` (ids, labels) pairs: a random string of `low` to `high - 1` tokens drawn from `tokens`, then the same
    string again; the labels ask for the repeat from its second token on (the first cannot be known)."""
    if not tokens:
        raise ValueError("no tokens to draw copying strings from: the conversations have no assistant tokens")
    pool = torch.tensor(tokens)
    examples = []
    for _ in range(count):
        n = int(torch.randint(low, high, (1,), generator=generator))
        first = pool[torch.randint(len(pool), (n,), generator=generator)].tolist()
        examples.append((first + first, [IGNORE_INDEX] * (n + 1) + first[1:]))
    return examples


def recall_examples(tokens: list[int], count: int, generator: torch.Generator, pairs: tuple[int, int] = (3, 9),
                    value_length: tuple[int, int] = (2, 6), alphabet: int = 10) -> list[tuple[list[int], list[int]]]:
    """`count` (ids, labels) pairs: `key value… sep` for distinct keys drawn from `tokens`, values of one length (per
    example) spelled from `alphabet` other tokens, then the keys again in a random order (at most half of them)
    with the labels on their values and separators."""
    if len(tokens) < pairs[1] + alphabet + 1:
        raise ValueError(f"{len(tokens)} tokens are too few for recall examples: need {pairs[1] + alphabet + 1}")
    pool = torch.tensor(tokens)
    examples = []
    for _ in range(count):
        n = int(torch.randint(pairs[0], pairs[1], (1,), generator=generator))
        length = int(torch.randint(value_length[0], value_length[1], (1,), generator=generator))
        drawn = pool[torch.randperm(len(pool), generator=generator)[:n + alphabet + 1]].tolist()
        keys, letters, sep = drawn[:n], torch.tensor(drawn[n:n + alphabet]), drawn[-1]
        values = [letters[torch.randint(alphabet, (length,), generator=generator)].tolist() for _ in keys]
        ids = [token for key, value in zip(keys, values) for token in (key, *value, sep)]
        labels = [IGNORE_INDEX] * len(ids)
        for i in torch.randperm(n, generator=generator)[:max(1, n // 2)].tolist():
            ids += [keys[i], *values[i], sep]
            labels += [IGNORE_INDEX, *values[i], sep]
        examples.append((ids, labels))
    return examples


def induction_examples(tokens: list[int], count: int, recall_share: float, generator: torch.Generator
                       ) -> list[tuple[list[int], list[int]]]:
    """A copying batch of `count` examples, `recall_share` of them recall examples."""
    recall = round(count * recall_share)
    return copy_examples(tokens, count - recall, generator) + (
        recall_examples(tokens, recall, generator) if recall else [])
