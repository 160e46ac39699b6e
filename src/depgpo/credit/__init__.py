"""Dependency-aware credit assignment (docs/credit.md): from one traced trajectory
(docs/trajectory-schema.md) to one step factor per model turn.

The stages, one module each:
  records       what every command read and wrote in the tracked scope, the verifier records E, the final state
  write_credit  survival, direct contribution, the write-reachability graph G_E, Contrib (docs/credit.md#write-credit)
  read_credit   salient tokens, information edges, info and q (docs/credit.md#read-credit)
  factors       turn credit q_t, step factors and the Table 4 fallbacks (docs/credit.md#step-factors)
  explain       each command's role, diagnostics (docs/credit.md#diagnostics), table / JSON / graph rendering
  cli           `depgpo credit TRAJ...`

`compute_credit` raises `TrajectoryError` on a trajectory it cannot read; `credit_with_fallback` (what the agent loop
calls as each RL rollout ends, depgpo.agent.loop.assign_credit) never raises and falls back to unit factors with a
reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from depgpo.credit.config import VARIANTS, CreditConfig
from depgpo.credit.explain import aggregate_diagnostics, command_role, trajectory_diagnostics
from depgpo.credit.factors import (
    EMPTY_OUTPUT, EXCEPTION, MISSING_TRACE, MODULE_OFF, NO_STEPS, fallback_category, step_factors, turn_count_hint,
    turn_credit, unit_factors,
)
from depgpo.credit.read_credit import read_credit
from depgpo.credit.records import EpisodeRecords, TrajectoryError, parse_episode
from depgpo.credit.write_credit import verifier_records, write_credit
from depgpo.trajectory.schema import MAX_TURNS

__all__ = [
    "VARIANTS", "CommandCredit", "CreditConfig", "CreditResult", "TrajectoryError", "aggregate_diagnostics",
    "compute_credit", "credit_with_fallback", "step_factors_for",
]


@dataclass(frozen=True)
class CommandCredit:
    index: int
    turn: int
    text: str
    is_write: bool  # member of C_w
    role: str  # one of explain.ROLES
    direct: float
    indirect: float
    info: float
    q: float  # q(c) = max(direct, indirect, info)


@dataclass
class CreditResult:
    commands: list[CommandCredit]  # empty when a fallback fired before credit was computed
    turn_credit: list[float]  # q_t per turn
    step_factors: list[float]  # f_t per turn, mean 1
    fallback: str | None  # Table 4 reason for unit factors, None when the credit was used
    diagnostics: dict
    # The dependency graph, for explanation: E, write -> E edges with survival, the edges of G (those into write
    # commands form G_E), information edges.
    verifier_records: list[str] = field(default_factory=list)
    verifier_edges: list[tuple[int, str, float]] = field(default_factory=list)
    dependency_edges: list[tuple[int, int]] = field(default_factory=list)
    information_edges: list[tuple[int, int]] = field(default_factory=list)


def compute_credit(trajectory: dict, config: CreditConfig = CreditConfig(),
                   num_turns: int | None = None) -> CreditResult:
    """Credit of every command and step factor of every turn. Turns come from `commands[].turn`; pass `num_turns`
    when the trajectory has later turns without a command. Raises TrajectoryError on an unreadable trajectory."""
    started = time.perf_counter()
    if not config.enabled:
        return _fallback_result(trajectory, num_turns, MODULE_OFF, config.variant, started)
    episode = parse_episode(trajectory, config, num_turns)
    reason = _missing_input(episode, config, trajectory.get("source") == "static")
    if reason is not None:
        return _fallback_result(trajectory, episode.num_turns, reason, config.variant, started, episode)
    verifier = verifier_records(episode, config)
    writes = write_credit(episode, verifier, config)
    reads = read_credit(episode, writes.contrib, config, writes.dependency_edges)
    has_sources = {reader for _, reader in writes.dependency_edges}
    commands = [
        CommandCredit(
            index=command.index, turn=command.turn, text=command.text, is_write=command.is_write,
            role=command_role(command, writes.direct[i], writes.indirect[i], reads.info[i], reads.q[i],
                              writes.deleted_later[i], i in has_sources),
            direct=writes.direct[i], indirect=writes.indirect[i], info=reads.info[i], q=reads.q[i],
        )
        for i, command in enumerate(episode.commands)
    ]
    per_turn = turn_credit([command.turn for command in episode.commands], reads.q, episode.num_turns)
    factors, fallback = step_factors(per_turn, config)
    return CreditResult(
        commands=commands,
        turn_credit=per_turn,
        step_factors=factors,
        fallback=fallback,
        diagnostics=trajectory_diagnostics(commands, len(commands), factors, fallback, episode.verifier_source,
                                           config.variant, started),
        verifier_records=list(verifier),
        verifier_edges=writes.verifier_edges,
        dependency_edges=writes.dependency_edges,
        information_edges=reads.information_edges,
    )


def credit_with_fallback(trajectory: Any, config: CreditConfig = CreditConfig(),
                         num_turns: int | None = None) -> CreditResult:
    """`compute_credit` that never raises: an unreadable trajectory or any error gives unit factors and the reason
    (Table 4: missing trace, or the exception)."""
    started = time.perf_counter()
    variant = getattr(config, "variant", None)
    try:
        return compute_credit(trajectory, config, num_turns)
    except TrajectoryError as error:
        return _fallback_result(trajectory, num_turns, f"{MISSING_TRACE}: {error}", variant, started)
    except Exception as error:  # noqa: BLE001 - the trainer must get factors whatever the input holds
        reason = f"{EXCEPTION}: {type(error).__name__}: {error}"
        return _fallback_result(trajectory, num_turns, reason, variant, started)


def step_factors_for(trajectory: Any, config: CreditConfig = CreditConfig(),
                     num_turns: int | None = None) -> tuple[list[float], str | None]:
    """Step factors for the trainer, one per turn, and the fallback reason (None when the credit was used). A
    trajectory the credit cannot read gets unit factors and the reason; ValueError only when the number of factors
    is unknown: `num_turns` is not a turn count, or it is not given and the trajectory does not tell (so a `zip`
    over the turns never drops them silently)."""
    if num_turns is not None and (isinstance(num_turns, bool) or not isinstance(num_turns, int)
                                  or not 0 <= num_turns <= MAX_TURNS):
        raise ValueError(f"step_factors_for: num_turns={num_turns!r}: expected the rollout's number of model turns, "
                         f"an integer in [0, {MAX_TURNS}], or None to count them from the trajectory")
    result = credit_with_fallback(trajectory, config, num_turns)
    if num_turns is None and not result.step_factors and fallback_category(result.fallback) in (MISSING_TRACE,
                                                                                                EXCEPTION):
        raise ValueError(f"step_factors_for: the trajectory cannot be read ({result.fallback}) and num_turns is not "
                         "given, so the number of turns is unknown; pass num_turns=N (the rollout's model turns) "
                         "for N unit factors, or a trajectory.json (docs/trajectory-schema.md)")
    return result.step_factors, result.fallback


def _missing_input(episode: EpisodeRecords, config: CreditConfig, offline: bool = False) -> str | None:
    if episode.num_turns == 0:
        return NO_STEPS
    if episode.verifier_source == "none" and config.variant != "no_verifier_filter":
        if offline:  # a log read offline never had a verifier trace: E could only come from its text
            return (f"{MISSING_TRACE}: no verifier records (verifier.E_source is none): an offline log has no "
                    "verifier trace, and its task text names no file, path or port")
        return f"{MISSING_TRACE}: the verifier's records were not captured (verifier.E_source is none)"
    if not episode.commands:
        return f"{EMPTY_OUTPUT}: the trajectory has no commands"
    return None


def _fallback_result(trajectory: Any, num_turns: Any, reason: str, variant: str | None, started: float,
                     episode: EpisodeRecords | None = None) -> CreditResult:
    turns = turn_count_hint(trajectory, num_turns)
    commands = trajectory.get("commands") if isinstance(trajectory, dict) else None
    source = episode.verifier_source if episode is not None else None
    factors = unit_factors(turns)
    return CreditResult(
        commands=[],
        turn_credit=[0.0] * turns,
        step_factors=factors,
        fallback=reason,
        diagnostics=trajectory_diagnostics([], len(commands) if isinstance(commands, list) else 0, factors,
                                           reason, source, variant, started),
    )
