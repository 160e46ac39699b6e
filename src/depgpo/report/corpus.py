"""Figure 1(d) and Table 11 on a corpus of real trajectories, not on a results tree.

    depgpo report --trajectories PATH [PATH ...] --name NAME --out DIR [--static]

Each PATH is a file, a trial directory, or a directory searched for them (`inference.trajectory_sources`), in any
shape that `depgpo.inference.load_trajectories` reads (trajectory.json, chat and agent logs, trial directories);
`--static`
re-infers our own traced trajectories from their command texts. Writes to DIR:

  fig1d.png, fig1d.pdf     the cumulative distribution of the fraction of commands connected to E, over passing
                           trajectories (verifier reward >= 1) and those of them with at least five commands
  table11.csv/.md/.tex     the dependency-trace statistics of the paper's Table 11 over every loaded trajectory
  trajectories.csv         one row per trajectory: source, task, records, commands, reward, connected_fraction,
                           fallback, and what an offline reading understood and not (read, not_read)
  (fig1d and table11 leave out the trajectories with no command, and their notes say how many)
  index.md                 the corpus name, the sources, what was loaded and skipped (and why), the credit config

A file that cannot be read is skipped and listed with its reason; the rest of the corpus is still reported.

    depgpo report --counterfactuals FILE.jsonl... --name NAME --out DIR

The counterfactual scores of replayed agent logs (docs/replay.md#inputs-and-outputs): table_scores, fig_scores,
credit_disagreements.csv (report.disagreements) and index.md.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from pathlib import Path
from typing import Any

import pandas as pd

from depgpo.credit import CreditConfig, CreditResult, aggregate_diagnostics, credit_with_fallback
from depgpo.credit.explain import reading_of
from depgpo.inference import load_trajectories, trajectory_sources
from depgpo.report.disagreements import disagreements, summary_lines
from depgpo.report.figures import MIN_REFERENCE_COMMANDS, connected_fraction_plot
from depgpo.report.scores import frame_and_notes, read_counterfactuals, scores_figure, scores_table
from depgpo.report.tables import FALLBACK_LABEL, TRACE_STATISTICS, statistics_table

COLUMNS = ["source", "task", "records", "commands", "reward", "connected_fraction", "fallback", "read", "not_read"]
PASSING = 1.0  # the reward of a passing trajectory, as in Figure 1(d) of a results tree


def table11_rows() -> list[tuple[str, str, bool]]:
    """(Table 11 label, key of aggregate_diagnostics, is a percentage), in the order of tables.table11. The
    aggregate's keys follow the counters' names: `{counter}_pct`, and `commands_per_trajectory`."""
    rows = []
    for label, (part, _, percent) in TRACE_STATISTICS.items():
        rows.append((label, f"{part}_pct" if percent else f"{part}_per_trajectory", percent))
        if part == "usable":
            rows.append((FALLBACK_LABEL, "fallback_pct", True))
    return rows


def connected_share(result: CreditResult) -> float:
    """Share of commands with q > 0, as depgpo.train.sft_data.connected_fraction computes it, but from a result
    already computed with the corpus's config (that one recomputes credit with the default config)."""
    if not result.commands:  # a fallback fired before any credit was computed
        return 0.0
    return sum(command.q > 0 for command in result.commands) / len(result.commands)


def reward_of(trajectory: dict) -> float | None:
    """The verifier's reward, None when the log has none (chat logs often do not): never taken as passing."""
    reward = (trajectory.get("verifier") or {}).get("reward")
    return float(reward) if isinstance(reward, numbers.Real) and not isinstance(reward, bool) else None


def load_file(path: Path, config: CreditConfig, static: bool) -> tuple[list[dict], list[dict]]:
    """(rows, credit diagnostics) of every trajectory in one file. Raises what loading raises."""
    rows, diagnostics = [], []
    for trajectory in load_trajectories(path, static=static):
        result = credit_with_fallback(trajectory, config, trajectory.get("num_turns"))
        commands = trajectory.get("commands")
        reading = reading_of(trajectory) or {}
        rows.append({"source": str(path), "task": (trajectory.get("task") or {}).get("id"),
                     "records": trajectory.get("source"), "commands": len(commands) if isinstance(commands, list)
                     else 0, "reward": reward_of(trajectory), "connected_fraction": connected_share(result),
                     "fallback": result.fallback, "read": "; ".join(map(str, reading.get("understood") or [])),
                     "not_read": "; ".join(map(str, reading.get("not_understood") or []))})
        diagnostics.append(result.diagnostics)
    return rows, diagnostics


