"""A report table and how it is written: the CSV of its numbers, and its cells as Markdown and LaTeX."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

NOT_AVAILABLE = "–"
BEST, SECOND = "best", "second"


@dataclass
class Table:
    caption: str
    cells: pd.DataFrame  # display text; the index holds the row labels, columns may have two levels
    numbers: pd.DataFrame  # the values behind the cells, one row per value
    marks: pd.DataFrame | None = None  # BEST / SECOND / "" per cell
    notes: list[str] = field(default_factory=list)

    def write(self, out: Path, name: str) -> list[Path]:
        paths = [out / f"{name}.csv", out / f"{name}.md", out / f"{name}.tex"]
        self.numbers.to_csv(paths[0], index=False)
        paths[1].write_text(to_markdown(self, name))
        paths[2].write_text(to_latex(self, name))
        return paths


def flat_columns(columns: pd.Index) -> list[str]:
    return [" ".join(c) if isinstance(c, tuple) else str(c) for c in columns]


def mark_first_line(template: str, cell: str) -> str:
    first, newline, rest = cell.partition("\n")
    return template.format(first) + newline + rest


def marked_cells(table: Table, best: str, second: str) -> pd.DataFrame:
    """The cells with the mark templates applied to their first line ("{}" stands for that line's text): the mark
    is about pass@1, not the differences below it."""
    if table.marks is None:
        return table.cells
    templates = table.marks.replace({BEST: best, SECOND: second, "": "{}"})
    text = [[mark_first_line(template, cell) for cell, template in zip(cells, row_templates)]
            for cells, row_templates in zip(table.cells.values, templates.values)]
    return pd.DataFrame(text, index=table.cells.index, columns=table.cells.columns)


def to_markdown(table: Table, name: str) -> str:
    """A pipe table; the lines of a multi-line cell are separated by <br>."""
    cells = marked_cells(table, "**{}**", "<u>{}</u>").map(lambda cell: cell.replace("\n", "<br>"))
    header = [cells.index.name or ""] + flat_columns(cells.columns)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":---"] + ["---:"] * len(cells.columns)) + "|"]
    lines += ["| " + " | ".join([str(label), *row]) + " |" for label, row in zip(cells.index, cells.values)]
    notes = "".join(f"\n- {note}" for note in table.notes)
    return f"**{name}.** {table.caption}\n\n" + "\n".join(lines) + "\n" + (f"\nNotes:{notes}\n" if notes else "")


LATEX_REPLACEMENTS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                      "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                      "±": r"$\pm$", "↓": r"$\downarrow$", "↑": r"$\uparrow$", "×": r"$\times$", "β": r"$\beta$",
                      "–": "--", "…": r"\ldots{}", "<": r"\textless{}", ">": r"\textgreater{}", "Δ": r"$\Delta$",
                      "−": "$-$"}


def latex_escape(text: str) -> str:
    return "".join(LATEX_REPLACEMENTS.get(char, char) for char in str(text))


def latex_header(columns: pd.Index, corner: str) -> list[str]:
    """Header rows; the upper level of two-level columns spans its runs of equal labels."""
    if not isinstance(columns, pd.MultiIndex):
        return [" & ".join([latex_escape(corner), *map(latex_escape, columns)]) + r" \\"]
    groups: list[list] = []
    for top, _ in columns:
        if groups and groups[-1][0] == top:
            groups[-1][1] += 1
        else:
            groups.append([top, 1])
    top_row = "".join(f" & \\multicolumn{{{n}}}{{c}}{{{latex_escape(label)}}}" for label, n in groups)
    rules, start = [], 2
    for _, n in groups:
        rules.append(f"\\cmidrule(lr){{{start}-{start + n - 1}}}")
        start += n
    bottom_row = " & ".join([latex_escape(corner), *(latex_escape(sub) for _, sub in columns)])
    return [top_row + r" \\", " ".join(rules), bottom_row + r" \\"]


def latex_lines(cell: str) -> str:
    """A multi-line cell as a nested one-column tabular (no package needed)."""
    if "\n" not in cell:
        return cell
    return r"\begin{tabular}[t]{@{}c@{}}" + r" \\ ".join(cell.split("\n")) + r"\end{tabular}"


def to_latex(table: Table, name: str) -> str:
    escaped = Table(table.caption, table.cells.map(latex_escape), table.numbers, table.marks, table.notes)
    cells = marked_cells(escaped, r"\textbf{{{}}}", r"\underline{{{}}}").map(latex_lines)
    body = [" & ".join([latex_escape(label), *row]) + r" \\" for label, row in zip(cells.index, cells.values)]
    lines = [r"\begin{table}[t]", r"\centering", f"\\caption{{{latex_escape(table.caption)}}}",
             f"\\label{{tab:{name}}}", f"\\begin{{tabular}}{{l{'c' * len(cells.columns)}}}", r"\toprule",
             *latex_header(cells.columns, cells.index.name or ""), r"\midrule", *body, r"\bottomrule",
             r"\end{tabular}", r"\end{table}"]
    lines += [f"% note: {note}" for note in table.notes]
    return "\n".join(lines) + "\n"
