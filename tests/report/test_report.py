"""`depgpo report` on a synthetic results tree whose numbers are chosen so that every expected cell is known."""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from depgpo.report.cli import add_arguments, run
from depgpo.report.load import ResultsTree, Setting
from depgpo.report.stats import paired_difference, pass_at_1_interval
from tests.helpers.counterfactuals import write_counterfactuals

# ---------------------------------------------------------------------- test fixture: a synthetic results tree

SETA, TMAX = Setting("qwen3.5-9b", "seta"), Setting("qwen3.5-9b", "tmax")
TASKS = [f"task{i}" for i in range(10)]
SEEDS, ROUNDS, UPDATES = (0, 1), 3, 5
ROUND_OFFSET = {0: [-1, 0, 1], 1: [0, 1, 2]}  # seed -> tasks solved in each round, relative to the run's level
# The multi-seed tree: three seeds of two rounds for the SFT policy, GRPO, DepGPO and the frozen control, the first
# seed alone for every other run (the grid's plan).
MULTI_SEED_OFFSET = {0: [0, 1], 1: [-1, 0], 2: [1, 1]}
MULTI_SEED_RUNS = {"sft", "grpo", "depgpo", "frozen"}
# Tasks a run solves on TB2.0 before the offset (TB2.1: one fewer). On SETA DepGPO is best and DPPO second; on
# TMAX GiGPO is best and DepGPO second.
LEVELS = {
    "sft": 2, "grpo": 3, "dapo": 4, "dppo": 5, "gigpo": 4, "depgpo": 6,
    "depgpo_beta0.25": 5, "depgpo_beta0.75": 5, "depgpo_beta1.0": 4,
    "depgpo_binary_write": 5, "depgpo_no_verifier_filter": 3, "depgpo_no_read_credit": 4, "depgpo_direct_only": 5,
}
TMAX_LEVELS = {**LEVELS, "gigpo": 7}
TRAJECTORIES_PER_UPDATE = 4
CREDIT_METRICS = {"credit/commands": 6.0, "credit/usable": 0.75, "credit/write_commands": 2.0,
                  "credit/positive_write_commands": 1.0, "credit/read_commands": 4.0,
                  "credit/positive_read_commands": 1.0, "credit/positive_writes_with_indirect": 0.25,
                  "credit/mystery_counter": 3.0}


def write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def write_jsonl(path: Path, values: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(value) + "\n" for value in values))


def write_eval(setting_dir: Path, run: str, level: int, offsets: dict[int, list[int]]) -> None:
    """Round r of seed s solves the first level + offsets[s][r] tasks (one fewer on TB2.1)."""
    for seed, seed_offsets in offsets.items():
        for test, shift in (("test_tb20", 0), ("test_tb21", -1)):
            solved = [level + shift + offset for offset in seed_offsets]
            rounds = [{"round": r, "tasks": {task: int(i < k) for i, task in enumerate(TASKS)}}
                      for r, k in enumerate(solved)]
            pass_at_1 = [100 * k / len(TASKS) for k in solved]
            write_json(setting_dir / "eval" / run / f"seed{seed}" / f"{test}.json",
                       {"run": run, "test_set": test, "rounds": rounds, "pass_at_1": pass_at_1,
                        "mean": statistics.fmean(pass_at_1), "sd": statistics.stdev(pass_at_1)})


def rollout(task: str, observations: list[str], num_turns: int) -> dict:
    """A trajectory record reduced to the fields the report reads."""
    return {"schema_version": 1, "task": {"id": task}, "instruction": f"solve {task}", "num_turns": num_turns,
            "commands": [{"index": i, "turn": i, "text": "true", "observation": o} for i, o in enumerate(observations)],
            "verifier": {"reward": 1.0}}


