"""Credit weightings scored against counterfactual ground truth (docs/replay.md#scores), from the JSON objects of
`depgpo counterfactual --format json --out DIR` and their kept replays: no command is replayed again.

A weighting gives every command a score and every turn a step factor. Scored: full DepGPO and its ablations
(`credit.VARIANTS`) at the default β, DepGPO at each β of the sweep, and three weightings without dependencies:
GRPO's uniform factors, the last command only, and GiGPO's step advantages where defined (among the rollout's logged
group when counterfactual-sample kept it, else the trajectory alone: _gigpo).

    weighting   command score                        turn weight (the mass)
    depgpo      q(c), recomputed on the kept replay   f_t (credit_with_fallback: a fallback gives unit factors)
    uniform     1                                     1
    last        1 for the last command, else 0        T on the last command's turn, else 0 (mean 1, as f_t)
    gigpo       A_t, the step advantage of its turn   |A_t|
                (-A_t in a failure: the blame)

The label is the counterfactual's: a command of a trajectory with reward > 0 is labelled when it is *necessary*
(removing it lowered the reward); a command of a failed trajectory (reward 0) when it is *harmful* (removing it
raised the reward), since removing a command cannot lower a reward of 0. The two outcomes are scored apart, never
pooled. A success whose object holds a minimal sufficient set (counterfactual (e), replay.subsets) is scored a
second time, against it: a command is labelled when it is in the set, the label that sees redundancy (of two writes
that each suffice, removal labels neither, the set one). Per weighting, outcome and label:

    precision   labelled commands among those with a positive score
    recall      commands with a positive score among the labelled
    auroc       over the pairs (labelled, unlabelled command) of the same trajectory: the share where the labelled
                one scores higher, ties half. A trajectory whose commands are all of one class has no pair: it adds
                nothing, and with none anywhere the AUROC is undefined (NaN)
    mass        the share of the turn weights on turns that hold a labelled command

each a ratio of sums over the trajectories, with a 95% interval from the cluster bootstrap that resamples tasks
(report.stats.cluster_ratio_bootstrap): a task brings all its trajectories' commands along. Trajectories whose
replay was not reproducible are left out (their necessity is not reliable) and counted.

A trajectory replayed under a removal budget (`depgpo counterfactual --removals N`) labels only the commands it
removed; each carries `weight`, the inverse of its chance of removal (0: no label). Every count is weighted by it
(a pair by the product of its two), so the ratios estimate what removing every command would give; the mass needs
every turn's label and counts only trajectories whose commands were all removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from depgpo.algos.advantages import anchor_group_advantages, discounted_returns
from depgpo.credit import VARIANTS, CreditConfig, credit_with_fallback
from depgpo.report.load import turn_anchors
# Re-exported: report.corpus, report.disagreements and the tests read the objects through this module.
from depgpo.report.score_input import FIX, Counterfactual, read_counterfactuals  # noqa: F401
from depgpo.report.stats import cluster_ratio_bootstrap

METRICS = ("precision", "recall", "auroc", "mass")
OUTCOMES = {"success": "necessary", "failure": "harmful"}  # outcome -> what its removal label marks
SUBSET_LABEL = "in_sufficient_set"  # a success's second label: in the minimal sufficient set (e)
SCORED = (("success", "necessary"), ("success", SUBSET_LABEL), ("failure", "harmful"))  # the table's column groups
GIGPO_GAMMA = 0.95  # GiGPO's discount (algos.advantages.compute_gigpo_advantage's default, config/method/gigpo.yaml)


@dataclass(frozen=True)
class Weighting:
    name: str    # the CSV key
    label: str   # the table's row label
    kind: str    # depgpo | uniform | last | gigpo
    config: CreditConfig | None = None


def weightings(betas: list[float] | tuple[float, ...] = ()) -> list[Weighting]:
    """Full DepGPO, its ablations, DepGPO at each other β and with a whole rewrite resetting survival, then the
    weightings without dependencies."""
    default = CreditConfig().beta
    rows = [Weighting("depgpo" if v == "full" else f"depgpo_{v}", "DepGPO" if v == "full" else f"DepGPO {v}",
                      "depgpo", CreditConfig(variant=v)) for v in VARIANTS]
    rows += [Weighting(f"depgpo_beta{b:g}", f"DepGPO β={b:g}", "depgpo", CreditConfig(beta=float(b)))
             for b in sorted(set(map(float, betas))) if b != default]
    # The other reading of a whole rewrite (docs/credit-decisions.md#d-rewrite): earlier writers' lines are replaced.
    rows.append(Weighting("depgpo_rewrite_reset", "DepGPO, rewrite resets", "depgpo",
                          CreditConfig(survival_after_rewrite="reset")))
    return rows + [Weighting("uniform", "GRPO (uniform)", "uniform"), Weighting("last", "Last command only", "last"),
                   Weighting("gigpo", "GiGPO step advantage", "gigpo")]


# ---------------------------------------------------------------------- weights


def labels(result: Counterfactual) -> tuple[str, list[bool]]:
    """The outcome and each command's label (necessary for a success, harmful for a failure)."""
    if result.reward > 0:
        return "success", [bool(c["necessary"]) for c in result.commands]
    return "failure", [(c["reward_without"] or 0.0) > result.reward for c in result.commands]


