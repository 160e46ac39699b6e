"""Registers the "depgpo" and "gigpo" advantage estimators in verl's registry; importing this module is enough.

verl's `register_adv_est` accepts a name again only for the very same function, and the functions live in
`advantages`, so re-importing or reloading this module is harmless. Afterwards
`verl.trainer.ppo.core_algos.get_adv_estimator_fn("depgpo")` resolves. The estimators need the turn data as extra
keyword arguments (see `advantages`), which the trainer passes; verl's stock `compute_advantage` does not.
"""

from verl.trainer.ppo.core_algos import register_adv_est

from depgpo.algos.advantages import compute_depgpo_advantage, compute_gigpo_advantage

ESTIMATORS = {"depgpo": compute_depgpo_advantage, "gigpo": compute_gigpo_advantage}

for _name, _estimator in ESTIMATORS.items():
    register_adv_est(_name)(_estimator)