def figure_subset(frame: pd.DataFrame) -> tuple[pd.DataFrame, str, str, list[str]]:
    """(trajectories, their kind, title suffix, notes) for Figure 1(d): the passing ones, or all of them when no
    trajectory has a reward, said so rather than counting an unknown reward as a pass."""
    rewarded = frame[frame.reward.notna()]
    if rewarded.empty:
        note = ("No trajectory records a verifier reward, so passing ones cannot be told apart: the figure shows "
                f"all {len(frame)} trajectories.")
        return frame, "loaded", "all trajectories (no reward recorded)", [note]
    unknown = len(frame) - len(rewarded)
    notes = [f"{unknown} trajectories without a reward are left out."] if unknown else []
    return rewarded[rewarded.reward >= PASSING], "passing", "passing trajectories", notes


def corpus_report(sources: list[Path], out: Path, name: str, config: CreditConfig, static: bool) -> dict:
    """Write fig1d, table11, trajectories.csv and index.md for the trajectories under `sources`; returns
    {"files": [...], "trajectories": n, "skipped": [(file, reason)], "produced": [(name, paths, notes)]}.
    Nothing but index.md is written when no trajectory could be loaded."""
    files, skipped, rows, diagnostics = [], [], [], []
    for source in sources:
        found = trajectory_sources(source)
        if not found:
            skipped.append((str(source), "no trajectory file or trial directory in the directory"))
        for path in found:
            files.append(path)
            try:
                file_rows, file_diagnostics = load_file(path, config, static)
            except ValueError as error:  # load_trajectories' message starts with the file's name: not twice
                skipped.append((str(path), str(error).removeprefix(str(path)).removeprefix(": ")))
                continue
            except Exception as error:  # noqa: BLE001 - one odd file must not lose the report on the rest
                skipped.append((str(path), f"internal error: {type(error).__name__}: {error}"))
                continue
            rows += file_rows
            diagnostics += file_diagnostics
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"files": [str(path) for path in files], "trajectories": len(rows), "skipped": skipped,
              "produced": []}
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if rows:
        frame.to_csv(out / "trajectories.csv", index=False)
    # A trajectory of no command has no share of commands connected to E and no command statistics: the figure and
    # the table leave it out, and say so (why it has none is in trajectories.csv and index.md).
    empty = (frame.commands == 0).to_numpy(dtype=bool)
    left_out = (f"{int(empty.sum())} of {len(frame)} trajectories have no command (nothing was read from their "
                "logs) and are left out; trajectories.csv and index.md say why.") if empty.any() else None
    report["left_out"] = left_out
    diagnostics = [record for record, none in zip(diagnostics, empty, strict=True) if not none]
    frame = frame[~empty]
    if rows and not frame.empty:
        trajectories, kind, title, notes = figure_subset(frame)
        notes = [*notes, left_out] if left_out else notes
        plot = connected_fraction_plot(trajectories, kind, f"{name}: {title}")
        longer = int((trajectories.commands >= MIN_REFERENCE_COMMANDS).sum())
        counts = f"{len(trajectories)} {kind} trajectories, {longer} of them with ≥ {MIN_REFERENCE_COMMANDS} commands."
        report["produced"].append(("fig1d", plot.write(out, "fig1d"), [counts, *notes, *plot.notes]))
        aggregate = aggregate_diagnostics(diagnostics)
        statistics = [(label, key, aggregate[key], percent) for label, key, percent in table11_rows()]
        statistics.append(("credit/step_factor_std", "mean_step_factor_std", aggregate["mean_step_factor_std"],
                           False))
        statistics += [(f"credit/fallback={category}", f"fallbacks[{category}]", count / len(diagnostics), False)
                       for category, count in sorted(aggregate["fallbacks"].items())]
        note = (f"Over the {len(frame)} trajectories loaded with at least one command, passing or not; command "
                "shares pool the commands of the trajectories whose credit was computed. Rows named credit/… are the "
                "mean step-factor std and the rate of each fallback.")
        table = statistics_table(f"Dependency-trace statistics on {name}.", statistics,
                                 [note, left_out] if left_out else [note])
        report["produced"].append(("table11", table.write(out, "table11"), table.notes))
    elif rows:
        report["produced"].append(("fig1d, table11", [], [f"not drawn: {left_out}"]))
    if rows:
        partial = sum(bool(row["not_read"]) for row in rows)
        report["produced"].append(("trajectories", [out / "trajectories.csv"], [
            f"{len(rows)} trajectories; {partial} of them read only in part (their `not_read` column)"]))
    (out / "index.md").write_text(index_markdown(report, sources, name, config, static, rows, out))
    return report


