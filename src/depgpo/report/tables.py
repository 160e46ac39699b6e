"""The paper's tables (1, 2, 6, 9, 10, 11) computed from a results tree, written as CSV, Markdown and LaTeX.

Each builder returns a `Table`: the display cells (what the paper prints), the numbers behind them (the CSV, so
that nothing has to be parsed back out of "25.2 [19.1, 31.5]"), optional best / second-best marks, and notes that
say which expected inputs were absent. The 95% intervals of pass@1 and of paired differences are
depgpo.report.stats'. A builder that finds none of its inputs raises MissingInput.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from depgpo.algos.methods import methods
from depgpo.config import BETA_INFIX, Run, parse_run
from depgpo.report.load import MissingInput, ResultsTree, Setting
from depgpo.report.render import BEST, NOT_AVAILABLE, SECOND, Table
from depgpo.report.stats import Interval, paired_difference, pass_at_1_interval

TEST_SETS = {"test_tb20": "TB2.0", "test_tb21": "TB2.1"}
SFT_ROW = {"sft": "SFT"}  # the SFT policy, evaluated as run `sft`: Table 1's first row
ABLATIONS = {  # run depgpo_{variant} -> Table 2 row
    "binary_write": "Binary write contribution",
    "no_verifier_filter": "Without verifier filtering",
    "no_read_credit": "Without supporting-read credit",
    "direct_only": "Direct writes only",
}

# ---------------------------------------------------------------------- statistics

POOLED = "pooled"  # the `test` of the rows over all test sets
TEST_COLUMNS = {**TEST_SETS, POOLED: "Pooled"}
BASELINES = {"grpo": "GRPO", "sft": "SFT"}  # run -> label of the paired differences Tables 1 and 9 show
NO_DIFFERENCE = Interval(math.nan, math.nan, math.nan, 0, 0)
INTERVAL_CAPTION = ("pass@1 (%) over the attempts (tasks × rounds × seeds) with its 95% interval [low, high], a "
                    "cluster bootstrap that resamples tasks; Pooled: the attempts of both test sets")
DELTA_CAPTION = ("Δ X: the paired difference to X (percentage points) over the attempts both runs made on the same "
                 "task, round and sampling seed, with its 95% interval, tasks resampled")


def pass_at_1_summary(tree: ResultsTree) -> pd.DataFrame:
    """model, data, run, test, mean, sd, rounds: pass@1 (%) over the rounds of all seeds pooled; the SD is the
    sample SD over those rounds, as `depgpo evaluate` reports it (0 for a single round)."""
    grouped = tree.eval_rounds.groupby(["model", "data", "run", "test"]).pass_at_1
    summary = grouped.agg(mean="mean", sd="std", rounds="count").reset_index()
    summary["sd"] = summary["sd"].fillna(0.0)
    return summary


def attempts(tasks: pd.DataFrame, setting: Setting, run: str, test: str) -> pd.DataFrame:
    """The attempts (eval_tasks rows) of one run on one test set, or on all of them for POOLED."""
    tests = list(TEST_SETS) if test == POOLED else [test]
    return tasks[(tasks.model == setting.model) & (tasks.data == setting.data) & (tasks.run == run)
                 & tasks.test.isin(tests)]


def difference_columns(baseline: str, difference: Interval) -> dict:
    prefix = f"diff_{baseline}"
    return {prefix: difference.mean, f"{prefix}_ci_low": difference.low, f"{prefix}_ci_high": difference.high,
            f"{prefix}_n_tasks": difference.n_tasks, f"{prefix}_n_units": difference.n_units,
            f"{prefix}_matched_on": ",".join(difference.matched_on)}


def with_intervals(tree: ResultsTree, evals: pd.DataFrame, setting: Setting, runs: list[str],
                   baselines: dict[str, str]) -> pd.DataFrame:
    """The summary rows of `runs` in one setting (`evals`), plus a POOLED row for each run evaluated on every test
    set, with the 95% interval of pass@1 (ci_low, ci_high, n_tasks, n_seeds) and, per baseline run b, the paired
    difference to it (diff_b, diff_b_ci_low, diff_b_ci_high, diff_b_n_tasks, diff_b_n_units, diff_b_matched_on)."""
    evals = evals[evals.test.isin(TEST_SETS)]
    complete = {run for run, tests in evals.groupby("run").test if set(tests) == set(TEST_SETS)}
    pooled = [{"model": setting.model, "data": setting.data, "run": run, "test": POOLED, "mean": math.nan,
               "sd": math.nan, "rounds": evals[evals.run == run].rounds.sum()} for run in runs if run in complete]
    rows = pd.concat([evals[evals.run.isin(runs)], pd.DataFrame(pooled, columns=evals.columns)], ignore_index=True)
    tasks, records = tree.eval_tasks, []
    for row in rows.to_dict("records"):
        units = attempts(tasks, setting, row["run"], row["test"])
        interval = pass_at_1_interval(units)
        if row["test"] == POOLED:  # the mean over all attempts; SD over rounds is per test set only
            row["mean"] = interval.mean
        row.update(ci_low=interval.low, ci_high=interval.high, n_tasks=interval.n_tasks,
                   n_seeds=units.seed.nunique())
        for baseline in baselines:
            other = attempts(tasks, setting, baseline, row["test"])
            comparable = baseline != row["run"] and len(other) and (row["test"] != POOLED or baseline in complete)
            row.update(difference_columns(baseline, paired_difference(units, other) if comparable else NO_DIFFERENCE))
        records.append(row)
    return pd.DataFrame(records)


def number(value: float, signed: bool = False) -> str:
    return (f"{value:+.1f}" if signed else f"{value:.1f}").replace("-", "−")


def interval_text(mean: float, low: float, high: float, signed: bool = False) -> str:
    """"mean [low, high]" to one decimal; "[–]" where there is no interval (fewer than two tasks)."""
    bounds = NOT_AVAILABLE if math.isnan(low) else f"{number(low)}, {number(high)}"
    return f"{number(mean, signed)} [{bounds}]"


def cell_text(row: dict, baselines: dict[str, str]) -> str:
    """pass@1 with its interval, then a line per paired difference to a baseline (multi-line cells, see to_markdown)."""
    lines = [interval_text(row["mean"], row["ci_low"], row["ci_high"])]
    lines += [f"Δ {label} " + interval_text(row[f"diff_{b}"], row[f"diff_{b}_ci_low"], row[f"diff_{b}_ci_high"], True)
              for b, label in baselines.items() if not math.isnan(row[f"diff_{b}"])]
    return "\n".join(lines)


def pairing_notes(numbers: pd.DataFrame, baselines: dict[str, str]) -> list[str]:
    """A note naming the differences whose runs share no seed, so that seeds could not be matched."""
    unseeded = [f"{row['model']}/{row['data']} {row['run']} − {b} ({TEST_COLUMNS[row['test']]})"
                for row in numbers.to_dict("records") for b in baselines
                if row[f"diff_{b}_n_units"] and "seed" not in row[f"diff_{b}_matched_on"].split(",")]
    if not unseeded:
        return []
    return ["These runs share no seed with their baseline; their Δ matches (task, round) with each run's successes "
            "averaged over its seeds: " + ", ".join(unseeded) + "."]


def rank_marks(means: pd.Series) -> pd.Series:
    """BEST on the highest mean, SECOND on the next distinct one (ties share a mark), "" elsewhere."""
    distinct = sorted(means.dropna().unique(), reverse=True)
    marks = pd.Series("", index=means.index)
    if distinct:
        marks[means == distinct[0]] = BEST
    if len(distinct) > 1:
        marks[means == distinct[1]] = SECOND
    return marks


def eval_in_setting(summary: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    return summary[(summary.model == setting.model) & (summary.data == setting.data)]


def missing_eval(setting: Setting, run: str) -> str:
    return str(MissingInput(f"{setting.path}/eval/{run}/seed*/{{{','.join(TEST_SETS)}}}.json", "eval"))


def pass_at_1_rows(tree: ResultsTree, evals: pd.DataFrame, setting: Setting, runs: dict[str, str],
                   baselines: dict[str, str]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(cells, numbers, notes) of one setting (`evals`): a row per run in `runs` that was evaluated, a column per
    test set and the pooled one; the notes name what is missing."""
    evaluated = set(evals.run)
    present = [run for run in runs if run in evaluated]
    numbers = with_intervals(tree, evals, setting, present, baselines)
    numbers.insert(3, "row", numbers.run.map(runs))
    cells = pd.DataFrame(NOT_AVAILABLE, index=[runs[run] for run in present], columns=list(TEST_COLUMNS.values()))
    for row in numbers.to_dict("records"):
        cells.loc[row["row"], TEST_COLUMNS[row["test"]]] = cell_text(row, baselines)
    notes = [missing_eval(setting, run) for run in runs if run not in evaluated]
    notes += [f"Δ {label} not shown: {missing_eval(setting, run)}" for run, label in baselines.items()
              if run not in evaluated and run not in runs]
    return cells, numbers, notes + pairing_notes(numbers, baselines)


