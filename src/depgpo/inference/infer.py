"""Offline inference of a whole trajectory: each command's records from its text, E from the verifier's source (or
the instruction), and the final state the simulation ends in, as a `trajectory.json` with `source: "static"`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from depgpo.env.judging.verifier_source import extract_verifier_records
from depgpo.inference.filesystem import content_lines, is_line_tracked
from depgpo.inference.reading import describe_reading
from depgpo.inference.simulator import DEFAULT_WORKDIR, ShellSimulator
from depgpo.inference.task_text import task_records
from depgpo.trajectory import scope
from depgpo.trajectory.schema import (CommandEffects, CommandRecord, FileVersion, FinalSection, TaskRef, Timings,
    Trajectory, VerifierSection, empty_effects, make_trajectory, unverified)

# The error that says the simulator itself failed on a command (a bug to report, not a property of the text).
INFERENCE_FAILED = "static inference raised"


def infer_command_effects(text: str, cwd: str = DEFAULT_WORKDIR) -> tuple[CommandEffects, str | None]:
    """Records of one command run in a fresh shell at `cwd`, and the directory it leaves (None: not determined)."""
    shell = ShellSimulator(cwd)
    effects = shell.run(text)
    return (effects if effects is not None else empty_effects()), shell.cwd


def infer_trajectory(steps: Iterable[Mapping[str, Any]], *, instruction: str = "", workdir: str = DEFAULT_WORKDIR,
                     tracked_roots: list[str] | None = None, verifier_source: str | None = None,
                     verifier: Mapping[str, Any] | None = None, task: Mapping[str, Any] | None = None,
                     num_turns: int | None = None, reading: Mapping[str, Any] | None = None) -> Trajectory:
    """A trajectory (`source: "static"`) whose records are inferred from the command texts.

    `steps` are the executed commands in order, each a mapping with `text` and optionally `turn` (default: its
    position), `observation`, `exit_code`, `timed_out` and `duration_s`. `verifier` keeps an existing verifier
    section (its E) as is; otherwise E comes from `verifier_source`, else from the instruction: its absolute paths
    and ports, and its relative file names at `workdir` (inference.task_text). File records outside
    `tracked_roots` (default: `scope.tracked_roots` of the workdir and E) are dropped. `reading` is what the log's
    reader knows of the log (inference.reading); the trajectory's `reading` says what was understood and what not.
    """
    started = time.perf_counter()
    relative: list[str] = []
    if verifier is not None:
        target_from = str((reading or {}).get("target_from") or "the log's verifier section")
    elif verifier_source is not None:
        verifier, target_from = unverified(extract_verifier_records(verifier_source, workdir)), "the verifier's source"
    else:
        records, relative = task_records(instruction, workdir)
        verifier, target_from = unverified(records), "the task text" if instruction.strip() else "the task text (empty)"
    evidence = list(verifier.get("E") or [])
    roots = tracked_roots if tracked_roots is not None else scope.tracked_roots(workdir, evidence)

    shell = ShellSimulator(workdir)
    commands: list[CommandRecord] = []
    errors: list[str] = []
    touched: dict[str, None] = {}  # tracked paths written or deleted, for `final`
    for index, step in enumerate(steps):
        text = str(step.get("text") or "")
        try:
            # An editor tool call is simulated through a shell command with the same file effects (agent_logs.py).
            effects = shell.run(str(step.get("shell_equivalent") or text), index)
        except Exception as error:  # noqa: BLE001 - a log's text must never stop the batch; counted by the bench
            errors.append(f"command {index}: {INFERENCE_FAILED} ({type(error).__name__}: {error}); no records inferred")
            effects = None
        else:
            if effects is None:
                errors.append(f"command {index}: its text does not parse as shell; no records inferred")
        commands.append(CommandRecord(
            index=index, turn=step.get("turn", index), text=text, observation=step.get("observation") or "",
            exit_code=step.get("exit_code"), timed_out=bool(step.get("timed_out", False)),
            duration_s=step.get("duration_s"), **(effects if effects is not None else empty_effects())))
    # Out of the tracked scope, a file one command wrote and a later one read stays: the credit may track it (also
    # where the later command had rewritten it first, for credit.order_within_command=false).
    handoffs = scope.handoff_paths(commands, in_order=False)
    for command in commands:
        _keep_tracked(command, lambda path: scope.is_under(path, roots) or path in handoffs)
        touched.update(dict.fromkeys([w["path"] for w in command["writes"]] + command["deletions"]))

    final_files = {}
    for path in list(touched) + [r for r in evidence if r.startswith("/") and not scope.GLOB_CHARS.search(r)]:
        state = shell.state_of(path)
        lines = content_lines(state.content) if state.content is not None and is_line_tracked(state.content) else None
        final_files[path] = FileVersion(exists=state.exists, hash=state.hash, lines=lines).as_final()
    final = FinalSection(
        files=final_files,
        alive_processes=[{"pid": None, "name": p.name, "owner": p.owner} for p in shell.processes],
        listening_ports=[{"port": port, "owner": p.owner} for p in shell.processes for port in p.ports])
    parse_s = time.perf_counter() - started
    turns = num_turns if num_turns is not None else max((c["turn"] for c in commands), default=-1) + 1
    summary = describe_reading(dict(reading or {}), commands=len(commands), turns=turns, unparsed=len(errors),
                               workdir=workdir, target_from=target_from, records=evidence, relative=relative)
    trajectory = make_trajectory(
        task=cast(TaskRef, dict(task)) if task is not None else TaskRef(id=None, path=None, format=None),
        instruction=instruction, workdir=workdir, tracked_roots=roots, source="static", commands=commands,
        verifier=cast(VerifierSection, dict(verifier)), final=final,
        timings=Timings(setup_s=None, commands_s=None, verifier_s=None, parse_s=parse_s, total_s=None),
        errors=errors, num_turns=turns)
    trajectory["reading"] = summary
    return trajectory


def _keep_tracked(effects: CommandEffects | CommandRecord, tracked: Callable[[str], bool]) -> None:
    """Drop the file records outside the tracked scope."""
    effects["reads"] = [p for p in effects["reads"] if tracked(p)]
    effects["stats"] = [p for p in effects["stats"] if tracked(p)]
    effects["reads_after_write"] = [r for r in effects.get("reads_after_write", []) if r[:1] != "/" or tracked(r)]
    effects["writes"] = [w for w in effects["writes"] if tracked(w["path"])]
    effects["deletions"] = [p for p in effects["deletions"] if tracked(p)]