def turn_count(result: Counterfactual) -> int:
    """Model turns of the kept replay: its `num_turns`, at least one past its last command's turn."""
    return max(int(result.trajectory.get("num_turns") or 0), max(c["turn"] for c in result.commands) + 1)


def weights(weighting: Weighting, result: Counterfactual) -> tuple[list[float], list[float], str | None] | None:
    """(score per command, weight per turn, the credit's fallback reason), or None where the weighting is undefined
    for this trajectory (GiGPO without a recurring anchor state)."""
    trajectory, commands = result.trajectory, result.commands
    num_turns = turn_count(result)
    if weighting.kind == "depgpo":
        credit = credit_with_fallback(trajectory, weighting.config, num_turns)
        q = {c.index: c.q for c in credit.commands}  # empty on a fallback: nothing credited, unit factors
        return [q.get(c["index"], 0.0) for c in commands], list(credit.step_factors), credit.fallback
    if weighting.kind == "uniform":
        return [1.0] * len(commands), [1.0] * num_turns, None
    if weighting.kind == "last":
        last = max(range(len(commands)), key=lambda k: commands[k]["index"])
        turns = [0.0] * num_turns
        turns[commands[last]["turn"]] = float(num_turns)
        return [1.0 if k == last else 0.0 for k in range(len(commands))], turns, None
    if weighting.kind == "gigpo":
        return _gigpo(result, num_turns)
    raise ValueError(f"unknown weighting kind {weighting.kind!r}")


def _gigpo(result: Counterfactual, num_turns: int):
    """GiGPO's step advantages (mean_std_norm, config/method/gigpo.yaml): a turn's discounted return normalised
    among the turns of its task group that acted on the same anchor state. With the logged group
    (counterfactual-sample's `gigpo_group`), the advantages the rollout had among its group's rollouts, by logged
    turn (the replay keeps the logged turns). Without one, the trajectory is its own group: a step advantage exists
    only where it revisits a state with another return. None where every step advantage is 0 (undefined)."""
    group = result.gigpo_group
    if group is not None:
        anchors, rewards, member = group["anchor_keys"], group["rewards"], group["member"]
    else:
        anchors, rewards, member = [turn_anchors(dict(result.trajectory, num_turns=num_turns))], [result.reward], 0
    returns = [discounted_returns([0.0] * (len(keys) - 1) + [reward], GIGPO_GAMMA) if keys else []
               for keys, reward in zip(anchors, rewards)]
    advantages = anchor_group_advantages(np.zeros(len(anchors)), anchors, returns, normalise_by_std=True)[member]
    if not any(advantages):
        return None
    per_turn = [advantages[t] if t < len(advantages) else 0.0 for t in range(num_turns)]
    # A failure's score is the blame, as DepGPO's factors scale a negative advantage: the lower A_t, the more.
    sign = 1.0 if labels(result)[0] == "success" else -1.0
    return [sign * per_turn[c["turn"]] for c in result.commands], [abs(a) for a in per_turn], None