# ---------------------------------------------------------------------- Table 1


def method_rows() -> dict[str, str]:
    """run -> Table 1 row label: the SFT policy, then every declared method in report order."""
    return {**SFT_ROW, **{name: declared.label for name, declared in methods().items()}}


def unplaced_runs(runs) -> list[str]:
    """Notes for evaluated runs whose names are neither SFT nor a run depgpo.config.parse_run can place: listed,
    never silently dropped (a method evaluated under a name nobody declared)."""
    notes = []
    for run in sorted(set(runs) - set(SFT_ROW)):
        try:
            parse_run(run)
        except ValueError as e:
            notes.append(f"eval/{run} is in no table: {e} (declare the method: docs/extending.md)")
    return notes


def table1(tree: ResultsTree, focal: Setting) -> Table:
    """pass@1 of every method in every setting; best and second-best per setting and test set."""
    rows = method_rows()
    summary = pass_at_1_summary(tree)
    unplaced = unplaced_runs(summary.run)
    summary = summary[summary.run.isin(rows) & summary.test.isin(TEST_SETS)]
    if summary.empty:
        raise MissingInput(f"*/*/eval/{{{','.join(rows)}}}/seed*/{{{','.join(TEST_SETS)}}}.json", "eval")
    settings = [s for s in tree.settings if not eval_in_setting(summary, s).empty]
    methods = {run: label for run, label in rows.items() if run in set(summary.run)}
    columns = pd.MultiIndex.from_tuples([(s.label, test) for s in settings for test in TEST_COLUMNS.values()])
    cells = pd.DataFrame(NOT_AVAILABLE, index=list(methods.values()), columns=columns)
    means = pd.DataFrame(math.nan, index=list(methods.values()), columns=columns)
    notes = unplaced + [str(MissingInput(f"*/*/eval/{run}/seed*/*.json", "eval")) for run in rows
                        if run not in methods]
    frames = []
    for setting in settings:
        setting_cells, numbers, setting_notes = pass_at_1_rows(tree, eval_in_setting(summary, setting), setting,
                                                               methods, BASELINES)
        notes += setting_notes
        for row in numbers.to_dict("records"):
            cell = (row["row"], (setting.label, TEST_COLUMNS[row["test"]]))
            cells.loc[cell] = setting_cells.loc[row["row"], TEST_COLUMNS[row["test"]]]
            means.loc[cell] = row["mean"]
        frames.append(numbers)
    marks = means.apply(rank_marks)
    numbers = pd.concat(frames, ignore_index=True).rename(columns={"row": "method"})
    numbers["mark"] = [marks.loc[r.method, (Setting(r.model, r.data).label, TEST_COLUMNS[r.test])]
                       for r in numbers.itertuples()]
    caption = (f"Task performance on Terminal-Bench 2.0 and 2.1: {INTERVAL_CAPTION}. {DELTA_CAPTION} (GRPO, and "
               "SFT: the SFT policy). Bold and underlining mark the best and second-best mean per setting and test "
               "set.")
    return Table(caption, cells.rename_axis("Method"), numbers, marks, notes)