def update_metrics(run: str, update: int, seed: int) -> dict:
    depgpo_family = run.startswith("depgpo")
    metrics = {"update": update, "train/reward_mean": 0.1 * update + 0.02 * seed, "train/zero_adv_group_frac": 0.5,
               "actor/entropy": 1.0 / (update + 1), "actor/grad_norm": 1.0 + update, "train/loss": 0.1,
               "time/update_s": 11.0 if depgpo_family else 10.0, "time/rollout_s": 8.0,
               "time/credit_s": 0.8 if depgpo_family else 0.01,
               "memory/peak_rss_mb": (1010.0 if depgpo_family else 1000.0) + update}
    if depgpo_family:
        metrics.update({"depgpo/step_factor_std": 0.3, **CREDIT_METRICS})
    return metrics


def write_rl(setting_dir: Path, run: str, seeds) -> None:
    for seed in seeds:
        seed_dir = setting_dir / "rl" / run / f"seed{seed}"
        write_jsonl(seed_dir / "metrics.jsonl", [update_metrics(run, u, seed) for u in range(UPDATES)])
        if run.startswith("depgpo"):
            write_json(seed_dir / "done.json", {"updates": UPDATES, "config": {"credit": {"beta": 0.5}}})
        for update in range(UPDATES):
            group = [rollout("task0", ["listing", f"seen by rollout {k}"], 3) for k in range(TRAJECTORIES_PER_UPDATE)]
            write_jsonl(seed_dir / "trajectories" / f"update{update:04d}.jsonl", group)


def build_results(root: Path, offsets: dict[int, list[int]] = ROUND_OFFSET, multi_seed=None) -> Path:
    """results/{scale} with two settings, every run and five updates per run; each run has the seeds and rounds of
    `offsets` (default: two seeds, three rounds), or only the first seed if `multi_seed` is given and lacks it."""
    def seeds(name: str) -> list[int]:
        return list(offsets) if multi_seed is None or name in multi_seed else list(offsets)[:1]

    for setting, levels in ((SETA, LEVELS), (TMAX, TMAX_LEVELS)):
        setting_dir = root / setting.path
        success_counts = dict(zip(TASKS, [0, 0, 0, 1, 2, 3, 4, 4, 2, 1]))
        write_json(setting_dir / "filter" / "filter.json",
                   {"candidates": 10, "zero_success": 3, "all_success": 2, "retained": 5, "rl_train": 4,
                    "rl_val": 1, "attempts": 4, "zero_advantage_fraction": 0.5, "success_counts": success_counts})
        write_json(setting_dir / "sft" / "reference_credit.json", {"trajectories": [
            {"task": task, "commands": 3 + i, "connected_fraction": i / 10, "reward": float(i % 3 != 0)}
            for i, task in enumerate(TASKS)]})
        for name, level in levels.items():
            write_eval(setting_dir, name, level, {seed: offsets[seed] for seed in seeds(name)})
            if name != "sft":
                write_rl(setting_dir, name, seeds(name))
    write_counterfactuals(root / SETA.path / "counterfactual")  # the focal setting's (tests/report/test_scores.py)
    return root


def build_multi_seed_results(root: Path) -> Path:
    return build_results(root, MULTI_SEED_OFFSET, MULTI_SEED_RUNS)


TABLES = ["table1", "table2", "table6", "table9", "table10", "table11", "table_scores"]
FIGURES = ["fig1a", "fig1b", "fig1d", "fig5", "fig6", "fig_scores"]
RL_TABLES = ["rl_vs_frozen", "power"]  # written where the frozen control and the jobs' benchmark files are


def report(results: Path, *options: str) -> int:
    parser = argparse.ArgumentParser(prog="depgpo report")
    add_arguments(parser)
    return run(parser.parse_args(["--results", str(results), *options]))


def markdown_cells(path: Path) -> dict[str, dict[str, str]]:
    """{row label: {column header: cell}} of the Markdown table in `path`."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in path.read_text().splitlines() if line.startswith("|")]
    header, body = rows[0], rows[2:]
    return {row[0]: dict(zip(header[1:], row[1:])) for row in body}


def write_benchmarks(results: Path, setting: Setting, runs, seeds, rl_s: float = 60.0, eval_s: float = 20.0) -> None:
    """Snakemake's benchmark files of the RL and evaluation jobs (the seconds in column `s`)."""
    folder = results / "benchmarks" / setting.model / setting.data
    folder.mkdir(parents=True, exist_ok=True)
    for run in runs:
        for seed in seeds:
            for stage, seconds in (("rl", rl_s), ("eval", eval_s)):
                (folder / f"{stage}_{run}_seed{seed}.tsv").write_text(f"s\th:m:s\n{seconds}\t0:00:{int(seconds)}\n")


