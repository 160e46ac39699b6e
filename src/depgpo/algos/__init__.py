"""RL algorithms: per-token advantages (GRPO, DepGPO, GiGPO), DAPO batch rules, policy losses, update metrics.

Modules: `methods` (every compared method and estimator, declared once; docs/extending.md), `advantages`, `dapo`,
`losses`, `metrics`, `method_config` (the config groups checked against the declarations) and `verl_registry`
(import it to register the declared estimators with verl). Only `losses`, `verl_registry` and the estimator calls
inside `advantages` import verl, and they do it on use.
"""