# ---------------------------------------------------------------------- Table 2


def placed_runs(runs) -> list[Run]:
    """The runs among `runs` that depgpo.config.parse_run can place (unplaced_runs notes the others)."""
    placed = []
    for run in sorted(set(runs)):
        try:
            placed.append(parse_run(run))
        except ValueError:
            continue
    return placed


def ablation_variants(runs: set[str]) -> dict[str, str]:
    """run -> row label of DepGPO's ablation runs (`depgpo_{variant}`), the paper's variants first."""
    variants = {run.ablation: run.name for run in placed_runs(runs) if run.method == "depgpo" and run.ablation}
    ordered = [v for v in ABLATIONS if v in variants] + sorted(v for v in variants if v not in ABLATIONS)
    return {variants[v]: ABLATIONS.get(v, v) for v in ordered}


def table2(tree: ResultsTree, focal: Setting) -> Table:
    """Ablations of the focal setting against GRPO and full DepGPO, with each run's paired difference to full
    DepGPO (the drop of a variant), to GRPO and to the SFT policy."""
    evals = eval_in_setting(pass_at_1_summary(tree), focal)
    variants = ablation_variants(set(evals.run))
    if not variants:
        raise MissingInput(f"{focal.path}/eval/depgpo_{{{','.join(ABLATIONS)}}}/seed*/*.json", "eval")
    runs = {"grpo": "GRPO", **variants, "depgpo": "Full DepGPO"}
    cells, numbers, notes = pass_at_1_rows(tree, evals, focal, runs, {"depgpo": "full", **BASELINES})
    caption = (f"Ablation study of {focal.label}: {INTERVAL_CAPTION}. {DELTA_CAPTION}; full: Full DepGPO (negative: "
               "a drop), SFT: the SFT policy.")
    return Table(caption, cells.rename_axis("Variant"), numbers, notes=notes)


