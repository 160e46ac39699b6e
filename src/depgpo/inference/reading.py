"""What an offline reading of a log understood and what not, said per trajectory (its `reading` field), so that the
credit table, its JSON and the corpus report can say why a log got credit or none.

A log's reader passes what it alone knows (`format`, `workdir_from`, the tool tally, notes of its own);
`describe_reading` adds the counts and the target, and words both lists:

    {"format", "workdir", "workdir_from", "commands", "turns", "unparsed", "tools": {"read", "ignored", "dropped"},
     "target_from", "target": [...], "relative_names": [...], "understood": [...], "not_understood": [...]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NO_COMMANDS = "no commands"
NO_TARGET = "no target named"
TOOLS_DROPPED = "tools dropped"
UNPARSED = "commands not parsed"


def describe_reading(given: dict[str, Any], *, commands: int, turns: int, unparsed: int, workdir: str,
                     target_from: str, records: Sequence[str], relative: Sequence[str]) -> dict[str, Any]:
    tools: dict[str, Any] = given["tools"] if isinstance(given.get("tools"), dict) else {}
    read, ignored, dropped = (dict(tools.get(key) or {}) for key in ("read", "ignored", "dropped"))
    workdir_from = str(given.get("workdir_from") or "assumed: no working directory in the log")
    fmt = str(given.get("format") or "log")
    understood = [f"{_plural(commands, 'command')} in {_plural(turns, 'turn')} ({fmt})"]
    if read:
        understood.append(f"tool calls read: {_counts(read)}")
    if records:
        named = ", ".join(list(records)[:6]) + (f" and {len(records) - 6} more" if len(records) > 6 else "")
        where = f" ({', '.join(relative[:6])} at the working directory {workdir}, {workdir_from})" if relative else ""
        understood.append(f"target from {target_from}: {named}{where}")
    understood += [str(note) for note in given.get("understood") or []]
    if ignored:
        understood.append(f"ignored, no effect on files: {_counts(ignored)}")

    not_understood = [f"{NO_COMMANDS}: {given.get('why_no_commands') or _why_no_commands(read, dropped)}"] \
        if commands == 0 else []
    if dropped:
        not_understood.append(f"{TOOLS_DROPPED}: {_counts(dropped)} (not shell or file tools, or without usable "
                              "arguments)")
    if unparsed:
        not_understood.append(f"{UNPARSED}: {unparsed} of {commands} do not parse as shell; they have no records")
    if not records:
        not_understood.append(f"{NO_TARGET}: {target_from} names no file, path or port, and the log has no verifier "
                              "trace, so E is empty")
    not_understood += [str(note) for note in given.get("not_understood") or []]
    return {"format": fmt, "workdir": workdir, "workdir_from": workdir_from, "commands": commands, "turns": turns,
            "unparsed": unparsed, "tools": {"read": read, "ignored": ignored, "dropped": dropped},
            "target_from": target_from, "target": list(records), "relative_names": list(relative),
            "understood": understood, "not_understood": not_understood}


def _why_no_commands(read: dict[str, int], dropped: dict[str, int]) -> str:
    if dropped:
        return "its tool calls are none this reader knows as shell or file tools"
    return "the log holds no shell command or file tool call"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} ×{count}" for name, count in sorted(counts.items(), key=lambda item: -item[1]))