@pytest.fixture(scope="module")
def full_report(tmp_path_factory) -> Path:
    results = build_results(tmp_path_factory.mktemp("results"))
    write_frozen(results, SEEDS)  # rl_vs_frozen and power read the control and the jobs' benchmark files
    write_benchmarks(results, SETA, ("grpo", "depgpo"), SEEDS)
    assert report(results) == 0
    return results / "report"


# ---------------------------------------------------------------------- tests


def test_every_table_and_figure_is_written(full_report):
    for name in TABLES + RL_TABLES:
        for suffix in (".csv", ".md", ".tex"):
            assert (full_report / f"{name}{suffix}").stat().st_size > 0, f"{name}{suffix}"
    for name in FIGURES:
        for suffix in (".png", ".pdf"):
            assert (full_report / f"{name}{suffix}").stat().st_size > 0, f"{name}{suffix}"
    index = (full_report / "index.md").read_text()
    assert all(f"**{name}**" in index for name in TABLES + RL_TABLES + FIGURES)
    assert index.split("## Missing")[1].strip() == "- nothing"


def test_png_renders(full_report):
    image = matplotlib.image.imread(full_report / "fig5.png")
    assert image.shape[0] > 100 and image.shape[1] > 400 and image.std() > 0  # a drawn picture, not a blank one


def attempts_of(results: Path, run: str, test: str, setting: Setting = SETA) -> pd.DataFrame:
    tasks = ResultsTree(results).eval_tasks
    return tasks[(tasks.model == setting.model) & (tasks.data == setting.data) & (tasks.run == run)
                 & (tasks.test == test)]


def numbers_row(path: Path, run: str, test: str, data: str = "seta") -> pd.Series:
    numbers = pd.read_csv(path, keep_default_na=False, na_values=[""])
    return numbers[(numbers.data == data) & (numbers.run == run) & (numbers.test == test)].iloc[0]


def shown(low: float, high: float) -> str:
    """An interval's bounds as the tables print them."""
    return f"[{low:.1f}, {high:.1f}]".replace("-", "−")


def test_table1_pools_rounds_of_all_seeds(full_report):
    depgpo_seta_tb20 = [50, 60, 70, 60, 70, 80]  # level 6 + offsets, seeds 0 and 1, in % of 10 tasks
    row = numbers_row(full_report / "table1.csv", "depgpo", "test_tb20")
    assert row["mean"] == pytest.approx(statistics.fmean(depgpo_seta_tb20))
    assert row["sd"] == pytest.approx(statistics.stdev(depgpo_seta_tb20))
    assert (row["rounds"], row["n_tasks"], row["n_seeds"]) == (6, 10, 2)
    interval = pass_at_1_interval(attempts_of(full_report.parent, "depgpo", "test_tb20"))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((interval.low, interval.high))
    assert row["ci_low"] < row["mean"] < row["ci_high"]
    # Every attempt of DepGPO solves the 3 tasks more than GRPO's and 4 more than the SFT policy's same attempt.
    assert (row["diff_grpo"], row["diff_sft"]) == pytest.approx((30, 40))
    assert (row["diff_grpo_n_units"], row["diff_grpo_n_tasks"], row["diff_grpo_matched_on"]) == (
        60, 10, "test,task,round,seed")
    assert row["diff_grpo_ci_low"] < 30 < row["diff_grpo_ci_high"]
    cells = markdown_cells(full_report / "table1.md")
    assert cells["DepGPO"]["qwen3.5-9b / seta TB2.0"] == (
        f"**65.0 {shown(row['ci_low'], row['ci_high'])}**"
        f"<br>Δ GRPO +30.0 {shown(row['diff_grpo_ci_low'], row['diff_grpo_ci_high'])}"
        f"<br>Δ SFT +40.0 {shown(row['diff_sft_ci_low'], row['diff_sft_ci_high'])}")
    sft = numbers_row(full_report / "table1.csv", "sft", "test_tb20")  # no difference to itself
    assert sft["diff_grpo"] == pytest.approx(-10) and math.isnan(sft["diff_sft"])  # levels 2 and 3
    assert cells["SFT"]["qwen3.5-9b / seta TB2.0"].count("<br>") == 1
    assert "<br>Δ GRPO −10.0 [−" in cells["SFT"]["qwen3.5-9b / seta TB2.0"]


