"""What the method-related keys of a composed config must agree on, read from the declarations (depgpo.algos.methods).

Hydra already rejects `method=<unknown>`, and depgpo.config.validate_values the value of each key alone (method.name,
actor.policy_loss, credit.variant, ...); this finds what neither can: an estimator that does not belong to the method,
or a credit ablation on a method without credit. depgpo.config.validate raises the problem as its ConfigError.
"""

from collections.abc import Mapping

from depgpo.algos.methods import methods


def method_estimators() -> dict[str, str]:
    """method name -> the advantage estimator its config must select"""
    return {name: declared.estimator for name, declared in methods().items()}


def method_config_problem(cfg: Mapping) -> str | None:
    """Why the method-related keys of `cfg` disagree, in one line naming the key, the valid choice and the fix;
    None when they agree."""
    name, declared = cfg["method"]["name"], methods()
    if name not in declared:
        return (f"method.name={name!r} is not one of {', '.join(declared)}; select the method with method=NAME "
                "(a new method is declared in depgpo.algos.methods, docs/extending.md)")
    estimator, variant = cfg["algorithm"]["adv_estimator"], cfg["credit"]["variant"]
    if estimator != declared[name].estimator:
        return (f"algorithm.adv_estimator={estimator!r}: method {name!r} uses adv_estimator "
                f"{declared[name].estimator!r}; drop the override or select another method")
    if variant != "full" and not declared[name].credit_ablations:
        ablated = [n for n, m in declared.items() if m.credit_ablations]
        return (f"credit.variant={variant!r}: a credit ablation only applies to method {' or '.join(map(repr, ablated))},"
                f" not {name!r}; use method={ablated[0]} or ablation=none")
    return None
