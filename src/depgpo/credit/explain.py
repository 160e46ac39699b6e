"""What a credit result means: each command's role (the wording of the paper's Tables 12-14), the diagnostics of
docs/credit.md#diagnostics (Table 11), and renderings for people: a table and a JSON object (the dependency-graph
figure of Figures 2-4 is credit.graph_figure).
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from depgpo.credit.factors import fallback_category

if TYPE_CHECKING:
    from depgpo.credit import CommandCredit, CreditResult
    from depgpo.credit.config import CreditConfig
    from depgpo.credit.records import Command

ROLES = (
    "direct write",  # its own surviving output reaches E
    "indirect write",  # a later credited write used its output (Table 13 t3)
    "supporting read",  # showed the agent what a credited command used (Table 12 t17)
    "deleted before contribution",  # a later command deleted what it wrote (Table 14 t4)
    "no credited output",  # wrote, but nothing of it reaches E (Table 14 t6)
    "read with no downstream use",  # read what an earlier command wrote, nothing credited used it (Table 12 t19)
    "no recorded dependency",  # no edge in the dependency graph at all (Table 13 t2)
)


def command_role(command: Command, direct: float, indirect: float, info: float, q: float,
                 deleted_later: bool, read_agent_output: bool) -> str:
    """The role named by whichever of direct, indirect and info gives q(c) (a tie goes to the write)."""
    if q > 0:
        if max(direct, indirect) >= info:
            return "direct write" if direct >= indirect else "indirect write"
        return "supporting read"
    if command.is_write:
        return "deleted before contribution" if deleted_later else "no credited output"
    return "read with no downstream use" if read_agent_output else "no recorded dependency"


# ---- diagnostics (docs/credit.md#diagnostics) -------------------------------------------------------------------------------------

def trajectory_diagnostics(commands: Sequence[CommandCredit], num_commands: int, factors: Sequence[float],
                           fallback: str | None, verifier_source: str | None, variant: str | None,
                           started: float) -> dict:
    """Per-trajectory counters; `commands` is empty when a fallback fired before any credit was computed."""
    writes = [command for command in commands if command.is_write]
    reads = [command for command in commands if not command.is_write]
    positive_writes = [command for command in writes if command.q > 0]
    return {
        "commands": num_commands,
        "turns": len(factors),
        "usable": fallback is None,
        "fallback": fallback_category(fallback),
        "credited": bool(commands),  # the credit of every command was computed (the counts below are meaningful)
        "write_commands": len(writes),
        "positive_write_commands": len(positive_writes),
        "read_commands": len(reads),
        "positive_read_commands": sum(command.q > 0 for command in reads),
        "positive_writes_with_indirect": sum(command.indirect > 0 for command in positive_writes),
        "step_factor_std": _std(factors),
        "verifier_source": verifier_source,
        "variant": variant,
        "processing_ms": (time.perf_counter() - started) * 1000,
    }


def _std(values: Sequence[float]) -> float:
    """Population standard deviation (statistics.pstdev is exact but ~50x slower, on the trainer's path)."""
    if not values:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((value - mean) ** 2 for value in values) / len(values))


def aggregate_diagnostics(diagnostics: Sequence[dict]) -> dict:
    """Table 11 statistics over a batch (one update, or a run). Command shares pool the commands of the
    trajectories whose credit was computed; the step-factor std averages over all trajectories, a fallback's
    unit factors counting as 0. A share with nothing to count is NaN."""
    count = len(diagnostics)

    def total(key: str) -> int:
        return sum(record[key] for record in diagnostics)

    usable = sum(record["usable"] for record in diagnostics)
    return {
        "trajectories": count,
        "commands_per_trajectory": _ratio(total("commands"), count),
        "usable_pct": 100 * _ratio(usable, count),
        "fallback_pct": 100 * _ratio(count - usable, count),
        "positive_write_commands_pct": 100 * _ratio(total("positive_write_commands"), total("write_commands")),
        "positive_read_commands_pct": 100 * _ratio(total("positive_read_commands"), total("read_commands")),
        "positive_writes_with_indirect_pct": 100 * _ratio(total("positive_writes_with_indirect"),
                                                          total("positive_write_commands")),
        "mean_step_factor_std": _ratio(sum(record["step_factor_std"] for record in diagnostics), count),
        "mean_processing_ms": _ratio(sum(record["processing_ms"] for record in diagnostics), count),
        "fallbacks": dict(Counter(record["fallback"] for record in diagnostics if record["fallback"])),
    }


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else math.nan


# ---- table and JSON ---------------------------------------------------------------------------------------------

