"""The report of a corpus of counterfactual results outside a results tree (replayed public agent logs):
`depgpo report --counterfactuals FILE.jsonl... --name NAME --out DIR` (docs/replay.md#inputs-and-outputs)."""

from __future__ import annotations

from pathlib import Path

from depgpo.report.disagreements import disagreements, summary_lines
from depgpo.report.scores import frame_and_notes, read_counterfactuals, scores_figure, scores_table


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