# ---------------------------------------------------------------------- Table 9


def configured_beta(tree: ResultsTree, setting: Setting, run: str) -> float | None:
    """credit.beta of a run, from the config its done.json records (None when no seed has finished)."""
    for done in sorted(tree.root.glob(f"{setting.path}/rl/{run}/seed*/done.json")):
        return json.loads(done.read_text())["config"]["credit"]["beta"]
    return None


def table9(tree: ResultsTree, focal: Setting) -> Table:
    """The β sweep: `depgpo_beta{β}` runs and full DepGPO at its configured β."""
    evals = eval_in_setting(pass_at_1_summary(tree), focal)
    sweep = {run.name: run.beta for run in placed_runs(evals.run) if run.method == "depgpo" and run.beta is not None}
    if not sweep:
        raise MissingInput(f"{focal.path}/eval/depgpo{BETA_INFIX}*/seed*/*.json", "eval")
    notes = []
    if "depgpo" not in set(evals.run):
        notes.append(missing_eval(focal, "depgpo"))
    else:
        full_beta = configured_beta(tree, focal, "depgpo")
        if full_beta is None:
            done = MissingInput(f"{focal.path}/rl/depgpo/seed*/done.json", "rl")
            notes.append(f"full DepGPO's β is unknown: {done}")
        sweep["depgpo"] = math.inf if full_beta is None else full_beta  # an unknown β is listed last
    labels = {run: (f"{beta:.2f}" if math.isfinite(beta) else "?") + (" (full DepGPO)" if run == "depgpo" else "")
              for run, beta in sorted(sweep.items(), key=lambda item: item[1])}
    cells, numbers, row_notes = pass_at_1_rows(tree, evals, focal, labels, BASELINES)
    numbers["beta"] = numbers.run.map(sweep).replace(math.inf, math.nan)
    caption = (f"Sensitivity to the dependency-decay coefficient β on {focal.label}: {INTERVAL_CAPTION}. "
               f"{DELTA_CAPTION}; SFT: the SFT policy.")
    return Table(caption, cells.rename_axis("β"), numbers, notes=notes + row_notes)


