"""DAPO's batch-side pieces (arXiv 2503.14476): dynamic sampling and overlong reward shaping.

Clip-higher and token-mean aggregation are loss settings (see `losses` and config/method/dapo.yaml). The rules
here follow verl's DAPO recipe and its `dapo` reward manager; they are plain Python/torch so the sampler can use
them without importing verl.
"""

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

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


def collect_groups(
    draw: Callable[[int, int], Sequence[Group]],
    rewards: Callable[[Group], Sequence[float]],
    wanted: int,
    dynamic_sampling: bool,
    max_num_gen_batches: int,
) -> tuple[list[Group], list[Group]]:
    """(kept, dropped): the groups of one update. `draw(first, n)` samples the groups of draws first..first+n-1.
    Without dynamic sampling that is `wanted` draws, all kept. With it (DAPO), groups whose rewards are all equal are
    dropped and each round draws as many as are still missing, within a budget of `wanted` x max_num_gen_batches
    draws (verl's recipe counts generation batches of `wanted`); when the budget runs out the update trains on the
    groups it has, and on none when every group was dropped (the trainer then skips its gradient step)."""
    max_draws = wanted * max(1, max_num_gen_batches) if dynamic_sampling else wanted
    kept: list[Group] = []
    dropped: list[Group] = []
    drawn = 0
    while len(kept) < wanted and drawn < max_draws:
        size = min(wanted - len(kept), max_draws - drawn)
        for group in draw(drawn, size):
            (dropped if dynamic_sampling and not is_informative(rewards(group)) else kept).append(group)
        drawn += size
    return kept, dropped


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