def test_table1_pools_both_test_sets(full_report):
    row = numbers_row(full_report / "table1.csv", "depgpo", "pooled")
    assert row["mean"] == pytest.approx((65 + 55) / 2)  # as many tasks in both sets
    assert (row["rounds"], row["n_tasks"]) == (12, 10)  # the same task names in both sets: one cluster each
    assert math.isnan(row["sd"])
    assert row["diff_grpo"] == pytest.approx(30) and row["diff_grpo_n_units"] == 120
    assert markdown_cells(full_report / "table1.md")["DepGPO"]["qwen3.5-9b / seta Pooled"].startswith("**60.0 [")


def test_table1_marks_best_and_second_best_per_setting(full_report):
    cells = markdown_cells(full_report / "table1.md")
    for test in ("TB2.0", "TB2.1", "Pooled"):
        seta, tmax = f"qwen3.5-9b / seta {test}", f"qwen3.5-9b / tmax {test}"
        assert cells["DepGPO"][seta].startswith("**") and cells["DPPO"][seta].startswith("<u>")
        assert cells["GiGPO"][tmax].startswith("**") and cells["DepGPO"][tmax].startswith("<u>")
        unmarked = [method for method in cells if not cells[method][seta].startswith(("**", "<u>"))]
        assert unmarked == ["SFT", "GRPO", "DAPO", "GiGPO"]
        assert all("**" not in line for line in cells["DepGPO"][seta].split("<br>")[1:])  # pass@1 is marked
    depgpo, dppo = (numbers_row(full_report / "table1.csv", run, "test_tb20") for run in ("depgpo", "dppo"))
    latex = (full_report / "table1.tex").read_text()
    assert f"\\textbf{{65.0 {shown(depgpo['ci_low'], depgpo['ci_high'])}}} \\\\ $\\Delta$ GRPO +30.0" in latex
    assert f"\\underline{{55.0 {shown(dppo['ci_low'], dppo['ci_high'])}}}" in latex
    assert r"\multicolumn{3}{c}{qwen3.5-9b / seta}" in latex and r"\begin{tabular}[t]{@{}c@{}}" in latex


def test_table2_differences_to_full_depgpo(full_report):
    cells = markdown_cells(full_report / "table2.md")
    assert list(cells) == ["GRPO", "Binary write contribution", "Without verifier filtering",
                           "Without supporting-read credit", "Direct writes only", "Full DepGPO"]
    binary = numbers_row(full_report / "table2.csv", "depgpo_binary_write", "test_tb20")
    assert (binary["diff_depgpo"], binary["diff_grpo"], binary["diff_sft"]) == pytest.approx((-10, 20, 30))
    assert cells["Binary write contribution"]["TB2.0"].split("<br>")[:2] == [
        f"55.0 {shown(binary['ci_low'], binary['ci_high'])}",
        f"Δ full −10.0 {shown(binary['diff_depgpo_ci_low'], binary['diff_depgpo_ci_high'])}"]
    no_filter = numbers_row(full_report / "table2.csv", "depgpo_no_verifier_filter", "test_tb21")
    assert no_filter["diff_depgpo"] == pytest.approx(-30)
    # GRPO's level: it agrees with GRPO on every attempt
    assert (no_filter["diff_grpo"], no_filter["diff_grpo_ci_low"], no_filter["diff_grpo_ci_high"]) == (0, 0, 0)
    assert "<br>Δ GRPO +0.0 [0.0, 0.0]<br>" in cells["Without verifier filtering"]["TB2.1"]
    assert cells["Full DepGPO"]["TB2.0"].split("<br>")[1].startswith("Δ GRPO +30.0 [")  # not compared to itself


