"""Per-token advantages for DepGPO and GiGPO, built on verl's GRPO advantage.

A batch row is one whole multi-turn trajectory. Besides verl's usual inputs (`token_level_rewards`,
`response_mask`, `index` = task group ids) the estimators take `turn_ids` (bs, L): the turn that produced each
response token, -1 on observation and padding tokens. Per-turn inputs are lists of lists, one inner list per
trajectory, indexed by turn id.

Both estimators follow verl's estimator signature and return `(advantages, returns)`, so they can sit in verl's
registry (see `verl_registry`). Our local trainer passes the turn data and settings as keyword arguments. verl's
trainer calls an estimator with rewards, mask, uid and its `config` only: there the turn data come from the
`TurnBatch` that `depgpo.train.verl_trainer` makes active with `turn_batch(...)` around verl's advantage step, and
`norm_adv_by_std_in_grpo` from verl's config. verl is imported lazily: the turn arithmetic here is plain torch.
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np
import torch

GIGPO_MODES = ("mean_norm", "mean_std_norm")
# How far a trajectory's step factors may drift from mean 1 before we call it a bug in the factor source.
FACTOR_MEAN_TOLERANCE = 1e-5


@dataclass
class TurnBatch:
    """Each trajectory's turns, for a trainer that cannot pass them to the estimator (verl's). Rows in the order of
    the batch the estimator receives; `turn_ids[i]` covers row i's response tokens (-1 off turns), unpadded."""

    turn_ids: list[list[int]]
    step_factors: list[list[float]] = field(default_factory=list)
    anchor_keys: list[list[Hashable]] = field(default_factory=list)
    gigpo: dict = field(default_factory=dict)  # omega, gamma, mode

    def for_mask(self, response_mask: torch.Tensor) -> "TurnBatch":
        """The turn data the rows of `response_mask` can carry. verl pads a batch to a size its devices divide with
        copies of row 0 whose mask is all 0: such a row has no turns (empty ids, factors and anchors)."""
        rows = response_mask.shape[0]
        if len(self.turn_ids) != rows:
            raise ValueError(f"turn data for {len(self.turn_ids)} trajectories but the batch has {rows} rows")
        empty = [not bool(response_mask[row].any()) for row in range(rows)]

        def keep(values: list[list]) -> list[list]:
            return [[] if empty[row] else list(v) for row, v in enumerate(values)] if values else values

        return TurnBatch(keep(self.turn_ids), keep(self.step_factors), keep(self.anchor_keys), dict(self.gigpo))

    def turn_id_tensor(self, response_mask: torch.Tensor) -> torch.Tensor:
        """(bs, L) turn ids aligned with `response_mask`, padded with -1."""
        rows, width = response_mask.shape
        if len(self.turn_ids) != rows:
            raise ValueError(f"turn data for {len(self.turn_ids)} trajectories but the batch has {rows} rows")
        table = torch.full((rows, width), -1, dtype=torch.long)
        for row, ids in enumerate(self.turn_ids):
            if len(ids) > width:
                raise ValueError(f"trajectory {row}: {len(ids)} turn ids for a response of {width} tokens")
            table[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        return table

    def step_rewards(self, token_level_rewards: torch.Tensor) -> list[list[float]]:
        """The verifier's reward on the last turn, 0 on earlier ones (GiGPO's step rewards for outcome reward); one
        per anchor key, i.e. per turn of the trajectory."""
        totals = token_level_rewards.sum(dim=-1).tolist()
        turns = [len(keys) for keys in self.anchor_keys]
        return [[0.0] * (n - 1) + [float(total)] if n else [] for n, total in zip(turns, totals, strict=True)]


_ACTIVE_TURNS: ContextVar[TurnBatch | None] = ContextVar("depgpo_active_turns", default=None)


@contextmanager
def turn_batch(turns: TurnBatch) -> Iterator[TurnBatch]:
    """Make `turns` the turn data of estimator calls that do not pass their own (verl's trainer)."""
    token = _ACTIVE_TURNS.set(turns)
    try:
        yield turns
    finally:
        _ACTIVE_TURNS.reset(token)


def active_turns(estimator: str) -> TurnBatch:
    turns = _ACTIVE_TURNS.get()
    if turns is None:
        raise ValueError(f"the {estimator} estimator needs each trajectory's turns: pass turn_ids=... or call it "
                         f"inside depgpo.algos.advantages.turn_batch(...); with verl, run the trainer mode "
                         f"depgpo_sync (depgpo.train.verl_trainer)")
    return turns


def _config_value(config, key: str, default):
    return config.get(key, default) if config is not None and hasattr(config, "get") else default


def broadcast_turn_values(
    per_turn_values: Sequence[Sequence[float]], turn_ids: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Place `per_turn_values[i][t]` on every token of row `i` whose turn id is `t`; tokens with id -1 get 0."""
    batch_size = turn_ids.shape[0]
    if len(per_turn_values) != batch_size:
        raise ValueError(f"{len(per_turn_values)} per-turn lists for a batch of {batch_size} trajectories")
    max_turns = max((len(values) for values in per_turn_values), default=0)
    table = torch.zeros(batch_size, max(max_turns, 1), dtype=torch.float64)
    for row, values in enumerate(per_turn_values):
        turns_used = int(turn_ids[row].max().item()) + 1 if turn_ids.shape[1] else 0
        if turns_used > len(values):
            raise ValueError(f"trajectory {row} has tokens of turn {turns_used - 1} but only {len(values)} values")
        table[row, : len(values)] = torch.as_tensor(np.asarray(values, dtype=np.float64))
    on_turn = turn_ids >= 0
    token_values = table.gather(1, turn_ids.clamp(min=0).long()) * on_turn
    return token_values.to(dtype)


def compute_depgpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
    *,
    turn_ids: torch.Tensor | None = None,
    step_factors: Sequence[Sequence[float]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DepGPO: the trajectory's GRPO advantage times its turn's step factor, on every response token of the turn.

    `step_factors[i]` holds one non-negative factor per turn with mean 1 (docs/credit.md#advantage), so the mean over turns of the
    per-turn advantage equals GRPO's. Unit factors reproduce GRPO exactly; each ablation is only a different factor
    source. Without `turn_ids`, the turns and factors come from the active `TurnBatch` (verl's trainer).
    """
    if turn_ids is None:
        turns = active_turns("depgpo").for_mask(response_mask)
        turn_ids, step_factors = turns.turn_id_tensor(response_mask), turns.step_factors
        norm_adv_by_std_in_grpo = _config_value(config, "norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo)
    _check_turn_ids(turn_ids, response_mask)
    for row, factors in enumerate(step_factors):
        _check_step_factors(row, factors)
    grpo = grpo_advantage(token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo)
    advantages = grpo * broadcast_turn_values(step_factors, turn_ids, dtype=grpo.dtype)
    return advantages, advantages


def compute_gigpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config=None,
    *,
    turn_ids: torch.Tensor | None = None,
    anchor_keys: Sequence[Sequence[Hashable]] | None = None,
    step_rewards: Sequence[Sequence[float]] | None = None,
    omega: float = 1.0,
    gamma: float = 0.95,
    mode: str = "mean_norm",
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO (arXiv 2505.10978, Eq. 8): episode advantage + omega x anchor-state step advantage.

    The episode advantage is verl's GRPO advantage (each trajectory counts once; `mode` "mean_norm" subtracts the
    group mean, "mean_std_norm" also divides by the std). The step advantage of turn t is its discounted return
    (`gamma`, Eq. 5) normalised the same way among all turns of the same task group that acted on the same anchor
    state (`anchor_keys[i][t]`, e.g. a hash of the observation the turn saw); a state seen once contributes 0.
    Without `turn_ids`, turns, anchors and settings come from the active `TurnBatch` (verl's trainer).
    """
    if turn_ids is None:
        turns = active_turns("gigpo").for_mask(response_mask)
        turn_ids, anchor_keys = turns.turn_id_tensor(response_mask), turns.anchor_keys
        step_rewards = turns.step_rewards(token_level_rewards)
        omega, gamma = turns.gigpo.get("omega", omega), turns.gigpo.get("gamma", gamma)
        mode = turns.gigpo.get("mode", mode)
    if mode not in GIGPO_MODES:
        raise ValueError(f"unknown GiGPO mode {mode!r}; valid: {', '.join(GIGPO_MODES)}")
    _check_turn_ids(turn_ids, response_mask)
    if len(anchor_keys) != len(step_rewards):
        raise ValueError(f"{len(anchor_keys)} anchor-key lists but {len(step_rewards)} step-reward lists")
    for row, (keys, rewards) in enumerate(zip(anchor_keys, step_rewards, strict=True)):
        if len(keys) != len(rewards):
            raise ValueError(f"trajectory {row}: {len(keys)} anchor keys but {len(rewards)} step rewards")
    normalise_by_std = mode == "mean_std_norm"
    episode = grpo_advantage(token_level_rewards, response_mask, index, epsilon, normalise_by_std)
    step_returns = [discounted_returns(rewards, gamma) for rewards in step_rewards]
    step = anchor_group_advantages(index, anchor_keys, step_returns, normalise_by_std, epsilon)
    advantages = episode + omega * broadcast_turn_values(step, turn_ids, dtype=episode.dtype)
    return advantages, advantages


def compute_advantage(name: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                      norm_adv_by_std: bool, turns: TurnBatch | None = None) -> torch.Tensor:
    """The advantage of the estimator registered in verl as `name`, called as verl's `compute_advantage` calls it
    (verl.trainer.ppo.ray_trainer): GRPO with `norm_adv_by_std_in_grpo`, every other estimator with the algorithm
    config, inside `turn_batch(turns)` for the turn-level ones (depgpo.algos.methods)."""
    import depgpo.algos.verl_registry  # noqa: F401  (registers the declared estimators)
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    function = get_adv_estimator_fn(name)
    common = {"token_level_rewards": token_level_rewards, "response_mask": response_mask, "index": index}
    if name == "grpo":
        return function(**common, norm_adv_by_std_in_grpo=norm_adv_by_std)[0]
    config = {"norm_adv_by_std_in_grpo": norm_adv_by_std}
    if turns is None:
        return function(**common, config=config)[0]
    with turn_batch(turns):
        return function(**common, config=config)[0]


def discounted_returns(step_rewards: Sequence[float], gamma: float) -> list[float]:
    """R_t = sum_k gamma^k r_{t+k} within one trajectory (GiGPO Eq. 5)."""
    returns = [0.0] * len(step_rewards)
    running = 0.0
    for t in reversed(range(len(step_rewards))):
        running = float(step_rewards[t]) + gamma * running
        returns[t] = running
    return returns


def anchor_group_advantages(
    index: np.ndarray,
    anchor_keys: Sequence[Sequence[Hashable]],
    step_returns: Sequence[Sequence[float]],
    normalise_by_std: bool,
    epsilon: float = 1e-6,
) -> list[list[float]]:
    """Normalise each turn's return within its step group: same task group and same anchor key (GiGPO Eq. 6-7).

    The std is the sample std, as torch.std in GiGPO's reference code; a group of one turn gets 0.
    """
    groups: dict[tuple, list[float]] = defaultdict(list)
    for group_id, keys, returns in zip(index, anchor_keys, step_returns, strict=True):
        for key, value in zip(keys, returns, strict=True):
            groups[(group_id, key)].append(value)

    def normalised(group_id, key, value: float) -> float:
        members = groups[(group_id, key)]
        if len(members) == 1:
            return 0.0
        centred = value - statistics.fmean(members)
        return centred / (statistics.stdev(members) + epsilon) if normalise_by_std else centred

    return [
        [normalised(group_id, key, value) for key, value in zip(keys, returns, strict=True)]
        for group_id, keys, returns in zip(index, anchor_keys, step_returns, strict=True)
    ]


def grpo_advantage(token_level_rewards, response_mask, index, epsilon, norm_adv_by_std) -> torch.Tensor:
    """verl's own GRPO outcome advantage (bs, L): the base of DepGPO and GiGPO's episode term."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std,
    )
    return advantages


def _check_turn_ids(turn_ids: torch.Tensor, response_mask: torch.Tensor) -> None:
    if turn_ids.shape != response_mask.shape:
        raise ValueError(f"turn_ids shape {tuple(turn_ids.shape)} != response_mask shape {tuple(response_mask.shape)}")
    # A response token without a turn (or an observation token with one) means the spans were recorded wrongly.
    if not torch.equal(turn_ids >= 0, response_mask.bool()):
        raise ValueError("turn_ids must be >= 0 exactly on response tokens (response_mask == 1) and -1 elsewhere")


def _check_step_factors(row: int, factors: Sequence[float]) -> None:
    if len(factors) == 0:
        return
    values = [float(f) for f in factors]
    if not all(math.isfinite(f) and f >= 0 for f in values):
        raise ValueError(f"trajectory {row}: step factors must be finite and >= 0, got {values}")
    mean = statistics.fmean(values)
    if abs(mean - 1.0) > FACTOR_MEAN_TOLERANCE:
        raise ValueError(f"trajectory {row}: step factors must have mean 1 over the turns, got mean {mean}")