# ---------------------------------------------------------------------- Table 10


def table10(tree: ResultsTree, focal: Setting) -> Table:
    """Cost of DepGPO relative to GRPO: wall-clock per update, peak memory, dependency processing per trajectory."""
    keys = ("time/update_s", "memory/peak_rss_mb")
    grpo, depgpo = tree.run_metrics(focal, "grpo", keys), tree.run_metrics(focal, "depgpo", (*keys, "time/credit_s"))
    notes = ["Memory is the trainer process's peak resident set size (the paper reports peak GPU memory); "
             "wall-clock per update includes the rollouts; dependency processing is the update's time/credit_s "
             "(credit and advantage computation) over the rollouts it logged."]
    time_ratio = depgpo["time/update_s"].mean() / grpo["time/update_s"].mean()
    # ru_maxrss only grows during a run: its peak is the last value; the seeds' peaks are averaged.
    memory_ratio = (depgpo.groupby("seed")["memory/peak_rss_mb"].max().mean()
                    / grpo.groupby("seed")["memory/peak_rss_mb"].max().mean())
    rows = [("Relative wall-clock time / update", "time_per_update_ratio", time_ratio),
            ("Peak memory (process RSS)", "peak_memory_ratio", memory_ratio)]
    cells = [["1.00 ×", f"{ratio:.2f} ×", f"{100 * (ratio - 1):+.1f}%"] for _, _, ratio in rows]  # GRPO: the base
    numbers = [{"metric": key, "grpo": 1.0, "depgpo": ratio, "difference_pct": 100 * (ratio - 1)}
               for _, key, ratio in rows]
    processing = NOT_AVAILABLE
    try:
        counts = tree.trajectories_per_update(focal, "depgpo")
    except MissingInput as missing:
        notes.append(f"dependency processing per trajectory needs the logged rollouts: {missing}")
    else:
        per_update = depgpo.merge(counts[counts.trajectories > 0], on=["seed", "update"])  # not skipped updates
        seconds = (per_update["time/credit_s"] / per_update["trajectories"]).mean()
        processing = f"{seconds:.3g} s"
        numbers.append({"metric": "dependency_processing_s_per_trajectory", "grpo": math.nan, "depgpo": seconds,
                        "difference_pct": math.nan})
    cells.append([NOT_AVAILABLE, processing, NOT_AVAILABLE])
    labels = [label for label, _, _ in rows] + ["Dependency processing / trajectory"]
    frame = pd.DataFrame(cells, index=pd.Index(labels, name="Metric"), columns=["GRPO", "DepGPO", "Difference"])
    caption = f"Computational cost of DepGPO relative to GRPO on {focal.label} (ratios of means over updates)."
    return Table(caption, frame, pd.DataFrame(numbers), notes=notes)


# ---------------------------------------------------------------------- Table 11

CREDIT = "credit/"
# Table 11 rows from the per-update means of the credit module's per-trajectory diagnostics
# (depgpo.credit.explain.trajectory_diagnostics): label -> (numerator, denominator or None, as a percentage).
TRACE_STATISTICS = {
    "Commands per trajectory": ("commands", None, False),
    "Trajectories with usable dependency credit": ("usable", None, True),
    "Write commands with positive credit": ("positive_write_commands", "write_commands", True),
    "Read commands with positive credit": ("positive_read_commands", "read_commands", True),
    "Positive-credit writes with indirect contribution": ("positive_writes_with_indirect", "positive_write_commands",
                                                          True),
}
FALLBACK_LABEL = "Trajectories using the unit-factor fallback"


ENVIRONMENT_ROWS = {"env/tampered_frac": "Episodes whose verifier ran agent-planted code (docs/threat-model.md)",
                    "env/harness_failed_frac": "Episodes ended by a harness failure (reward 0)"}


