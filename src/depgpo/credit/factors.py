"""Turn credit and step factors (docs/credit.md#step-factors), with the Table 4 fallbacks to unit factors.

A fallback reason is "<category>" or "<category>: <detail>"; the category alone goes into the diagnostics so
that per-update counts stay few and stable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from depgpo.credit.config import CreditConfig
from depgpo.trajectory.schema import MAX_TURNS

# Table 4 fallback categories.
NO_STEPS = "no step information"
MODULE_OFF = "credit module off"
MISSING_TRACE = "missing trace"
EMPTY_OUTPUT = "empty command-credit output"
NO_POSITIVE_TURN = "no turn has positive credit"
EQUAL_CREDIT = "equal credit on every turn"
EXCEPTION = "exception"



def fallback_category(reason: str | None) -> str | None:
    return None if reason is None else reason.split(":", 1)[0]


def turn_credit(turns: Sequence[int], credits: Sequence[float], num_turns: int) -> list[float]:
    """q_t = max of q(c) over the commands of turn t; 0 for a turn without commands."""
    per_turn = [0.0] * num_turns
    for turn, credit in zip(turns, credits, strict=True):
        per_turn[turn] = max(per_turn[turn], credit)
    return per_turn


def step_factors(per_turn: Sequence[float], config: CreditConfig) -> tuple[list[float], str | None]:
    """f_t = (α + q̃_t) / mean(α + q̃), whose mean over the turns is 1; unit factors and a reason when the credit
    cannot tell the turns apart."""
    if not any(credit > 0 for credit in per_turn):
        return unit_factors(len(per_turn)), NO_POSITIVE_TURN
    low, high = min(per_turn), max(per_turn)
    if high - low <= config.min_credit_range:
        return unit_factors(len(per_turn)), EQUAL_CREDIT
    if config.factor_scale == "range":
        scaled = [(credit - low) / (high - low) for credit in per_turn]
    else:
        scaled = [credit / high for credit in per_turn]
    weights = [config.factor_floor + value for value in scaled]
    mean = math.fsum(weights) / len(weights)
    return [weight / mean for weight in weights], None


def unit_factors(num_turns: int) -> list[float]:
    return [1.0] * num_turns


def turn_count_hint(trajectory: Any, num_turns: Any) -> int:
    """The number of turns for unit factors when the trajectory itself may be unusable: `num_turns` when valid,
    else one more than the largest integer turn among the commands, else 0 (also beyond MAX_TURNS). Never raises."""
    if isinstance(num_turns, int) and not isinstance(num_turns, bool) and 0 <= num_turns <= MAX_TURNS:
        return num_turns
    commands = trajectory.get("commands") if isinstance(trajectory, dict) else None
    if not isinstance(commands, list):
        return 0
    turns = [command.get("turn") for command in commands if isinstance(command, dict)]
    count = max((turn + 1 for turn in turns if isinstance(turn, int) and not isinstance(turn, bool) and turn >= 0),
                default=0)
    return count if count <= MAX_TURNS else 0
