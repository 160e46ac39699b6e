"""DAPO's batch-side pieces (arXiv 2503.14476): dynamic sampling and overlong reward shaping.

Clip-higher and token-mean aggregation are loss settings (see `losses` and config/method/dapo.yaml). The rules
here follow verl's DAPO recipe and its `dapo` reward manager; they are plain Python/torch so the sampler can use
them without importing verl.
"""

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import torch

Group = TypeVar("Group")


def is_informative(metric_values: Sequence[float]) -> bool:
    """A group carries a learning signal unless all its trajectories scored the same.

    A group of one trajectory is kept, as in verl's recipe (its GRPO advantage is its raw score).
    """
    return len(metric_values) == 1 or len(set(float(v) for v in metric_values)) > 1


def informative_trajectory_mask(group_ids: Sequence[Hashable], metric_values: Sequence[float]) -> np.ndarray:
    """Dynamic-sampling filter over a flat batch: True for trajectories whose group is informative."""
    if len(group_ids) != len(metric_values):
        raise ValueError(f"{len(group_ids)} group ids but {len(metric_values)} metric values")
    by_group: dict[Hashable, list[float]] = defaultdict(list)
    for group_id, value in zip(group_ids, metric_values, strict=True):
        by_group[group_id].append(value)
    keep = {group_id for group_id, values in by_group.items() if is_informative(values)}
    return np.array([group_id in keep for group_id in group_ids], dtype=bool)


@dataclass
class Refill(Generic[Group]):
    groups: list[Group]  # exactly the requested number of informative groups, in draw order
    num_gen_batches: int  # generation batches drawn to get them
    num_dropped: int  # uninformative groups discarded on the way


def refill_groups(
    draw_batch: Callable[[], Sequence[Group]],
    metric_values: Callable[[Group], Sequence[float]],
    num_groups: int,
    max_num_gen_batches: int,
) -> Refill[Group]:
    """Draw generation batches until `num_groups` informative groups are collected (DAPO dynamic sampling).

    Like verl's recipe: surplus groups of the last batch are cut off, and running out of the budget of
    `max_num_gen_batches` batches raises; a budget <= 0 means no limit.
    """
    kept: list[Group] = []
    num_dropped = 0
    num_gen_batches = 0
    while len(kept) < num_groups:
        if 0 < max_num_gen_batches <= num_gen_batches:
            raise RuntimeError(
                f"only {len(kept)} of {num_groups} informative groups after {num_gen_batches} generation batches "
                f"(max_num_gen_batches={max_num_gen_batches}); the tasks may be too hard or too easy"
            )
        num_gen_batches += 1
        for group in draw_batch():
            if is_informative(metric_values(group)):
                kept.append(group)
            else:
                num_dropped += 1
    return Refill(groups=kept[:num_groups], num_gen_batches=num_gen_batches, num_dropped=num_dropped)


def overlong_penalty(
    response_lengths: Sequence[int] | torch.Tensor, max_resp_len: int, buffer_len: int, penalty_factor: float
) -> torch.Tensor:
    """Soft overlong punishment added to each trajectory's reward, as verl's `dapo` reward manager computes it.

    0 up to `max_resp_len - buffer_len` tokens, then falling linearly to -penalty_factor at `max_resp_len`:
    `min(-(length - (max_resp_len - buffer_len)) / buffer_len * penalty_factor, 0)`. For a multi-turn agent the
    length is the whole response, observation tokens included (verl counts the response's attention mask).
    """
    if buffer_len <= 0:
        raise ValueError(f"overlong buffer_len must be positive, got {buffer_len}")
    if max_resp_len < buffer_len:
        raise ValueError(f"max_resp_len ({max_resp_len}) must be at least buffer_len ({buffer_len})")
    lengths = torch.as_tensor(response_lengths, dtype=torch.float64)
    exceed = lengths - (max_resp_len - buffer_len)
    return torch.clamp(-exceed / buffer_len * penalty_factor, max=0.0)