def test_table9_orders_the_beta_sweep(full_report):
    cells = markdown_cells(full_report / "table9.md")
    assert list(cells) == ["0.25", "0.50 (full DepGPO)", "0.75", "1.00"]
    assert cells["1.00"]["TB2.0"].startswith("45.0 [") and "<br>Δ GRPO +10.0 [" in cells["1.00"]["TB2.0"]
    beta = numbers_row(full_report / "table9.csv", "depgpo_beta1.0", "test_tb20")
    assert (beta["beta"], beta["diff_grpo"], beta["diff_sft"], beta["n_seeds"]) == pytest.approx((1.0, 10, 20, 2))


# ---------------------------------------------------------------------- several seeds, runs with fewer


@pytest.fixture(scope="module")
def multi_seed_report(tmp_path_factory) -> Path:
    results = build_multi_seed_results(tmp_path_factory.mktemp("multi"))
    assert report(results) == 0
    return results / "report"


def test_table1_with_three_seeds_and_runs_of_one(multi_seed_report):
    table1 = multi_seed_report / "table1.csv"
    depgpo = numbers_row(table1, "depgpo", "test_tb20")
    solved = [6 + offset for offsets in MULTI_SEED_OFFSET.values() for offset in offsets]
    assert depgpo["mean"] == pytest.approx(10 * statistics.fmean(solved))
    assert (depgpo["rounds"], depgpo["n_tasks"], depgpo["n_seeds"], depgpo["diff_grpo_n_units"]) == (6, 10, 3, 60)
    assert depgpo["diff_grpo"] == pytest.approx(30) and depgpo["diff_sft"] == pytest.approx(40)
    # DAPO ran seed 0 alone: its pass@1 is that seed's, and its differences pair it with seed 0 of GRPO and SFT
    dapo = numbers_row(table1, "dapo", "test_tb20")
    assert (dapo["mean"], dapo["n_seeds"], dapo["rounds"]) == pytest.approx((45, 1, 2))
    assert (dapo["diff_grpo"], dapo["diff_sft"]) == pytest.approx((10, 20))
    assert (dapo["diff_grpo_n_units"], dapo["diff_grpo_matched_on"]) == (20, "test,task,round,seed")
    interval = paired_difference(attempts_of(multi_seed_report.parent, "dapo", "test_tb20"),
                                 attempts_of(multi_seed_report.parent, "grpo", "test_tb20"))
    assert (dapo["diff_grpo_ci_low"], dapo["diff_grpo_ci_high"]) == pytest.approx((interval.low, interval.high))
    assert "share no seed" not in (multi_seed_report / "table1.md").read_text()


def test_a_run_without_a_common_seed_is_paired_on_task_and_round(tmp_path):
    from depgpo.report.render import to_markdown
    from depgpo.report.tables import table1

    results = build_multi_seed_results(tmp_path / "results")
    (results / SETA.path / "eval" / "dapo" / "seed0").rename(results / SETA.path / "eval" / "dapo" / "seed7")
    table = table1(ResultsTree(results), SETA)
    numbers = table.numbers
    dapo = numbers[(numbers.data == "seta") & (numbers.run == "dapo") & (numbers.test == "test_tb20")].iloc[0]
    # DAPO solves 4, 5 tasks in rounds 0, 1; GRPO's seeds 3, 2, 4 and 4, 3, 4: 3 and 11/3 on average
    assert dapo["diff_grpo"] == pytest.approx(10 * ((4 - 3) + (5 - 11 / 3)) / 2)
    assert (dapo["diff_grpo_n_units"], dapo["diff_grpo_matched_on"]) == (20, "test,task,round")
    assert "share no seed" in to_markdown(table, "table1") and "seta dapo − grpo (TB2.0)" in table.notes[-1]


