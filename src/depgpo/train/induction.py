"""Copying batches: random token strings written twice, the loss on the second copy.

A policy that solves tasks it has not seen must copy values, names and paths from its context into its commands,
which in a transformer takes induction heads. The tiny model trained from scratch on a few hundred conversations
does not form them: it writes the values it was trained on (docs/results.md#can-the-tiny-model-generalise). A few
hundred of these steps before SFT, at a batch of 64 strings drawn from the tokens the conversations' assistant turns
write, do (the copy's loss falls from 5.1 to 0.45 within 200 steps; at a batch of 16, or drawn from the whole
vocabulary, it does not within 3,000), and some of them mixed into SFT keep them.
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
