"""The paper's figures 1(a, b, d), 5 and 6 drawn from a results tree, each saved as PNG and PDF.

Figures are built on `matplotlib.figure.Figure` directly (no pyplot), so no display and no global figure state
are involved. A builder that finds none of its inputs raises MissingInput; inputs it can do without become notes.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from depgpo.algos.methods import estimators, methods
from depgpo.report.load import MissingInput, ResultsTree, Setting
from depgpo.report.rl_gain import FROZEN, gain_interval, paired_gains, rl_vs_frozen
from depgpo.report.stats import Interval, match_attempts, paired_difference
from depgpo.report.tables import TEST_SETS

REWARD = "train/reward_mean"
TRAINING_PANELS = [(REWARD, "(a) training reward", False),
                   ("actor/entropy", "(b) policy entropy", True),
                   ("actor/grad_norm", "(c) gradient norm", False)]
STEP_FACTOR_STD = "depgpo/step_factor_std"
LATE_WINDOW = 1 / 3  # Figure 5's shaded late window: the last third of the updates
MIN_REFERENCE_COMMANDS = 5  # Figure 1(d)'s subset of longer reference trajectories
GAIN, LOSS, TIE, ZERO_SIGNAL, SIGNAL, GUIDE = "tab:green", "tab:orange", "tab:gray", "tab:gray", "tab:blue", "hotpink"


@dataclass
class Plot:
    figure: Figure
    notes: list[str] = field(default_factory=list)

    def write(self, out: Path, name: str) -> list[Path]:
        paths = [out / f"{name}.png", out / f"{name}.pdf"]
        for path in paths:
            self.figure.savefig(path, dpi=150)
        return paths


# ---------------------------------------------------------------------- Figure 1


def fig1a(tree: ResultsTree, focal: Setting) -> Plot:
    """How many candidate tasks the SFT policy solved 0..K times; 0 and K give a zero group-relative advantage."""
    summary = tree.filter_summary(focal)
    attempts = summary["attempts"]
    counts = pd.Series(summary["success_counts"], dtype=int).value_counts().reindex(range(attempts + 1),
                                                                                  fill_value=0)
    figure = Figure(figsize=(4.5, 3.2), layout="constrained")
    ax = figure.subplots()
    ax.bar(counts.index, counts.values,
           color=[ZERO_SIGNAL if k in (0, attempts) else SIGNAL for k in counts.index])
    ax.set_xticks(counts.index)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"successful attempts out of K = {attempts}")
    ax.set_ylabel("candidate tasks")
    ax.set_title(f"{focal.label}: zero advantage on {summary['zero_advantage_fraction']:.0%} of tasks", fontsize=9)
    return Plot(figure)


def fig1b(tree: ResultsTree, focal: Setting) -> Plot:
    """How often a GiGPO anchor state recurs in another rollout of the same group, by turn."""
    recurrence, reconstructed = tree.anchor_recurrence(focal, "gigpo")
    if recurrence.empty:
        raise MissingInput(f"{focal.path}/rl/gigpo/seed*/trajectories/update*.jsonl with turns", "rl")
    by_turn = recurrence.groupby("turn").recurs.mean()
    later_turns = recurrence[recurrence.turn > 0].recurs
    figure = Figure(figsize=(4.5, 3.2), layout="constrained")
    ax = figure.subplots()
    ax.bar(by_turn.index, by_turn.values, color=methods()["gigpo"].color)
    ax.set_ylim(0, 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("turn")
    ax.set_ylabel("share of turns with a recurring anchor")
    later = f"{later_turns.mean():.0%}" if len(later_turns) else "none"
    ax.set_title(f"{focal.label}, GiGPO\nanchor recurs in the group: {later} of {len(later_turns)} turns after turn 0",
                 fontsize=9)
    notes = [f"{len(recurrence)} turns of the logged GiGPO rollouts; turn 0 always acts on the shared instruction."]
    if reconstructed:
        notes.append("Anchor keys are not stored in the trajectories; they were reconstructed as the agent loop "
                     "builds them: the instruction for turn 0, then the observation of the previous turn's command.")
    return Plot(figure, notes)


def ecdf(ax: Axes, values: pd.Series, label: str) -> None:
    """The empirical CDF of fractions, drawn over the whole range [0, 1]."""
    ordered = values.sort_values().tolist()
    cumulative = [(i + 1) / len(ordered) for i in range(len(ordered))]
    ax.step([0.0, *ordered, 1.0], [0.0, *cumulative, 1.0], where="post", label=label)


def fig1d(tree: ResultsTree, focal: Setting) -> Plot:
    """Cumulative distribution of the fraction of commands connected to E in passing reference trajectories."""
    reference = tree.reference_credit(focal)
    return connected_fraction_plot(reference[reference.reward >= 1.0], "passing reference",
                                   f"{focal.label}: passing reference trajectories")


def connected_fraction_plot(trajectories: pd.DataFrame, kind: str, title: str) -> Plot:
    """Figure 1(d)'s panel: the ECDF of `connected_fraction` over `trajectories` (columns commands and
    connected_fraction), and over those with at least MIN_REFERENCE_COMMANDS commands. `kind` names the
    trajectories in the notes; also drawn by `depgpo report --trajectories` (depgpo.report.corpus)."""
    longer = trajectories[trajectories.commands >= MIN_REFERENCE_COMMANDS]
    figure = Figure(figsize=(4.5, 3.2), layout="constrained")
    ax = figure.subplots()
    notes = []
    for subset, label in ((trajectories, "all"), (longer, f"≥ {MIN_REFERENCE_COMMANDS} commands")):
        if subset.empty:
            notes.append(f"no {kind} trajectory in the subset '{label}'")
            continue
        ecdf(ax, subset.connected_fraction, f"{label} (n={len(subset)})")
    ax.axvline(1.0, color=GUIDE, linestyle="--", label="GRPO: uniform weights on every command")
    ax.set_xlim(0, 1.05)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("fraction of commands connected to E")
    ax.set_ylabel("cumulative fraction of trajectories")
    ax.set_title("\n".join(textwrap.wrap(title, 64)), fontsize=9)  # a corpus name can be long
    ax.legend(fontsize=7, loc="upper left")
    return Plot(figure, notes)


# ---------------------------------------------------------------------- Figure 5


def seeds_label(label: str, metrics: pd.DataFrame) -> str:
    seeds = metrics.seed.nunique()
    return f"{label}, {seeds} seeds" if seeds > 1 else label


def plot_curve(ax: Axes, metrics: pd.DataFrame, key: str, label: str, color: str, linestyle: str = "-") -> None:
    """The mean over seeds per update; with several seeds, a band from their minimum to their maximum (with three
    seeds a 95% t-interval would reach far beyond the seeds drawn)."""
    per_update = metrics.groupby("update")[key]
    mean = per_update.mean()
    ax.plot(mean.index, mean.values, label=label, color=color, linewidth=1.2, linestyle=linestyle)
    if metrics.seed.nunique() > 1:
        ax.fill_between(mean.index, per_update.min(), per_update.max(), color=color, alpha=0.15, linewidth=0)


def shade_late_window(ax: Axes, updates: pd.Series) -> None:
    first, last = updates.min(), updates.max()
    ax.axvspan(last - (last - first) * LATE_WINDOW, last, color="0.85", zorder=0)


def gain_over_frozen(metrics: pd.DataFrame, frozen: pd.DataFrame) -> float:
    """Mean training reward minus the frozen twin's over the (seed, update ≥ 1) pairs both have, as rl_vs_frozen
    takes it (depgpo.report.rl_gain): the part of the reward that the updates made, draws and sampling seeds held
    equal."""
    return gain_interval(paired_gains(metrics, frozen, REWARD)).mean  # NaN without a pair


def fig5(tree: ResultsTree, focal: Setting) -> Plot:
    """Training reward, entropy (log scale) and gradient norm of DepGPO, GRPO and GiGPO; DepGPO's step-factor std.
    Where the `frozen` control ran, panel (a) also shows it, and each label gives the method's mean gain over it."""
    runs, notes = {}, []
    drawn = [m for m in methods().values() if m.training_curve is not None]
    curves = {m.name: m for m in sorted(drawn, key=lambda m: m.training_curve)}
    for run in curves:
        try:
            runs[run] = tree.run_metrics(focal, run)
        except MissingInput as missing:
            notes.append(str(missing))
    if not runs:
        raise MissingInput(f"{focal.path}/rl/{{{','.join(curves)}}}/seed*/metrics.jsonl", "rl")
    try:
        frozen = tree.run_metrics(focal, FROZEN, (REWARD,))
    except MissingInput:  # the control is optional (config `controls`); the paper's grid has none
        frozen = None
    updates = pd.concat([metrics["update"] for metrics in runs.values()])
    figure = Figure(figsize=(16 if frozen is None else 20, 3.4), layout="constrained")
    axes = figure.subplots(1, 4 if frozen is None else 5)
    panels = [*TRAINING_PANELS, (STEP_FACTOR_STD, "(d) DepGPO step-factor std", False)]
    for ax, (key, title, log_scale) in zip(axes, panels):
        for run, metrics in runs.items():
            if key == STEP_FACTOR_STD and "step_factors" not in estimators()[curves[run].estimator].turn_inputs:
                continue
            if key not in metrics or metrics[key].isna().all():
                notes.append(f"{focal.path}/rl/{run}: metrics.jsonl has no '{key}'")
                continue
            label, color = seeds_label(curves[run].label, metrics), curves[run].color
            gain = gain_over_frozen(metrics, frozen) if key == REWARD and frozen is not None else math.nan
            if not math.isnan(gain):  # nan: no (seed, update) in common with the control
                label = f"{label} ({100 * gain:+.1f} points vs frozen)"
            plot_curve(ax, metrics.dropna(subset=[key]), key, label, color)
        if key == REWARD and frozen is not None:
            plot_curve(ax, frozen, key, seeds_label("SFT policy, frozen (same draws)", frozen), "0.4", linestyle="--")
        shade_late_window(ax, updates)
        if log_scale:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("update")
    axes[0].legend(fontsize=8)
    if frozen is not None:
        draw_gains(axes[4], rl_vs_frozen(tree, focal).numbers, curves)
    figure.suptitle(f"{focal.label}: mean over seeds per update, band: min–max over seeds (grey: the last third of "
                    "the updates)", fontsize=10)
    return Plot(figure, notes)


