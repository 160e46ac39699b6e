"""Registers the declared advantage estimators (depgpo.algos.methods) in verl's registry; import it to do so.

verl's `register_adv_est` accepts a name again only for the very same function, and the functions live in their
own modules, so re-importing or reloading this module is harmless. Afterwards
`verl.trainer.ppo.core_algos.get_adv_estimator_fn("depgpo")` resolves. Turn-level estimators read each trajectory's
turns from the active `TurnBatch` (`turn_batch`, depgpo.algos.advantages), which both trainers set around the call.
"""

from verl.trainer.ppo.core_algos import register_adv_est

from depgpo.algos.advantages import TurnBatch, turn_batch
from depgpo.algos.methods import estimators

__all__ = ["TurnBatch", "register_all", "turn_batch"]


def register_all() -> None:
    """Register every declared estimator that verl does not have yet (plugins included)."""
    for name, declared in estimators().items():
        function = declared.resolve()
        if function is not None:
            register_adv_est(name)(function)


register_all()