def test_table2_pairs_one_seed_variants_with_full_depgpos_first_seed(multi_seed_report):
    binary = numbers_row(multi_seed_report / "table2.csv", "depgpo_binary_write", "test_tb20")
    assert (binary["mean"], binary["diff_depgpo"], binary["diff_depgpo_n_units"]) == pytest.approx((55, -10, 20))


def test_table10_ratios_of_means(full_report):
    cells = markdown_cells(full_report / "table10.md")
    assert cells["Relative wall-clock time / update"] == {"GRPO": "1.00 ×", "DepGPO": "1.10 ×",
                                                          "Difference": "+10.0%"}
    assert cells["Peak memory (process RSS)"]["DepGPO"] == "1.01 ×"  # peaks 1014 vs 1004 MB
    assert cells["Dependency processing / trajectory"]["DepGPO"] == "0.2 s"  # 0.8 s for 4 trajectories


def test_table11_maps_credit_keys_to_paper_rows(full_report):
    cells = {label: row["Value"] for label, row in markdown_cells(full_report / "table11.md").items()}
    assert cells == {"Commands per trajectory": "6", "Trajectories with usable dependency credit": "75.0%",
                     "Trajectories using the unit-factor fallback": "25.0%",
                     "Write commands with positive credit": "50.0%", "Read commands with positive credit": "25.0%",
                     "Positive-credit writes with indirect contribution": "25.0%", "credit/mystery_counter": "3"}


def test_missing_inputs_are_reported_and_the_rest_still_written(tmp_path):
    results = build_results(tmp_path / "results")
    (results / SETA.path / "sft" / "reference_credit.json").unlink()
    for path in sorted((results / TMAX.path / "eval" / "dapo").rglob("*.json")):
        path.unlink()
    assert report(results, "--out", str(tmp_path / "out")) == 0
    out = tmp_path / "out"
    assert not (out / "fig1d.png").exists()
    missing = (out / "index.md").read_text().split("## Missing")[1]
    assert "fig1d" in missing and "qwen3.5-9b/seta/sft/reference_credit.json" in missing
    assert "depgpo sft-data" in missing
    assert all((out / f"{name}.png").stat().st_size > 0 for name in FIGURES if name != "fig1d")
    assert all((out / f"{name}.md").stat().st_size > 0 for name in TABLES)
    # A run missing in one setting leaves a gap in Table 1 and a note naming its files.
    cells = markdown_cells(out / "table1.md")
    assert cells["DAPO"]["qwen3.5-9b / tmax TB2.0"] == "–" and cells["DAPO"]["qwen3.5-9b / seta TB2.0"] != "–"
    assert "qwen3.5-9b/tmax/eval/dapo/seed*/" in (out / "table1.md").read_text()


def test_focal_setting_option(tmp_path):
    results = build_results(tmp_path / "results")
    assert report(results, "--out", str(tmp_path / "out"), "--setting", "qwen3.5-9b/tmax") == 0
    assert "qwen3.5-9b / tmax" in (tmp_path / "out" / "table2.md").read_text()
    assert report(results, "--setting", "nope/none") == 2


def test_an_empty_results_directory_is_an_error(tmp_path):
    assert report(tmp_path) == 2


def test_anchor_recurrence_within_groups(tmp_path):
    seed_dir = tmp_path / SETA.path / "rl" / "gigpo" / "seed0"
    write_jsonl(seed_dir / "trajectories" / "update0000.jsonl", [
        rollout("a", ["same", "left"], 3), rollout("a", ["same", "right"], 3),  # turn 2's states differ
        rollout("b", ["unique to b"], 3),  # alone in its group: nothing recurs; turn 2 follows a turn without command
        rollout("c", ["x"], 3), rollout("c", ["y"], 3),  # turn 1 differs; turn 2 follows a turn without command
    ])
    recurrence, reconstructed = ResultsTree(tmp_path).anchor_recurrence(SETA, "gigpo")
    assert reconstructed
    assert recurrence.recurs.tolist() == [True, True, False, True, True, False,
                                          False, False, False,
                                          True, False, True, True, False, True]


