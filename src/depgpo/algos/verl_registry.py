"""Registers the "depgpo" and "gigpo" advantage estimators in verl's registry; importing this module is enough.

verl's `register_adv_est` accepts a name again only for the very same function, and the functions live in
`advantages`, so re-importing or reloading this module is harmless. Afterwards
`verl.trainer.ppo.core_algos.get_adv_estimator_fn("depgpo")` resolves. The estimators need the turn data as extra
keyword arguments (see `advantages`), which our local trainer passes; under verl's own `compute_advantage` they
come from the `TurnBatch` that `depgpo.train.verl_trainer` activates (`turn_batch`).
"""

from verl.trainer.ppo.core_algos import register_adv_est

from depgpo.algos.advantages import TurnBatch, compute_depgpo_advantage, compute_gigpo_advantage, turn_batch

ESTIMATORS = {"depgpo": compute_depgpo_advantage, "gigpo": compute_gigpo_advantage}
TURN_LEVEL_ESTIMATORS = tuple(ESTIMATORS)  # the estimators that need each trajectory's turns

__all__ = ["ESTIMATORS", "TURN_LEVEL_ESTIMATORS", "TurnBatch", "turn_batch"]

for _name, _estimator in ESTIMATORS.items():
    register_adv_est(_name)(_estimator)