def trajectory_counts(scores: list[float], turn_weights: list[float], turns: list[int],
                      labelled: list[bool], sample_weights: list[float] | None = None,
                      sample: tuple[int, int] | None = None) -> dict[str, float]:
    """The numerators and denominators of the four metrics for one trajectory. `sample_weights`: the commands'
    removal weights (None: every command removed, weight 1); `sample`: (others, drawn), the sizes of the uniform
    sample of uncredited commands they come from, for the pairs drawn together."""
    w = sample_weights if sample_weights is not None else [1.0] * len(scores)
    others, drawn = sample or (1, 1)
    # Two commands of the sample are drawn together with chance drawn(drawn-1)/(others(others-1)), not (drawn/others)².
    together = others * (others - 1) / (drawn * (drawn - 1)) if drawn > 1 else 0.0
    positive = [s > 0 for s in scores]
    wins = pairs = 0.0
    for i, (s_label, is_label, w_label) in enumerate(zip(scores, labelled, w)):
        if not is_label or not w_label:
            continue
        for j, (s_other, other, w_other) in enumerate(zip(scores, labelled, w)):
            if other or not w_other:
                continue
            both_drawn = w_label != 1.0 and w_other != 1.0
            weight = together if both_drawn else w_label * w_other
            pairs += weight
            wins += weight * (1.0 if s_label > s_other else 0.5 if s_label == s_other else 0.0)
    hit = sum(wk for p, y, wk in zip(positive, labelled, w) if p and y)
    whole = all(wk == 1.0 for wk in w)  # the mass needs every turn's label
    labelled_turns = {t for t, is_label in zip(turns, labelled) if is_label}
    return {"precision_num": hit, "precision_den": sum(wk for p, wk in zip(positive, w) if p),
            "recall_num": hit, "recall_den": sum(wk for y, wk in zip(labelled, w) if y),
            "auroc_num": wins, "auroc_den": pairs,
            "mass_num": sum(tw for t, tw in enumerate(turn_weights) if t in labelled_turns) if whole else 0.0,
            "mass_den": sum(turn_weights) if whole else 0.0}


def label_sets(result: Counterfactual) -> list[tuple[str, str, list[bool], list[float], tuple[int, int] | None]]:
    """(outcome, label, each command's label, its weight, the removal sample) for every label the trajectory has:
    the removal label (necessary or harmful, weighted by the chance of removal), and for a success with (e) the
    minimal sufficient set's (weight 0 where the --subsets budget left a command undecided)."""
    outcome, labelled = labels(result)
    sets = [(outcome, OUTCOMES[outcome], labelled, [float(c.get("weight", 1.0)) for c in result.commands],
             result.removal_sample)]
    if outcome == "success" and result.in_sufficient_set is not None:
        sets.append((outcome, SUBSET_LABEL, [bool(x) for x in result.in_sufficient_set],
                     [0.0 if x is None else 1.0 for x in result.in_sufficient_set], None))
    return sets


def score_frame(results: list[Counterfactual], weighting_list: list[Weighting]) -> pd.DataFrame:
    """One row per (weighting, trajectory, label): task, outcome, label, commands, labelled, fallback, the metrics'
    counts; undefined (GiGPO) rows have NaN counts. Unreproducible trajectories are left out (table_scores counts
    them)."""
    rows = []
    for number, result in enumerate(r for r in results if r.reproducible):
        turns = [c["turn"] for c in result.commands]
        sets = label_sets(result)
        for weighting in weighting_list:
            computed = weights(weighting, result)  # once for every label: DepGPO's credit is the costly part
            for outcome, label, labelled, sample_weights, sample in sets:
                row = {"weighting": weighting.name, "trajectory": number, "source": result.path, "task": result.task,
                       "outcome": outcome, "label": label, "commands": len(turns), "labelled": sum(labelled),
                       "fallback": None, "defined": False}
                if computed is not None:
                    scores, turn_weights, fallback = computed
                    row.update(trajectory_counts(scores, turn_weights, turns, labelled, sample_weights, sample),
                               fallback=fallback, defined=True)
                rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Score:
    value: float
    low: float
    high: float


def summarise(frame: pd.DataFrame) -> dict[str, Score]:
    """The four metrics of one (weighting, outcome) slice, each with its 95% task-resampling interval."""
    defined = frame[frame.defined]
    tasks = defined.task.to_numpy()
    return {metric: Score(*cluster_ratio_bootstrap(tasks, defined[f"{metric}_num"].to_numpy(dtype=float),
                                                   defined[f"{metric}_den"].to_numpy(dtype=float)))
            for metric in METRICS}


# ---------------------------------------------------------------------- the report's table and figure

COUNTERFACTUAL_GLOB = "counterfactual/*.jsonl"  # under {model}/{data}: rule `counterfactual` (docs/pipeline.md)
METRIC_LABELS = {"precision": "Precision", "recall": "Recall", "auroc": "AUROC", "mass": "Mass on labelled"}
GROUP_LABELS = {("success", "necessary"): "Successes (necessary)",
                ("success", SUBSET_LABEL): "Successes (in minimal sufficient set)",
                ("failure", "harmful"): "Failures (harmful)"}