def short_command(text: str, width: int = 48) -> str:
    """The first line of a command, whitespace collapsed, with … where something was cut."""
    lines = text.strip().splitlines() or [""]
    head = " ".join(lines[0].split())
    if len(head) > width or len(lines) > 1:
        head = head[: width - 2].rstrip() + " …"
    return head


def format_config(config: CreditConfig) -> str:
    """The active credit configuration as `key=value` words (the override grammar); a list equal to its default
    is shown as `default`, so the header stays short."""
    words = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, tuple) and value == field.default and value:
            shown = "default"
        elif isinstance(value, tuple):
            shown = f"[{','.join(value)}]"
        else:
            shown = {None: "null", True: "true", False: "false"}.get(value, value) if not isinstance(
                value, int | float) or isinstance(value, bool) else _number(value)
        words.append(f"{field.name}={shown}")
    return "\n".join(textwrap.wrap("credit config: " + " ".join(words), 110, subsequent_indent="  "))


# The role of a parsed command whose credit was not computed: a fallback fired first.
NOT_CREDITED = "not credited (fallback)"


def command_rows(result: CreditResult, trajectory: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per command: its credit, or, when a fallback fired before the credit was computed, the command as
    parsed with role NOT_CREDITED and no credit, so that a fallback still shows what was read."""
    if result.commands or not isinstance(trajectory, Mapping) or not isinstance(trajectory.get("commands"), list):
        return [{"index": command.index, "turn": command.turn, "text": command.text, "role": command.role,
                 "credit": command.q, "direct": command.direct, "indirect": command.indirect, "info": command.info,
                 "is_write": command.is_write} for command in result.commands]
    parsed = [command for command in trajectory["commands"] if isinstance(command, Mapping)]
    return [{"index": command.get("index", position), "turn": command.get("turn", position),
             "text": str(command.get("text") or ""), "role": NOT_CREDITED, "credit": None, "direct": None,
             "indirect": None, "info": None, "is_write": None} for position, command in enumerate(parsed)]


def reading_of(trajectory: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """What an offline reading understood and what not (inference.reading), None for a traced trajectory."""
    reading = trajectory.get("reading") if isinstance(trajectory, Mapping) else None
    return reading if isinstance(reading, Mapping) else None


def reading_lines(reading: Mapping[str, Any] | None) -> list[str]:
    """"read: …" and, when something was left out, "not read: …" (inference.reading's two word lists)."""
    if reading is None:
        return []
    lines = [f"read: {'; '.join(map(str, reading.get('understood') or []))}"]
    if reading.get("not_understood"):
        lines.append(f"not read: {'; '.join(map(str, reading['not_understood']))}")
    return lines


def format_table(result: CreditResult, title: str, trajectory: Mapping[str, Any] | None = None) -> str:
    rows = [title, f"{'turn':>5}  {'#':>4}  {'command':<48}  {'role':<28}  {'q(c)':>5}"]
    for row in command_rows(result, trajectory):
        credit = f"{row['credit']:>5.2f}" if row["credit"] is not None else f"{'-':>5}"
        rows.append(f"{row['turn']!s:>5}  {row['index']!s:>4}  {short_command(row['text']):<48}  {row['role']:<28}  "
                    f"{credit}")
    factors = " ".join(f"t{turn}={factor:.2f}" for turn, factor in enumerate(result.step_factors))
    rows += textwrap.wrap(f"step factors: {factors or '(no turns)'}", 110, subsequent_indent="  ")
    rows.append(f"fallback: {result.fallback or 'none (dependency credit used)'}")
    for line in reading_lines(reading_of(trajectory)):
        rows += textwrap.wrap(line, 110, subsequent_indent="  ")
    shown = {key: value for key, value in result.diagnostics.items() if key not in ("usable", "fallback")}
    rows += textwrap.wrap("diagnostics: " + ", ".join(f"{key}={_number(value)}" for key, value in shown.items()),
                          110, subsequent_indent="  ")
    return "\n".join(rows)


def _number(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def to_json(result: CreditResult, source: str, trajectory: Mapping[str, Any] | None = None) -> dict:
    """The result as one JSON object; with the trajectory, a fallback keeps its parsed commands (NOT_CREDITED) and
    an offline reading is said (`reading`)."""
    return {
        "source": source,
        "commands": command_rows(result, trajectory),
        "reading": dict(reading) if (reading := reading_of(trajectory)) is not None else None,
        "turn_credit": result.turn_credit,
        "step_factors": result.step_factors,
        "fallback": result.fallback,
        "diagnostics": result.diagnostics,
        "graph": {
            "verifier_records": result.verifier_records,
            "verifier_edges": [list(edge) for edge in result.verifier_edges],
            "dependency_edges": [list(edge) for edge in result.dependency_edges],
            "information_edges": [list(edge) for edge in result.information_edges],
        },
    }
