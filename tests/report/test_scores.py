"""Scores of credit weightings against counterfactual labels (depgpo.report.scores), on hand-built results whose
every number is worked out below (tests/helpers/counterfactuals.py), and the report's table of them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from depgpo.report.load import BadInput
from depgpo.report.scores import (
    Weighting, read_counterfactuals, score_frame, summarise, trajectory_counts, weightings,
)
from depgpo.report.stats import cluster_ratio_bootstrap
from tests.helpers.counterfactuals import write_counterfactuals

UNIFORM, LAST = Weighting("uniform", "", "uniform"), Weighting("last", "", "last")
GIGPO = Weighting("gigpo", "", "gigpo")

# Successes A (necessary F T T F), B (F T), C (T T T); E is not reproducible and left out.
#   uniform: every command positive, all scores tied.
#     precision (2+1+3)/(4+2+3), recall 6/6, AUROC: every pair a tie, (2+0.5)/(4+1); mass (2+1+3)/(4+2+3)
#   last command only: A's last is unnecessary, B's and C's necessary.
#     precision (0+1+1)/3, recall (0+1+1)/(2+1+3); AUROC: A's necessary (0, 0) against 0 (ties) and 1 (losses): 1 of
#     4, B 1 of 1, C no pair -> 2/5; mass: A 0 of 4, B 2 of 2, C 3 of 3 -> 5/9
# Failure D: command 1 harmful (removing it raised the reward 0 -> 1).
#   uniform: precision 1/2, recall 1/1, AUROC 0.5, mass 1/2
# GiGPO: A's turns 1 and 2 act on the same anchor state (the same output), with returns γ² and γ: step advantages
#   -1/√2 and +1/√2 (mean_std_norm, sample std), 0 elsewhere. Positive: command 2 only -> precision 1/1, recall 1/2;
#   AUROC: (1,0) 0, (1,3) 0, (2,0) 1, (2,3) 1 -> 2/4; mass |A| all on turns 1 and 2 (necessary) -> 1. B, C, D
#   revisit no state: undefined.
EXPECTED = {
    ("uniform", "success"): {"precision": 6 / 9, "recall": 1.0, "auroc": 0.5, "mass": 6 / 9},
    ("last", "success"): {"precision": 2 / 3, "recall": 2 / 6, "auroc": 2 / 5, "mass": 5 / 9},
    ("uniform", "failure"): {"precision": 0.5, "recall": 1.0, "auroc": 0.5, "mass": 0.5},
    ("gigpo", "success"): {"precision": 1.0, "recall": 0.5, "auroc": 0.5, "mass": 1.0},
}


@pytest.fixture
def results(tmp_path):
    return read_counterfactuals(write_counterfactuals(tmp_path / "counterfactual"))


def test_every_metric_is_the_worked_out_number(results):
    frame = score_frame(results, [UNIFORM, LAST, GIGPO])
    assert sorted(set(frame.task)) == ["taskA", "taskB", "taskC", "taskD"]  # taskE: not reproducible
    for (name, outcome), expected in EXPECTED.items():
        summary = summarise(frame[(frame.weighting == name) & (frame.outcome == outcome)])
        for metric, value in expected.items():
            assert summary[metric].value == pytest.approx(value), (name, outcome, metric)
    gigpo = frame[frame.weighting == "gigpo"]
    assert gigpo.set_index("task").defined.to_dict() == {"taskA": True, "taskB": False, "taskC": False,
                                                         "taskD": False}


def test_intervals_resample_tasks_and_contain_the_point(results):
    frame = score_frame(results, [UNIFORM, LAST])
    for name in ("uniform", "last"):
        summary = summarise(frame[(frame.weighting == name) & (frame.outcome == "success")])
        for metric, score in summary.items():
            assert score.low <= score.value <= score.high, (name, metric)
    # Recall of uniform is 1 in every resample; last's mass varies with the tasks drawn (0, 1 or 1 per task).
    uniform = summarise(frame[(frame.weighting == "uniform") & (frame.outcome == "success")])
    assert uniform["recall"].low == uniform["recall"].high == 1.0
    last = summarise(frame[(frame.weighting == "last") & (frame.outcome == "success")])
    assert last["mass"].low < last["mass"].value < last["mass"].high
    # One task (the failure) says nothing of the spread between tasks: no interval.
    failure = summarise(frame[(frame.weighting == "uniform") & (frame.outcome == "failure")])
    assert math.isnan(failure["mass"].low) and failure["mass"].value == 0.5


def test_ratio_bootstrap_by_hand():
    # Two tasks: 1/2 and 3/4 -> 4/6; resamples: both first (1/2), both second (3/4), or mixed (4/6).
    point, low, high = cluster_ratio_bootstrap(["a", "b"], [1.0, 3.0], [2.0, 4.0])
    assert point == pytest.approx(4 / 6) and low == pytest.approx(0.5) and high == pytest.approx(0.75)
    assert all(math.isnan(v) for v in cluster_ratio_bootstrap(["a"], [0.0], [0.0]))  # nothing positive: undefined


def test_auroc_ties_count_half_and_one_class_has_no_pair():
    counts = trajectory_counts([0.9, 0.9, 0.1, 0.0], [1.0, 1.0, 1.0, 1.0], [0, 1, 2, 3], [True, False, True, False])
    # labelled 0.9 vs 0.9 (tie), vs 0.0 (win); labelled 0.1 vs 0.9 (loss), vs 0.0 (win): 2.5 of 4
    assert (counts["auroc_num"], counts["auroc_den"]) == (2.5, 4)
    assert (counts["precision_num"], counts["precision_den"], counts["recall_den"]) == (2, 3, 2)
    assert (counts["mass_num"], counts["mass_den"]) == (2.0, 4.0)
    assert trajectory_counts([1.0, 0.0], [1.0, 1.0], [0, 1], [True, True])["auroc_den"] == 0


def test_weightings_cover_the_variants_the_betas_the_rewrite_reading_and_the_baselines():
    names = [w.name for w in weightings([0.25, 0.5, 1.0])]
    assert names == ["depgpo", "depgpo_binary_write", "depgpo_no_verifier_filter", "depgpo_no_read_credit",
                     "depgpo_direct_only", "depgpo_beta0.25", "depgpo_beta1", "depgpo_rewrite_reset", "uniform", "last", "gigpo"]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda o: o.pop("reproducible"), "line 1: reproducible: missing"),
    (lambda o: o["commands"][1].pop("necessary"), "line 1: commands[1].necessary: missing"),
    (lambda o: o.update(trajectory=None), "line 1: trajectory: null or missing: the scores need the kept replay"),
    (lambda o: o.update(trajectory="nowhere/trajectory.json"), "trajectory: nowhere/trajectory.json does not exist"),
])
def test_a_malformed_result_is_one_line_naming_file_field_and_fix(tmp_path, edit, message):
    path = write_counterfactuals(tmp_path)
    first = json.loads(path.read_text().splitlines()[0])
    edit(first)
    path.write_text(json.dumps(first) + "\n")
    with pytest.raises(BadInput) as error:
        read_counterfactuals(path)
    text = str(error.value)
    assert "\n" not in text and text.startswith(str(path)) and message in text
    assert "depgpo counterfactual TRAJ --task TASK_DIR --format json --out DIR" in text


def test_report_writes_the_scores_table_and_figure(tmp_path):
    from tests.report.test_report import SETA, build_results, markdown_cells, report

    results = build_results(tmp_path / "results")  # writes SETA's counterfactual/depgpo.jsonl
    assert report(results, "--out", str(tmp_path / "out")) == 0
    out = tmp_path / "out"
    cells = markdown_cells(out / "table_scores.md")
    assert list(cells) == [w.label for w in weightings([0.25, 0.75, 1.0])]
    assert cells["GRPO (uniform)"]["Successes (necessary) Recall"] == "1.00<br>[1.00, 1.00]"
    assert cells["GRPO (uniform)"]["Failures (harmful) Mass on labelled"] == "0.50"  # one task: no interval
    assert cells["Last command only"]["Successes (necessary) Mass on labelled"].startswith("0.56<br>[")
    numbers = __import__("pandas").read_csv(out / "table_scores.csv")
    row = numbers[(numbers.weighting == "last") & (numbers.outcome == "success") & (numbers.metric == "precision")]
    assert row.value.item() == pytest.approx(2 / 3) and row.n_tasks.item() == 3 and row.n_commands.item() == 9
    # The synthetic trajectories hold no trace: every DepGPO weighting falls back to unit factors, and says so.
    depgpo = numbers[(numbers.weighting == "depgpo") & (numbers.metric == "precision")]
    assert depgpo.fallbacks.tolist() == depgpo.n_trajectories.tolist() == [3, 1]
    text = (out / "table_scores.md").read_text()
    assert "1 trajectories left out: their replay's reward was not reproducible" in text
    assert (out / "fig_scores.png").stat().st_size > 0
    assert SETA.path in str(list(results.glob("*/*/counterfactual"))[0])


def test_report_of_counterfactuals_outside_a_results_tree_gives_the_trees_table(tmp_path):
    import argparse

    from depgpo.report.cli import add_arguments, run
    from tests.report.test_report import build_results, report

    def corpus(*options: str) -> int:
        parser = argparse.ArgumentParser(prog="depgpo report")
        add_arguments(parser)
        return run(parser.parse_args(["--counterfactuals", *options]))

    results = build_results(tmp_path / "results")
    assert report(results, "--out", str(tmp_path / "tree")) == 0
    (jsonl,) = results.glob("*/*/counterfactual/*.jsonl")
    assert corpus(str(jsonl), "--name", "corpus", "--out", str(tmp_path / "corpus")) == 0
    assert (tmp_path / "corpus" / "table_scores.csv").read_text() == (tmp_path / "tree" / "table_scores.csv").read_text()
    assert "# Counterfactual scores of corpus" in (tmp_path / "corpus" / "index.md").read_text()
    assert corpus(str(jsonl), "--out", str(tmp_path / "x")) == 2  # no --name
    broken = jsonl.parent / "broken.jsonl"  # beside it: its kept replays resolve, the missing field is the fault
    broken.write_text(jsonl.read_text().replace('"reproducible"', '"reproduced"', 1))
    assert corpus(str(broken), "--name", "c", "--out", str(tmp_path / "y")) == 2
    assert not (tmp_path / "y").exists()


def test_report_without_counterfactuals_names_the_missing_input(tmp_path):
    from tests.report.test_report import SETA, build_results, report

    results = build_results(tmp_path / "results")
    for path in (results / SETA.path / "counterfactual").glob("*.jsonl"):
        path.unlink()
    assert report(results, "--out", str(tmp_path / "out")) == 0
    missing = (tmp_path / "out" / "index.md").read_text().split("## Missing")[1]
    assert f"**table_scores**: missing {SETA.path}/counterfactual/*.jsonl (written by rule `counterfactual`" in missing
    assert "**fig_scores**" in missing


def test_the_draw_takes_each_outcome_and_distinct_tasks_first():
    from depgpo.replay.sample import draw

    def record(task: str, reward: float) -> tuple[str, dict]:
        return f"{task}-{reward}", {"task": {"id": task, "path": f"/t/{task}"}, "verifier": {"reward": reward},
                                    "commands": [{"text": "ls"}]}

    rollouts = [record("a", 1.0), record("a", 1.0), record("a", 1.0), record("b", 1.0), record("a", 0.0),
                record("c", 0.0), record("c", 0.0)]
    drawn = draw(rollouts, 2, seed=0)
    successes, failures = drawn[:2], drawn[2:]
    assert sorted(r["task"]["id"] for _, r in successes) == ["a", "b"]  # b before a second rollout of a
    assert sorted(r["task"]["id"] for _, r in failures) == ["a", "c"]
    assert all(r["verifier"]["reward"] > 0 for _, r in successes) and all(
        r["verifier"]["reward"] == 0 for _, r in failures)
    assert draw(rollouts, 2, seed=0) == drawn  # seeded


def test_sample_without_rollouts_names_the_directory_and_the_fix(tmp_path, capsys):
    from depgpo.cli import main

    assert main(["counterfactual-sample", str(tmp_path), "--per-outcome", "1", "--out",
                 str(tmp_path / "out.jsonl")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and str(tmp_path) in error and "no trajectories/update*.jsonl" in error
    assert "give an RL run's seed directory" in error


def test_report_on_a_malformed_result_is_one_line_and_writes_nothing(tmp_path, capsys):
    from tests.report.test_report import SETA, build_results, report

    results = build_results(tmp_path / "results")
    path = results / SETA.path / "counterfactual" / "depgpo.jsonl"
    lines = path.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["commands"][0]["turn"]
    path.write_text("\n".join([lines[0], json.dumps(broken), *lines[2:]]) + "\n")
    assert report(results, "--out", str(tmp_path / "out")) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and f"{path} line 2: commands[0].turn: missing" in error
    assert not (tmp_path / "out" / "table1.md").exists()


def test_gigpo_with_the_logged_group_by_hand():
    from depgpo.report.scores import Counterfactual, weights

    # Two rollouts of one task, two turns each, both starting from state s0: returns (γ, 1) and (0, 0). Turn 0's
    # step group holds γ and 0: mean γ/2, sample std γ/√2, so member 0's A_0 = 1/√2; turn 1's states differ: 0.
    group = {"anchor_keys": [["s0", "s1"], ["s0", "s2"]], "rewards": [1.0, 0.0], "member": 0}
    commands = [{"index": 0, "turn": 0, "necessary": True, "reward_without": 0.0},
                {"index": 1, "turn": 1, "necessary": False, "reward_without": 1.0}]
    result = Counterfactual("x", "task", 1.0, True, commands, {"num_turns": 2, "commands": commands}, group)
    scores, turn_weights, _ = weights(GIGPO, result)
    assert scores == pytest.approx([2 ** -0.5, 0.0], rel=1e-4) and turn_weights == pytest.approx([2 ** -0.5, 0.0],
                                                                                                  rel=1e-4)
    summary = summarise(score_frame([result], [GIGPO]))
    assert {metric: score.value for metric, score in summary.items()} == {"precision": 1.0, "recall": 1.0,
                                                                        "auroc": 1.0, "mass": 1.0}
    failed = Counterfactual("y", "task", 0.0, True, commands, {"num_turns": 2, "commands": commands},
                            dict(group, member=1))
    # Member 1 failed: its A_0 = -1/√2, and its score is the blame, -A_t.
    assert weights(GIGPO, failed)[0] == pytest.approx([2 ** -0.5, 0.0], rel=1e-4)


def test_a_sample_of_successes_only_has_no_failure_columns(tmp_path):
    from depgpo.report.load import ResultsTree
    from depgpo.report.scores import table_scores
    from tests.report.test_report import SETA, build_results

    results = build_results(tmp_path / "results")
    path = results / SETA.path / "counterfactual" / "depgpo.jsonl"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                            if json.loads(line)["reward"] > 0))
    table = table_scores(ResultsTree(results), SETA)
    assert {outcome for outcome, _ in table.cells.columns} == {"Successes (necessary)"}
    assert set(table.numbers.outcome) == {"success"}


@pytest.mark.parametrize("seed", range(5))
def test_a_removal_budget_estimates_the_counts_of_removing_every_command_without_bias(seed):
    # A trajectory of 9 commands, 2 credited; a budget of 5 removes the 2 and draws 3 of the 7 others. Averaged
    # over every draw the budget can make, each weighted count equals the count of removing all 9 (mass aside).
    import itertools

    from depgpo.replay.counterfactual import removal_weights

    rng = np.random.default_rng(seed)
    scores = [0.0] * 9
    credited = (2, 6)
    for k in credited:
        scores[k] = float(rng.uniform(0.1, 1.0))
    labelled = [bool(b) for b in rng.integers(0, 2, 9)]
    turns = list(range(9))
    full = trajectory_counts(scores, [1.0] * 9, turns, labelled)
    others = [k for k in range(9) if k not in credited]
    weights = removal_weights(9, credited, 5, seed)
    assert [weights[k] for k in credited] == [1.0, 1.0]
    assert sorted(w for k, w in enumerate(weights) if k not in credited) == [0.0] * 4 + [7 / 3] * 3

    draws = list(itertools.combinations(others, 3))
    mean = {key: 0.0 for key in full}
    for drawn in draws:
        w = [1.0 if k in credited else 7 / 3 if k in drawn else 0.0 for k in range(9)]
        counts = trajectory_counts(scores, [1.0] * 9, turns, labelled, w, (7, 3))
        for key in mean:
            mean[key] += counts[key] / len(draws)
    for key in ("precision_num", "precision_den", "recall_num", "recall_den", "auroc_num", "auroc_den"):
        assert mean[key] == pytest.approx(full[key]), key
    assert mean["mass_den"] == 0  # a sampled trajectory has no mass: not every turn's label is known


def test_a_trajectory_within_the_budget_removes_every_command_and_the_draw_follows_the_seed():
    from depgpo.replay.counterfactual import removal_weights

    assert removal_weights(4, (1,), 5, 0) == [1.0] * 4 and removal_weights(4, (1,), None, 0) == [1.0] * 4
    assert removal_weights(20, (3,), 6, 1) == removal_weights(20, (3,), 6, 1)
    assert removal_weights(20, (3,), 6, 1) != removal_weights(20, (3,), 6, 2)
    # More credited commands than the budget: all of them, and still half the budget drawn from the others.
    many = removal_weights(12, (0, 1, 2, 3, 4, 5), 4, 0)
    assert many[:6] == [1.0] * 6 and sum(w > 0 for w in many[6:]) == 2


def test_disagreements_list_each_labelled_command_without_credit(results):
    from depgpo.report.disagreements import MISSED, UNBLAMED, disagreements, summary_lines

    # The hand-built replays hold no trace, so DepGPO credits nothing (a fallback): every necessary command of the
    # reproducible successes (taskA 2, taskB 1, taskC 3) and the failure's harmful one (taskD) are listed; taskE's
    # replay was not reproducible.
    frame = disagreements(results)
    assert sorted(zip(frame.kind, frame.task, frame["index"])) == sorted(
        [(MISSED, "taskA", 1), (MISSED, "taskA", 2), (MISSED, "taskB", 1), (MISSED, "taskC", 0), (MISSED, "taskC", 1),
         (MISSED, "taskC", 2), (UNBLAMED, "taskD", 1)])
    assert frame.role.str.len().min() > 0  # no command credited: the fallback's reason stands in for a role
    assert summary_lines(frame)[0].startswith(f"{MISSED}, DepGPO's role ") and "6 commands of 3 tasks" in \
        summary_lines(frame)[0]