def test_table11_agrees_with_the_credit_modules_own_statistics(tmp_path):
    """Per-update means as the trainer logs them, pooled by the report, equal the credit module's Table 11
    statistics over the same trajectories (updates of equal size)."""
    from depgpo.algos.metrics import mean_credit_diagnostics
    from depgpo.credit import CommandCredit
    from depgpo.credit.explain import aggregate_diagnostics, trajectory_diagnostics
    from depgpo.report.tables import table11

    def command(index: int, is_write: bool, q: float, indirect: float = 0.0) -> CommandCredit:
        return CommandCredit(index=index, turn=index, text="true", is_write=is_write, role="", direct=q,
                             indirect=indirect, info=0.0, q=q)

    def diagnostics(commands: list[CommandCredit], fallback: str | None = None, num_commands: int = 0) -> dict:
        return trajectory_diagnostics(commands, num_commands or len(commands), [1.0] * 3, fallback, "trace", "full",
                                      started=0.0)

    mixed = diagnostics([command(0, True, 1.0, indirect=1.0), command(1, True, 0.0), command(2, False, 0.5),
                         command(3, False, 0.0)])
    fallback = diagnostics([], fallback="no turn has positive credit", num_commands=3)
    direct = diagnostics([command(0, True, 1.0), command(1, False, 0.0)])
    updates = [[mixed, fallback], [direct, mixed]]
    write_jsonl(tmp_path / SETA.path / "rl" / "depgpo" / "seed0" / "metrics.jsonl",
                [{"update": u, **mean_credit_diagnostics(batch)} for u, batch in enumerate(updates)])
    values = table11(ResultsTree(tmp_path), SETA).numbers.set_index("statistic")["value"]
    expected = aggregate_diagnostics([record for batch in updates for record in batch])
    assert values["Commands per trajectory"] == pytest.approx(expected["commands_per_trajectory"])
    assert values["Trajectories with usable dependency credit"] == pytest.approx(expected["usable_pct"])
    assert values["Trajectories using the unit-factor fallback"] == pytest.approx(expected["fallback_pct"])
    assert values["Write commands with positive credit"] == pytest.approx(expected["positive_write_commands_pct"])
    assert values["Read commands with positive credit"] == pytest.approx(expected["positive_read_commands_pct"])
    assert values["Positive-credit writes with indirect contribution"] == pytest.approx(
        expected["positive_writes_with_indirect_pct"])
    assert values["credit/fallback=no turn has positive credit"] == pytest.approx(0.25)  # 1 of 2, then 0 of 2


def write_frozen(results: Path, seeds) -> None:
    """The control: half the methods' reward at every update (they have 0.1 x update + 0.02 x seed)."""
    for seed in seeds:
        write_jsonl(results / SETA.path / "rl" / "frozen" / f"seed{seed}" / "metrics.jsonl",
                    [{"update": u, "train/reward_mean": 0.05 * u} for u in range(UPDATES)])


def legend(axes) -> list[str]:
    return [text.get_text() for text in axes.get_legend().get_texts()]


