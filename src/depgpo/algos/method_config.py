"""Checks a composed config against the compared methods (config/method/*.yaml, config/ablation/*.yaml).

Hydra already rejects `method=<unknown>`; this catches what group selection cannot: a hand-edited `method.name`,
an estimator or loss that does not belong to the method, or a credit ablation on a method without credit.
"""

from collections.abc import Mapping

from depgpo.algos.advantages import GIGPO_MODES
from depgpo.algos.losses import POLICY_LOSSES
from depgpo.credit.config import VARIANTS as CREDIT_VARIANTS  # the full method and the Table 2 ablations

# method name -> the advantage estimator its config must select
METHOD_ESTIMATORS = {"grpo": "grpo", "dapo": "grpo", "dppo": "grpo", "gigpo": "gigpo", "depgpo": "depgpo"}


def validate_method_config(cfg: Mapping) -> None:
    """Raise ValueError naming the valid choices when the method-related keys of `cfg` are inconsistent."""
    name = cfg["method"]["name"]
    if name not in METHOD_ESTIMATORS:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(sorted(METHOD_ESTIMATORS))}")
    algorithm, actor, credit = cfg["algorithm"], cfg["actor"], cfg["credit"]
    expected = METHOD_ESTIMATORS[name]
    if algorithm["adv_estimator"] != expected:
        raise ValueError(f"method {name!r} uses adv_estimator {expected!r}, got {algorithm['adv_estimator']!r}")
    if actor["policy_loss"] not in POLICY_LOSSES:
        raise ValueError(f"unknown actor.policy_loss {actor['policy_loss']!r}; valid: {', '.join(POLICY_LOSSES)}")
    gigpo_mode = algorithm["gigpo"]["mode"]
    if gigpo_mode not in GIGPO_MODES:
        raise ValueError(f"unknown algorithm.gigpo.mode {gigpo_mode!r}; valid: {', '.join(GIGPO_MODES)}")
    if credit["variant"] not in CREDIT_VARIANTS:
        raise ValueError(f"unknown credit.variant {credit['variant']!r}; valid: {', '.join(CREDIT_VARIANTS)}")
    if credit["variant"] != "full" and name != "depgpo":
        raise ValueError(f"credit ablation {credit['variant']!r} only applies to method 'depgpo', not {name!r}")