def scored(tree, focal) -> tuple[pd.DataFrame, list[str]]:
    """The score frame of the focal setting's counterfactual results and the notes about them; computed once per
    tree (the table and the figure share it). Raises MissingInput without results, BadInput on a malformed one."""
    from depgpo.config import parse_run
    from depgpo.report.load import MissingInput

    cache = tree.__dict__.setdefault("_credit_scores", {})
    if focal in cache:
        return cache[focal]
    paths = sorted(tree.root.glob(f"{focal.path}/{COUNTERFACTUAL_GLOB}"))
    if not paths:
        raise MissingInput(f"{focal.path}/{COUNTERFACTUAL_GLOB}", "counterfactual")
    results = [result for path in paths for result in read_counterfactuals(path)]
    if not any(result.reproducible for result in results):
        raise MissingInput(f"{focal.path}/{COUNTERFACTUAL_GLOB} with a reproducible result ({len(results)} results "
                           f"in {len(paths)} files, none reproducible)", "counterfactual")
    sweep = [run.beta for path in tree.root.glob(f"{focal.path}/rl/depgpo_beta*")
             if (run := _run_or_none(parse_run, path.name)) is not None and run.beta is not None]
    cache[focal] = frame_and_notes(results, paths, sweep)
    return cache[focal]


def frame_and_notes(results: list[Counterfactual], paths: list[Path],
                    betas: list[float] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The score frame of counterfactual results read from `paths`, and the notes about them; `betas`: those of
    the β sweep's runs (none: the config's sweep, said in a note)."""
    swept = bool(betas)
    if not swept:  # the sweep's runs are not in the tree: score the config's sweep
        from depgpo.config import compose
        betas = [float(beta) for beta in compose([]).betas]
    frame = score_frame(results, weightings(betas))
    unreproducible = sum(not r.reproducible for r in results)
    kept = frame.drop_duplicates("trajectory")
    notes = [f"{len(results)} counterfactual results in {len(paths)} files ({', '.join(p.name for p in paths)}); "
             f"{(kept.outcome == 'success').sum()} successes and {(kept.outcome == 'failure').sum()} failures over "
             f"{kept.task.nunique()} tasks scored; {sum(r.gigpo_group is not None for r in results)} results carry "
             "their logged GiGPO group"]
    if unreproducible:
        notes.append(f"{unreproducible} trajectories left out: their replay's reward was not reproducible, so their "
                     "necessity is not reliable")
    sampled = [r for r in results if r.reproducible and r.removal_sample is not None]
    if sampled:
        notes.append(f"{len(sampled)} trajectories replayed under a removal budget (--removals): counts weighted by "
                     "the inverse chance of removal; their turns are left out of the mass")
    subset = [r for r in results if r.reproducible and r.in_sufficient_set is not None]
    if subset:
        undecided = sum(None in r.in_sufficient_set for r in subset)
        notes.append(f"{len(subset)} successes carry a minimal sufficient set (replays of subsets), scored as a "
                     f"second label; {undecided} of them left commands undecided (--subsets budget), unlabelled")
    if not swept:
        notes.append("no β-sweep run in the results tree: the β rows are the config's `betas` "
                     f"({', '.join(f'{b:g}' for b in betas if b != CreditConfig().beta)}; "
                     f"{CreditConfig().beta:g} is full DepGPO's)")
    return frame, notes


def _run_or_none(parse_run, name: str):
    try:
        return parse_run(name)
    except ValueError:
        return None


def table_scores(tree, focal):
    """Precision, recall, AUROC and mass of each weighting against the counterfactual labels, by outcome."""
    return scores_table(*scored(tree, focal))


def scores_table(frame: pd.DataFrame, notes: list[str]):
    from depgpo.report.render import NOT_AVAILABLE, Table

    names = list(dict.fromkeys(frame.weighting))
    labels_of = {w.name: w.label for w in weightings([float(n.removeprefix("depgpo_beta")) for n in names
                                                      if n.startswith("depgpo_beta")])}
    cells, numbers = {}, []
    for outcome, label in SCORED:
        for name in names:
            part = frame[(frame.weighting == name) & (frame.outcome == outcome) & (frame.label == label)]
            if part.empty:
                continue
            summary = summarise(part)
            for metric, score in summary.items():
                cells[(labels_of[name], (GROUP_LABELS[outcome, label], METRIC_LABELS[metric]))] = \
                    NOT_AVAILABLE if math.isnan(score.value) else _shown(score)
                numbers.append({"weighting": name, "outcome": outcome, "label": label, "metric": metric,
                                "value": score.value, "ci_low": score.low, "ci_high": score.high,
                                "n_trajectories": int(part.defined.sum()),
                                "n_tasks": part[part.defined].task.nunique(),
                                "n_commands": int(part[part.defined].commands.sum()),
                                "n_labelled": int(part[part.defined].labelled.sum()),
                                "undefined": int((~part.defined).sum()),
                                "fallbacks": int(part.fallback.notna().sum())})
    present = {column for _, column in cells}  # a label without a trajectory gets no columns
    columns = pd.MultiIndex.from_tuples([(GROUP_LABELS[key], METRIC_LABELS[m]) for key in SCORED for m in METRICS
                                         if (GROUP_LABELS[key], METRIC_LABELS[m]) in present])
    table = pd.DataFrame([[cells.get((labels_of[n], column), NOT_AVAILABLE) for column in columns] for n in names],
                         index=[labels_of[n] for n in names], columns=columns)
    table.index.name = "Weighting"
    numbers = pd.DataFrame(numbers)
    removal = frame[frame.label != SUBSET_LABEL]  # one row per (weighting, trajectory) for the counts below
    gigpo = removal[removal.weighting == "gigpo"]
    notes = notes + [f"GiGPO defined for {int(gigpo.defined.sum())} of {len(gigpo)} trajectories: elsewhere every "
                     "step advantage is 0 (the group's rollouts earned the same, or, without the logged group, the "
                     "trajectory revisits no state with another return)"]
    fallbacks = removal[removal.fallback.notna()].groupby("weighting").size()
    if len(fallbacks):
        notes.append("fell back to unit factors, nothing credited (trajectories): "
                     + ", ".join(f"{name} {count}" for name, count in fallbacks.items()))
    caption = ("Credit weightings against counterfactual replays: precision and recall of a positive score for the "
               "label (successes: necessary, removing the command lowered the reward, and in the minimal "
               "sufficient set that replays of subsets found; failures: harmful, removing it raised the reward), "
               "AUROC of the score over the (labelled, unlabelled) command pairs of a "
               "trajectory (ties half), and the share of the step-factor mass on turns holding a labelled command; "
               "each a ratio of sums with its 95% interval from a bootstrap that resamples tasks "
               "(docs/replay.md#scores). –: undefined (no positive score, no pair, or no trajectory)")
    return Table(caption, table, numbers, notes=notes)


def _shown(score: Score) -> str:
    interval = "" if math.isnan(score.low) else f"\n[{score.low:.2f}, {score.high:.2f}]"
    return f"{score.value:.2f}{interval}"


def figure_scores(tree, focal):
    """The table's points and intervals, one panel per metric, a row per weighting, a colour per outcome."""
    return scores_figure(table_scores(tree, focal), focal.label)