def test_fig5_reads_methods_against_the_frozen_control(tmp_path):
    from depgpo.report.figures import fig5, gain_over_frozen

    results = build_results(tmp_path / "results")
    write_frozen(results, SEEDS)
    tree = ResultsTree(results)
    gain = gain_over_frozen(tree.run_metrics(SETA, "grpo"), tree.run_metrics(SETA, "frozen"))
    # update 0 is left out: both are still the SFT policy there (depgpo.report.rl_gain)
    assert gain == pytest.approx(statistics.fmean(0.05 * u for u in range(1, UPDATES)) + 0.02 * statistics.fmean(SEEDS))
    figure = fig5(tree, SETA).figure
    assert legend(figure.axes[0]) == [
        "DepGPO, 2 seeds (+13.5 points vs frozen)", "GRPO, 2 seeds (+13.5 points vs frozen)",
        "GiGPO, 2 seeds (+13.5 points vs frozen)",
        "SFT policy, frozen (same draws), 2 seeds"]
    gains = figure.axes[4]  # panel (e): every run's gain over the control, with its interval (rl_vs_frozen.csv)
    assert gains.get_title().startswith("(e) training reward")
    assert len(gains.get_yticklabels()) == len(LEVELS) - 1  # every RL run (not the SFT policy)
    # without the control (the paper's grid), the labels are the methods' names and seeds alone
    plain = fig5(ResultsTree(build_results(tmp_path / "plain")), SETA).figure
    assert legend(plain.axes[0]) == ["DepGPO, 2 seeds", "GRPO, 2 seeds", "GiGPO, 2 seeds"]
    assert "band: min–max over seeds" in plain.get_suptitle()


def test_fig5_draws_the_mean_over_seeds_and_their_range(tmp_path):
    from depgpo.report.figures import fig5

    results = build_multi_seed_results(tmp_path / "results")
    write_frozen(results, MULTI_SEED_OFFSET)
    reward = fig5(ResultsTree(results), SETA).figure.axes[0]
    # GiGPO has seed 0 alone: its gain pairs with the control's seed 0 (0.125); the others' with seeds 0-2 (0.145)
    assert legend(reward) == ["DepGPO, 3 seeds (+14.5 points vs frozen)", "GRPO, 3 seeds (+14.5 points vs frozen)",
                              "GiGPO (+12.5 points vs frozen)", "SFT policy, frozen (same draws), 3 seeds"]
    lines = {line.get_label(): line for line in reward.get_lines()}
    depgpo = lines["DepGPO, 3 seeds (+14.5 points vs frozen)"]
    assert list(depgpo.get_ydata()) == pytest.approx([0.1 * u + 0.02 for u in range(UPDATES)])  # mean of 0, .02, .04
    assert list(lines["GiGPO (+12.5 points vs frozen)"].get_ydata()) == pytest.approx([0.1 * u for u in range(UPDATES)])
    bands = [band for band in reward.collections if band.get_paths()]
    assert len(bands) == 3  # DepGPO, GRPO and the control: GiGPO's single seed has none
    heights = bands[0].get_paths()[0].vertices[:, 1]
    assert (heights.min(), heights.max()) == pytest.approx((0.0, 0.1 * (UPDATES - 1) + 0.04))  # seeds 0 and 2


def test_fig6_sorts_ten_tasks_and_shows_the_paired_interval(tmp_path):
    from depgpo.report.figures import fig6, success_difference

    results = build_multi_seed_results(tmp_path / "results")
    tree = ResultsTree(results)
    tasks = pd.concat([attempts_of(results, run, "test_tb20") for run in ("depgpo", "grpo")])
    difference = success_difference(tasks)
    # Task i is solved by DepGPO in a round of seed s iff i < 6 + offset, by GRPO iff i < 3 + offset.
    offsets = [offset for seed_offsets in MULTI_SEED_OFFSET.values() for offset in seed_offsets]
    expected = {task: 100 * statistics.fmean((i < 6 + o) - (i < 3 + o) for o in offsets)
                for i, task in enumerate(TASKS)}
    assert len(difference) == 10 and list(difference) == sorted(difference, reverse=True)
    assert difference.to_dict() == pytest.approx(expected)
    mean = paired_difference(tasks[tasks.run == "depgpo"], tasks[tasks.run == "grpo"])
    assert mean.mean == pytest.approx(difference.mean()) == pytest.approx(30)
    figure = fig6(tree, SETA).figure
    assert legend(figure.axes[0]) == [f"mean Δ = +30.0 pp, 95% CI [{mean.low:.1f}, {mean.high:.1f}] shaded\n"
                                      "(paired on 60 attempts, tasks resampled)"]
    assert figure.axes[0].get_xlabel() == "10 tasks, sorted by Δ"