def draw_gains(ax: Axes, gains: pd.DataFrame, curves: dict) -> None:
    """Panel (e): each run's training reward minus the frozen control's (rl_vs_frozen.csv) with its 95% interval."""
    gains = gains.sort_values("diff").reset_index(drop=True)
    for y, row in enumerate(gains.to_dict("records")):
        color = curves[row["run"]].color if row["run"] in curves else "0.3"
        below, above = (0.0 if math.isnan(v) else v  # no interval with one seed: a bare point
                        for v in (row["diff"] - row["ci_low"], row["ci_high"] - row["diff"]))
        ax.errorbar(row["diff"], y, xerr=[[below], [above]], fmt="o", color=color, markersize=4, capsize=2)
    ax.axvline(0, color="0.4", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(gains)), labels=gains.run, fontsize=7)
    ax.set_ylim(-0.75, len(gains) - 0.25)
    ax.set_title("(e) training reward − frozen control's", fontsize=10)
    ax.set_xlabel("points, 95% t-interval over seeds")


# ---------------------------------------------------------------------- Figure 6


def success_difference(tasks: pd.DataFrame) -> pd.Series:
    """Per task: DepGPO's minus GRPO's success rate (percentage points) over their matched attempts (the same
    rounds and seeds, as stats.paired_difference matches them), sorted."""
    matched, _ = match_attempts(tasks[tasks.run == "depgpo"], tasks[tasks.run == "grpo"])
    difference = (matched.success_a - matched.success_b).groupby(matched.task).mean() * 100
    return difference.sort_values(ascending=False)