def table11(tree: ResultsTree, focal: Setting) -> Table:
    """Trace statistics of the DepGPO run, from its `credit/` metrics pooled over updates and seeds."""
    metrics = tree.run_metrics(focal, "depgpo")
    # Updates without credit keys (skipped ones) and keys no update reported are left out.
    credit = metrics[[c for c in metrics.columns if c.startswith(CREDIT)]].dropna(how="all").dropna(axis=1, how="all")
    if credit.empty:
        raise MissingInput(f"{focal.path}/rl/depgpo/seed*/metrics.jsonl with credit/ keys", "rl")
    keys = {c.removeprefix(CREDIT) for c in credit.columns}
    # Shares are ratios of summed per-update means: each update weighs alike, as each has the same batch size.
    rows, used = [], set()
    for label, (part, whole, percent) in TRACE_STATISTICS.items():
        if part not in keys or (whole is not None and whole not in keys):
            continue
        value = credit[CREDIT + part].sum() / (credit[CREDIT + whole].sum() if whole else len(credit))
        rows.append((label, CREDIT + part, 100 * value if percent else value, percent))
        used |= {part, whole} - {None}
        if part == "usable":
            rows.append((FALLBACK_LABEL, CREDIT + "usable", 100 * (1 - value), True))
    # A "key=value" rate is absent from an update where no trajectory had that value: there it is 0.
    rows += [(CREDIT + key, CREDIT + key, credit[CREDIT + key].fillna(0).mean() if "=" in key
              else credit[CREDIT + key].mean(), False) for key in sorted(keys - used)]
    for key, label in ENVIRONMENT_ROWS.items():  # the environment's own health, same pooling
        if key in metrics.columns and metrics[key].notna().any():
            rows.append((label, key, 100 * metrics[key].dropna().mean(), True))
    note = (f"Rows named credit/… are further per-trajectory diagnostics, averaged over the {len(credit)} "
            "updates of all seeds; the others pool the updates' per-trajectory means.")
    return statistics_table(f"Dependency-trace statistics of DepGPO on {focal.label}.", rows, [note])


def statistics_table(caption: str, rows: list[tuple[str, str, float, bool]], notes: list[str]) -> Table:
    """A one-column table of (label, source key, value, is a percentage) rows, as Table 11 prints them; also
    used by `depgpo report --trajectories` (depgpo.report.corpus). A share with nothing to count (NaN) shows –."""
    cells = pd.DataFrame({"Value": [NOT_AVAILABLE if math.isnan(v) else f"{v:.1f}%" if percent else f"{v:.3g}"
                                    for _, _, v, percent in rows]},
                         index=pd.Index([label for label, *_ in rows], name="Statistic"))
    numbers = pd.DataFrame([{"statistic": label, "source": key, "value": v, "percent": percent}
                            for label, key, v, percent in rows], columns=["statistic", "source", "value", "percent"])
    return Table(caption, cells, numbers, notes=notes)


# ---------------------------------------------------------------------- Table 6

FILTER_ROWS = {"candidates": "Candidate tasks", "zero_success": "Zero successful attempts",
               "all_success": "All attempts successful", "retained": "Retained tasks",
               "rl_train": "RL training tasks", "rl_val": "RL validation tasks"}


def table6(tree: ResultsTree, focal: Setting) -> Table:
    """Task selection counts of every setting's filter stage."""
    summaries, notes = {}, []
    for setting in tree.settings:
        try:
            summaries[setting.label] = tree.filter_summary(setting)
        except MissingInput as missing:
            notes.append(str(missing))
    if not summaries:
        raise MissingInput("*/*/filter/filter.json", "filter")
    cells = pd.DataFrame({label: [str(summary[key]) for key in FILTER_ROWS] for label, summary in summaries.items()},
                         index=pd.Index(list(FILTER_ROWS.values()), name="Setting"))
    numbers = pd.DataFrame([{"setting": label, **{key: summary[key] for key in (*FILTER_ROWS, "attempts")}}
                            for label, summary in summaries.items()])
    attempts = sorted({summary["attempts"] for summary in summaries.values()})
    caption = f"Task selection with {' / '.join(map(str, attempts))} attempts per candidate task."
    return Table(caption, cells, numbers, notes=notes)


# ---------------------------------------------------------------------- rendering
