"""Per-update training metrics: the diagnostics of the paper's Figure 5 / Table 8 and the Table 11 counters."""

import numbers
import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence

import torch

from depgpo.algos.dapo import informative_trajectory_mask


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the policy's next-token distribution at every position: (bs, L, V) -> (bs, L)."""
    return torch.distributions.Categorical(logits=logits.float()).entropy()


def masked_mean(values: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Mean of per-token `values` over the generated (response_mask == 1) tokens of the batch: the policy entropy
    the trainer logs, from token_entropy's values."""
    mask = response_mask.float()
    return float((values * mask).sum() / mask.sum().clamp(min=1))


def gradient_norm(parameters: Iterable[torch.nn.Parameter]) -> float:
    """Global L2 norm of the gradients (call after backward, before clipping and the optimizer step)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


def zero_advantage_group_fraction(group_ids: Sequence[Hashable], rewards: Sequence[float]) -> float:
    """Fraction of task groups whose trajectories all scored the same, so GRPO gives them zero advantage."""
    informative = informative_trajectory_mask(group_ids, rewards)
    status = {group_id: bool(keep) for group_id, keep in zip(group_ids, informative, strict=True)}
    return sum(not keep for keep in status.values()) / len(status)


def step_factor_std(step_factors: Sequence[Sequence[float]]) -> float:
    """Mean over trajectories of the std of their step factors across turns (Figure 5d); fallbacks count as 0."""
    return statistics.fmean(statistics.pstdev(map(float, factors)) if len(factors) else 0.0 for factors in step_factors)


def mean_credit_diagnostics(diagnostics: Sequence[Mapping]) -> dict[str, float]:
    """Mean of each per-trajectory credit diagnostic (Table 11), over the trajectories that report it.

    Numbers and booleans are averaged (a boolean becomes a rate). A text field such as the fallback reason becomes
    the rate of each of its values, "key=value", among the trajectories that have the key (None included, so a
    reason left None on usable trajectories still counts them). Other values (lists, records) are skipped.
    """
    numeric: dict[str, list[float]] = defaultdict(list)
    labels: dict[str, Counter] = defaultdict(Counter)
    reporting: Counter = Counter()
    for record in diagnostics:
        for key, value in record.items():
            reporting[key] += 1
            if isinstance(value, numbers.Real):  # bool and numpy scalars included
                numeric[key].append(float(value))
            elif isinstance(value, str):
                labels[key][value] += 1
    means = {f"credit/{key}": statistics.fmean(values) for key, values in numeric.items()}
    for key, counts in labels.items():
        means.update({f"credit/{key}={label}": count / reporting[key] for label, count in counts.items()})
    return means


def update_metrics(
    *,
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    entropy: float,
    grad_norm: float,
    step_factors: Sequence[Sequence[float]] | None = None,
    credit_diagnostics: Sequence[Mapping] | None = None,
) -> dict[str, float]:
    """All metrics of one policy update; the DepGPO ones only when factors / diagnostics are given."""
    metrics = {
        "train/reward_mean": statistics.fmean(float(r) for r in rewards),
        "train/zero_adv_group_frac": zero_advantage_group_fraction(group_ids, rewards),
        "actor/entropy": float(entropy),
        "actor/grad_norm": float(grad_norm),
    }
    if step_factors is not None:
        metrics["depgpo/step_factor_std"] = step_factor_std(step_factors)
    if credit_diagnostics:
        metrics.update(mean_credit_diagnostics(credit_diagnostics))
    return metrics


def episode_health(trajectories: Sequence[Mapping]) -> dict[str, float]:
    """Fractions of a batch's episodes whose verifier ran agent-planted code (env/judging/tampering.py; scored as
    agent.environment.tampering says) and that a harness failure ended (reward 0)."""
    verifiers = [t.get("verifier") or {} for t in trajectories]
    n = max(len(verifiers), 1)
    return {"env/tampered_frac": sum(bool(v.get("tampering")) for v in verifiers) / n,
            "env/harness_failed_frac": sum(v.get("reward_source") == "error" and "harness" in str(v.get("error"))
                                           for v in verifiers) / n}
