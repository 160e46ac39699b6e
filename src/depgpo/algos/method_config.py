"""The compared methods (config/method/*.yaml, config/ablation/*.yaml) and what their keys must agree on.

Hydra already rejects `method=<unknown>`, and depgpo.config.validate_values the value of each key alone (method.name,
actor.policy_loss, credit.variant, ...); this finds what neither can: an estimator that does not belong to the method,
or a credit ablation on a method without credit. depgpo.config.validate raises the problem as its ConfigError.
"""

from collections.abc import Mapping

# method name -> the advantage estimator its config must select
METHOD_ESTIMATORS = {"grpo": "grpo", "dapo": "grpo", "dppo": "grpo", "gigpo": "gigpo", "depgpo": "depgpo"}


def method_config_problem(cfg: Mapping) -> str | None:
    """Why the method-related keys of `cfg` disagree, in one line naming the key, the valid choice and the fix;
    None when they agree."""
    name = cfg["method"]["name"]
    if name not in METHOD_ESTIMATORS:
        return f"method.name={name!r} is not one of {', '.join(METHOD_ESTIMATORS)}; select the method with method=NAME"
    estimator, variant = cfg["algorithm"]["adv_estimator"], cfg["credit"]["variant"]
    if estimator != METHOD_ESTIMATORS[name]:
        return (f"algorithm.adv_estimator={estimator!r}: method {name!r} uses adv_estimator "
                f"{METHOD_ESTIMATORS[name]!r}; drop the override or select another method")
    if variant != "full" and name != "depgpo":
        return (f"credit.variant={variant!r}: a credit ablation only applies to method 'depgpo', not {name!r}; "
                "use method=depgpo or ablation=none")
    return None