def scores_figure(table, title: str):
    from matplotlib.figure import Figure

    from depgpo.report.figures import Plot

    numbers = table.numbers
    names = list(dict.fromkeys(numbers.weighting))
    labels_of = dict(zip(table.cells.index, table.cells.index))  # row labels in the table's order
    figure = Figure(figsize=(11, 0.35 * len(names) + 1.6), layout="constrained")
    axes = figure.subplots(1, len(METRICS), sharey=True)
    for ax, metric in zip(axes, METRICS):
        for shift, key, colour in zip((-0.2, 0.0, 0.2), SCORED, ("tab:blue", "tab:green", "tab:orange")):
            part = numbers[(numbers.metric == metric) & (numbers.outcome == key[0])
                           & (numbers.label == key[1])].set_index("weighting")
            if part.empty:
                continue
            part = part.reindex(names)
            y = np.arange(len(names)) + shift
            low = (part.value - part.ci_low).clip(lower=0).fillna(0)
            high = (part.ci_high - part.value).clip(lower=0).fillna(0)
            ax.errorbar(part.value, y, xerr=[low, high], fmt="o", color=colour, markersize=3, capsize=2,
                        label=GROUP_LABELS[key])
        ax.set_xlim(-0.05, 1.05)
        ax.set_title(METRIC_LABELS[metric], fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(np.arange(len(names)), list(labels_of)[:len(names)], fontsize=7)
    axes[0].invert_yaxis()
    handles, texts = axes[0].get_legend_handles_labels()
    figure.legend(handles, texts, fontsize=7, loc="outside lower center", ncols=2)
    figure.suptitle(f"{title}: credit weightings against counterfactual labels (95% intervals, tasks "
                    "resampled)", fontsize=9)
    return Plot(figure, notes=list(table.notes))
