"""The compared methods and their advantage estimators, each declared once (docs/extending.md).

A `Method` is what a run is: its name (config/method/NAME.yaml selects it, run directories and report rows carry
it), its label and colour in tables and figures, its report order, and the advantage estimator its config must
select. How it samples (DAPO's dynamic sampling and overlong shaping) and which policy loss it uses are config keys
of its config/method file, as verl reads them (`algorithm.filter_groups`, `algorithm.overlong`, `actor.policy_loss`);
`config_problem` checks the file against the declaration. An `Estimator` is a function with verl's estimator
signature and the per-turn inputs it reads from the active `TurnBatch` (depgpo.algos.advantages); the local trainer
and verl's trainer both call it the same way (`depgpo.train.rl`, `depgpo.train.verl_trainer`).

Everything here is read on use, so another package can add a method without editing this one: a module listed
under the `depgpo.methods` entry-point group (or in the `DEPGPO_PLUGINS` environment variable, comma-separated) is
imported the first time the registry is read, and calls `register_method` / `register_estimator`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

# What an estimator can read from the active TurnBatch besides verl's own inputs (rewards, mask, group index).
TURN_INPUTS = ("step_factors", "anchor_keys")
PLUGIN_GROUP = "depgpo.methods"
PLUGIN_ENV = "DEPGPO_PLUGINS"


@dataclass(frozen=True)
class Estimator:
    name: str                       # algorithm.adv_estimator, and its name in verl's registry
    function: Callable | str | None  # verl's signature, or "module:name" of it (imported on use: torch stays
    #                                  unloaded until an estimator runs); None: verl's own estimator of that name
    turn_inputs: tuple[str, ...] = ()  # what it reads per turn: the trainers build a TurnBatch with these

    def __post_init__(self) -> None:
        unknown = set(self.turn_inputs) - set(TURN_INPUTS)
        if unknown:
            raise ValueError(f"estimator {self.name!r}: unknown turn inputs {sorted(unknown)}; valid: {TURN_INPUTS}")

    @property
    def turn_level(self) -> bool:
        return bool(self.turn_inputs)

    def resolve(self) -> Callable | None:
        if isinstance(self.function, str):
            module, _, name = self.function.partition(":")
            return getattr(importlib.import_module(module), name)
        return self.function


@dataclass(frozen=True)
class Method:
    name: str
    label: str                      # in tables and figures
    estimator: str = "grpo"         # the Estimator its config selects
    color: str = "tab:gray"         # its curves in figures
    training_curve: int | None = None  # its place in Figure 5's training panels (None: not drawn)
    credit_ablations: bool = False  # config/ablation/* (credit.variant) apply to it


_METHODS: dict[str, Method] = {}
_ESTIMATORS: dict[str, Estimator] = {}
_plugins_loaded = False


def register_estimator(estimator: Estimator) -> Estimator:
    """Add an estimator (registering it in verl happens in depgpo.algos.verl_registry, on use)."""
    if estimator.name in _ESTIMATORS and _ESTIMATORS[estimator.name] != estimator:
        raise ValueError(f"estimator {estimator.name!r} is declared twice, differently")
    _ESTIMATORS[estimator.name] = estimator
    return estimator


def register_method(method: Method) -> Method:
    """Add a method; its report order is the order of registration."""
    if method.name in _METHODS and _METHODS[method.name] != method:
        raise ValueError(f"method {method.name!r} is declared twice, differently")
    _METHODS[method.name] = method
    return method


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry in entry_points(group=PLUGIN_GROUP):
        entry.load()
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGIN_ENV, "").split(","))):
        importlib.import_module(module)


def methods() -> dict[str, Method]:
    """Every declared method, in report order."""
    _load_plugins()
    return dict(_METHODS)


def estimators() -> dict[str, Estimator]:
    _load_plugins()
    return dict(_ESTIMATORS)


def method(name: str) -> Method:
    known = methods()
    if name not in known:
        raise KeyError(f"method {name!r} is not declared; known: {', '.join(known)} (depgpo.algos.methods)")
    return known[name]


def estimator(name: str) -> Estimator:
    known = estimators()
    if name not in known:
        raise KeyError(f"estimator {name!r} is not declared; known: {', '.join(known)} (depgpo.algos.methods)")
    return known[name]


def _builtin() -> None:
    register_estimator(Estimator("grpo", None))
    register_estimator(Estimator("depgpo", "depgpo.algos.advantages:compute_depgpo_advantage", ("step_factors",)))
    register_estimator(Estimator("gigpo", "depgpo.algos.advantages:compute_gigpo_advantage", ("anchor_keys",)))
    # GRPO, DAPO and DPPO share the GRPO advantage; they differ in sampling and loss (their config files).
    register_method(Method("grpo", "GRPO", color="tab:pink", training_curve=1))
    register_method(Method("dapo", "DAPO", color="tab:purple"))
    register_method(Method("dppo", "DPPO", color="tab:brown"))
    register_method(Method("gigpo", "GiGPO", "gigpo", color="tab:olive", training_curve=2))
    register_method(Method("depgpo", "DepGPO", "depgpo", color="tab:blue", training_curve=0,
                           credit_ablations=True))


_builtin()