def draw_differences(ax: Axes, difference: pd.Series, mean: Interval, title: str) -> None:
    """The sorted per-task differences; the dashed line and its band: the paired mean Δ and its 95% interval."""
    positions = range(len(difference))
    changed = difference != 0
    ax.bar([p for p, c in zip(positions, changed) if c], difference[changed],
           color=[GAIN if d > 0 else LOSS for d in difference[changed]])
    ax.scatter([p for p, c in zip(positions, changed) if not c], difference[~changed], color=TIE, s=8, zorder=3)
    interval = "no interval (one task)" if math.isnan(mean.low) else f"95% CI [{mean.low:.1f}, {mean.high:.1f}] shaded"
    units = "attempts" if "seed" in mean.matched_on else "(task, round) pairs, seeds averaged"
    ax.axhline(mean.mean, color="black", linestyle="--", linewidth=1,
               label=f"mean Δ = {mean.mean:+.1f} pp, {interval}\n(paired on {mean.n_units} {units}, tasks resampled)")
    if not math.isnan(mean.low):
        ax.axhspan(mean.low, mean.high, color="black", alpha=0.08, linewidth=0)
    for position in (0, len(difference) - 1):  # the largest gain and the largest regression
        if difference.iloc[position] != 0:
            ax.annotate(difference.index[position], (position, difference.iloc[position]), fontsize=7,
                        ha="left" if position == 0 else "right", textcoords="offset points", xytext=(0, 3))
    ax.axhline(0, color="0.6", linewidth=0.6)
    ax.set_xticks([])
    ax.set_xlabel(f"{len(difference)} tasks, sorted by Δ")
    ax.set_ylabel("Δ success (pp), DepGPO − GRPO")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)


def fig6(tree: ResultsTree, focal: Setting) -> Plot:
    """Task-level success differences between DepGPO and GRPO, one panel per test set."""
    tasks = tree.eval_tasks
    tasks = tasks[(tasks.model == focal.model) & (tasks.data == focal.data) & tasks.run.isin(["depgpo", "grpo"])]
    for run in ("depgpo", "grpo"):
        if run not in set(tasks.run):
            raise MissingInput(f"{focal.path}/eval/{run}/seed*/{{{','.join(TEST_SETS)}}}.json", "eval")
    differences = {test: success_difference(tasks[tasks.test == test]) for test in TEST_SETS}
    tests = [test for test in TEST_SETS if len(differences[test])]
    if not tests:
        raise MissingInput(f"{focal.path}/eval/{{depgpo,grpo}}/seed*/ on a common test set and task", "eval")
    figure = Figure(figsize=(6 * len(tests), 3.4), layout="constrained")
    axes = figure.subplots(1, len(tests), squeeze=False)[0]
    for panel, (ax, test) in enumerate(zip(axes, tests)):
        on_test = tasks[tasks.test == test]
        mean = paired_difference(on_test[on_test.run == "depgpo"], on_test[on_test.run == "grpo"])
        draw_differences(ax, differences[test], mean, f"({'ab'[panel]}) {TEST_SETS[test]}, {focal.label}")
    notes = [f"{TEST_SETS[test]}: no task evaluated for both DepGPO and GRPO"
             for test in TEST_SETS if test not in tests]
    return Plot(figure, notes)