def index_markdown(report: dict, sources: list[Path], name: str, config: CreditConfig, static: bool,
                   rows: list[dict], out: Path) -> str:
    kinds = pd.Series([row["records"] for row in rows], dtype=object).fillna("unknown").value_counts()
    lines = [f"# Report on the corpus {name}", "", "## Sources", ""]
    lines += [f"- `{source}`" for source in sources]
    lines += ["", f"{len(report['files'])} files found, {len(report['skipped'])} skipped; "
              f"{report['trajectories']} trajectories loaded "
              f"(records: {', '.join(f'{count} {kind}' for kind, count in kinds.items()) or 'none'}). Records "
              + ("of traced trajectories were re-inferred from the command texts (`--static`)." if static else
                 "as stored: traced where the file has a trace, inferred from the command text otherwise."),
              "", "## Skipped", ""]
    lines += [f"- `{path}`: {reason}" for path, reason in report["skipped"]] or ["- nothing"]
    lines += ["", "## Read in part", "", "What the reading of each such log left out (the figure and the table leave "
              "out those with no command):", ""]
    lines += [f"- `{row['source']}` ({row['task']}, {row['commands']} commands): {row['not_read']}"
              for row in rows if row["not_read"]] or ["- nothing: every trajectory was read whole"]
    lines += ["", "## Credit config", "", "```json", json.dumps(dataclasses.asdict(config), indent=2), "```",
              "", "## Produced", ""]
    for output, paths, notes in report["produced"]:
        lines.append(f"- **{output}**: " + ", ".join(f"[{path.name}]({path.relative_to(out)})" for path in paths))
        lines += [f"  - {note}" for note in notes]
    if not report["produced"]:
        lines.append("- nothing: no trajectory could be loaded")
    return "\n".join(lines) + "\n"


def counterfactual_report(paths: list[Path], out: Path, name: str) -> list[Path]:
    """`depgpo report --counterfactuals`: the table and figure of counterfactual results outside a results tree (a
    corpus of replayed agent logs); returns the files written. Raises BadInput on a malformed result, ValueError
    when none is reproducible."""
    paths = [Path(p) for p in paths]
    results = [result for path in paths for result in read_counterfactuals(path)]
    if not any(result.reproducible for result in results):
        raise ValueError(f"{' '.join(map(str, paths))}: no reproducible counterfactual result ({len(results)} read)")
    table = scores_table(*frame_and_notes(results, paths))
    out.mkdir(parents=True, exist_ok=True)
    files = table.write(out, "table_scores") + scores_figure(table, name).write(out, "fig_scores")
    missed = disagreements(results)
    missed.to_csv(out / "credit_disagreements.csv", index=False)
    files.append(out / "credit_disagreements.csv")
    lines = [f"# Counterfactual scores of {name}", "", *[f"- [{f.name}]({f.name})" for f in files], "", "Notes:", "",
             *[f"- {note}" for note in table.notes], "",
             "Where full DepGPO's credit and the labels disagree (credit_disagreements.csv, one row a command):", "",
             *[f"- {line}" for line in summary_lines(missed)]]
    (out / "index.md").write_text("\n".join(lines) + "\n")
    return files
