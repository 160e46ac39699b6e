"""`depgpo report --results results/{scale} [--out DIR] [--setting MODEL/DATA]`
`depgpo report --trajectories PATH [PATH ...] --name NAME --out DIR [--static] [--beta B] [--variant NAME]`
`depgpo report --counterfactuals FILE.jsonl [...] --name NAME --out DIR`

With --results: writes tables 1, 2, 6, 9, 10, 11 (CSV, Markdown, LaTeX) and figures 1a, 1b, 1d, 5, 6 (PNG, PDF),
plus index.md, which lists what was produced, the runs whose checkpoints ended byte-identical and whether their
credit had to agree (depgpo.report.checkpoints), and, for each output that could not be, the missing input and the
stage that writes it. Tables 2, 9, 10, 11 and the figures are about one setting, the focal one (the paper's
Qwen3.5-9B on SETA): by default the first of the sorted `{model}/{data}` directories.

With --trajectories: Figure 1(d) and Table 11 on a corpus of real trajectories named NAME (files, or directories
searched for *.json and *.jsonl; any shape `depgpo credit` reads), plus trajectories.csv and index.md
(depgpo.report.corpus). A file that cannot be read is named on stderr with the reason and the rest is still
reported; the exit code is then 2.

With --counterfactuals: the credit scores (table_scores, fig_scores; docs/replay.md#scores) of `depgpo counterfactual
--format json --out DIR` results outside a results tree, such as replayed public agent logs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--results", type=Path, help="results/{scale}: the tree to report on")
    source.add_argument("--trajectories", type=Path, nargs="+", metavar="PATH",
                        help="trajectory files or directories of them: Figure 1(d) and Table 11 on this corpus")
    source.add_argument("--counterfactuals", type=Path, nargs="+", metavar="FILE.jsonl",
                        help="depgpo counterfactual --format json results: the credit scores' table and figure")
    parser.add_argument("--out", type=Path, help="output directory (default with --results: RESULTS/report)")
    parser.add_argument("--setting", metavar="MODEL/DATA",
                        help="the focal setting of tables 2, 9, 10, 11 and the figures (default: the first found)")
    corpus = parser.add_argument_group("with --trajectories or --counterfactuals")
    corpus.add_argument("--name", help="the corpus's name, shown in the outputs (required)")
    corpus.add_argument("--static", action="store_true",
                        help="re-infer reads and writes of traced trajectories from the command text")
    corpus.add_argument("--beta", type=float, help="dependency-decay coefficient β (default: the credit default)")
    corpus.add_argument("--variant", help="full method or a Table 2 ablation (default: full)")


def build_report(results: Path, out: Path, setting: str | None = None) -> dict[str, list]:
    """Write every output that its inputs allow; returns {"produced": [(name, files, notes)],
    "missing": [(name, reason)]} and writes the same as out/index.md."""
    from depgpo.report import figures, power, rl_gain, scores, tables
    from depgpo.report.load import MissingInput, ResultsTree, Setting

    tree = ResultsTree(results)
    if not tree.settings:
        raise ValueError(f"{results}: no {{model}}/{{data}}/{{sft,filter,rl,eval}} directory found")
    if setting is None:
        focal = tree.settings[0]
    else:
        focal = Setting(*setting.split("/", 1))
        if focal not in tree.settings:
            raise ValueError(f"--setting {setting}: not among {', '.join(s.path for s in tree.settings)}")
    builders = {"table1": tables.table1, "table2": tables.table2, "table6": tables.table6, "table9": tables.table9,
                "table10": tables.table10, "table11": tables.table11, "fig1a": figures.fig1a,
                "fig1b": figures.fig1b, "fig1d": figures.fig1d, "fig5": figures.fig5, "fig6": figures.fig6,
                "table_scores": scores.table_scores, "fig_scores": scores.figure_scores,
                "rl_vs_frozen": rl_gain.rl_vs_frozen, "power": power.power}
    report: dict[str, list] = {"produced": [], "missing": []}
    outputs = {}
    for name, build in builders.items():  # all of them before writing any: a malformed input (BadInput) writes nothing
        try:
            outputs[name] = build(tree, focal)
        except MissingInput as missing:
            report["missing"].append((name, str(missing)))
    out.mkdir(parents=True, exist_ok=True)
    for name, output in outputs.items():
        report["produced"].append((name, output.write(out, name), output.notes))
    (out / "index.md").write_text(index_markdown(report, results, focal.label, out))
    return report


def index_markdown(report: dict[str, list], results: Path, focal: str, out: Path) -> str:
    lines = [f"# Report on `{results}`", "", f"Focal setting (tables 2, 9, 10, 11 and the figures): {focal}", "",
             "## Produced", ""]
    for name, files, notes in report["produced"]:
        lines.append(f"- **{name}**: " + ", ".join(f"[{path.name}]({path.relative_to(out)})" for path in files))
        lines += [f"  - {note}" for note in notes]
    from depgpo.report.checkpoints import identical_markdown

    from depgpo.report.provenance import numerics_markdown

    lines += ["", "## Byte-identical checkpoints", ""] + identical_markdown(results)
    lines += ["", "## What produced these numbers", ""] + numerics_markdown(results)
    lines += ["", "## Missing", ""]
    lines += [f"- **{name}**: {reason}" for name, reason in report["missing"]] or ["- nothing"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.trajectories is not None:
        return run_corpus(args)
    if args.counterfactuals is not None:
        return run_counterfactuals(args)
    given = [option for option, value in (("--name", args.name), ("--static", args.static), ("--beta", args.beta),
                                          ("--variant", args.variant)) if value not in (None, False)]
    if given:
        return usage_error(f"{', '.join(given)}: only with --trajectories")
    out = args.out or args.results / "report"
    try:
        report = build_report(args.results, out, args.setting)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, reason in report["missing"]:
        print(f"{name}: not produced: {reason}", file=sys.stderr)
    print(f"{len(report['produced'])} outputs written to {out} (see {out / 'index.md'})")
    return 0 if report["produced"] else 1


def run_corpus(args: argparse.Namespace) -> int:
    missing = [option for option, value in (("--name", args.name), ("--out", args.out)) if not value]
    if missing:
        return usage_error(f"--trajectories needs {' and '.join(missing)}")
    if args.setting is not None:
        return usage_error("--setting: only with --results")
    from depgpo.credit import CreditConfig
    from depgpo.report.corpus import corpus_report

    try:
        given = {"beta": args.beta, "variant": args.variant}
        config = CreditConfig(**{key: value for key, value in given.items() if value is not None})
    except ValueError as error:
        return usage_error(str(error))
    report = corpus_report(args.trajectories, args.out, args.name, config, args.static)
    for path, reason in report["skipped"]:
        print(f"{path}: skipped: {reason}", file=sys.stderr)
    if not report["produced"]:
        print(f"error: no trajectory could be loaded from {' '.join(map(str, args.trajectories))}", file=sys.stderr)
        return 2
    print(f"{report['trajectories']} trajectories of {args.name} reported in {args.out} "
          f"(see {args.out / 'index.md'})")
    return 2 if report["skipped"] else 0


def run_counterfactuals(args: argparse.Namespace) -> int:
    missing = [option for option, value in (("--name", args.name), ("--out", args.out)) if not value]
    if missing:
        return usage_error(f"--counterfactuals needs {' and '.join(missing)}")
    given = [option for option, value in (("--setting", args.setting), ("--static", args.static),
                                          ("--beta", args.beta), ("--variant", args.variant))
             if value not in (None, False)]
    if given:
        return usage_error(f"{', '.join(given)}: not with --counterfactuals (every variant and β is scored)")
    from depgpo.report.load import BadInput
    from depgpo.report.corpus import counterfactual_report

    try:
        files = counterfactual_report(args.counterfactuals, args.out, args.name)
    except (BadInput, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{len(files)} files written to {args.out} (see {args.out / 'index.md'})")
    return 0


def usage_error(message: str) -> int:
    print(f"depgpo report: error: {message}", file=sys.stderr)
    return 2
