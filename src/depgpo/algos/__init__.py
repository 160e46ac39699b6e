"""RL algorithms: per-token advantages (GRPO, DepGPO, GiGPO), DAPO batch rules, policy losses, update metrics.

Modules: `advantages`, `dapo`, `losses`, `metrics`, `method_config` (validation of the method/ablation config
groups) and `verl_registry` (import it to register "depgpo" and "gigpo" with verl). Only `losses`,
`verl_registry` and the GRPO call inside `advantages` import verl, and they do it on use.
"""
