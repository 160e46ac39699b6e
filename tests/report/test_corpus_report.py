"""`depgpo report --trajectories`: Figure 1(d) and Table 11 on a directory of real trajectories."""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from depgpo.credit import CreditConfig, aggregate_diagnostics, credit_with_fallback
from depgpo.inference import load_trajectories
from depgpo.report.cli import add_arguments, run
from depgpo.report.corpus import corpus_report
from tests.helpers import credit_examples as examples
from tests.helpers.credit_examples import BN_FIT_MODIFY, CONSTRAINTS_SCHEDULING, COUNT_DATASET_TOKENS

OFFLINE = Path(__file__).parents[1] / "data" / "offline"


def example(source, task_id: str, reward: float | None) -> dict:
    """A worked example's trajectory with its turn count and the given verifier reward (None: no reward)."""
    trajectory = copy.deepcopy(source.trajectory)
    trajectory["task"]["id"] = task_id
    trajectory["num_turns"] = source.num_turns
    trajectory["verifier"]["reward"] = reward
    return trajectory


def build_corpus(root: Path) -> Path:
    """Passing: tokens (3 commands), scheduling (6) and native_traced (3); failing: bn-fit (3) and a scheduling
    copy (6), whose length must not count it among the passing ≥ 5; one trajectory without a reward."""
    (root / "nested").mkdir(parents=True)
    (root / "tokens.json").write_text(json.dumps(example(COUNT_DATASET_TOKENS, "tokens", 1.0)))
    (root / "nested" / "batch.json").write_text(json.dumps([
        example(CONSTRAINTS_SCHEDULING, "scheduling", 1.0), example(BN_FIT_MODIFY, "bn-fit", 0.0),
        example(CONSTRAINTS_SCHEDULING, "scheduling-failed", 0.0)]))
    shutil.copy(OFFLINE / "native_traced.json", root / "nested" / "native_traced.json")
    shutil.copy(OFFLINE / "terminus2.json", root / "terminus2.json")  # no reward: left out of the figure
    (root / "notes.txt").write_text("not a trajectory, and not *.json: never read")
    return root


def expected_rows(root: Path, config: CreditConfig, static: bool = False) -> list[dict]:
    """What each trajectory's row must hold, computed straight from the credit module."""
    rows = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".json", ".jsonl")):
        for trajectory in load_trajectories(path, static=static):
            result = credit_with_fallback(trajectory, config, trajectory.get("num_turns"))
            positive = sum(command.q > 0 for command in result.commands)
            rows.append({"source": str(path), "task": trajectory["task"]["id"],
                         "commands": len(trajectory["commands"]), "reward": trajectory["verifier"].get("reward"),
                         "connected_fraction": positive / len(result.commands) if result.commands else 0.0,
                         "fallback": result.fallback, "diagnostics": result.diagnostics})
    return rows


def report(*options: str) -> int:
    parser = argparse.ArgumentParser(prog="depgpo report")
    add_arguments(parser)
    return run(parser.parse_args(list(options)))


def markdown_values(path: Path) -> dict[str, str]:
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in path.read_text().splitlines() if line.startswith("|")]
    return {label: value for label, value in rows[2:]}


def figure_notes(result: dict) -> list[str]:
    return {name: notes for name, _, notes in result["produced"]}["fig1d"]


def assert_figures(out: Path) -> None:
    assert (out / "fig1d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "fig1d.pdf").read_bytes()[:5] == b"%PDF-"
    assert (out / "fig1d.png").stat().st_size > 1000 and (out / "fig1d.pdf").stat().st_size > 1000


def test_rows_equal_the_credit_of_each_trajectory(tmp_path):
    corpus, out, config = build_corpus(tmp_path / "corpus"), tmp_path / "out", CreditConfig(beta=0.25)
    result = corpus_report([corpus], out, "worked examples", config, static=False)
    expected = expected_rows(corpus, config)
    table = pd.read_csv(out / "trajectories.csv")
    assert result["trajectories"] == len(table) == len(expected) == 6 and result["skipped"] == []
    assert table.source.tolist() == [row["source"] for row in expected]
    assert table.task.tolist() == ["scheduling", "bn-fit", "scheduling-failed", "write-42", "tabs-to-spaces", "tokens"]
    assert table.commands.tolist() == [row["commands"] for row in expected]
    assert table.connected_fraction.tolist() == pytest.approx([row["connected_fraction"] for row in expected])
    assert table.connected_fraction.tolist() == pytest.approx([2 / 6, 2 / 3, 2 / 6, 2 / 3, 1 / 5, 2 / 3])
    assert [None if pd.isna(r) else r for r in table.reward] == [1.0, 0.0, 0.0, 1.0, None, 1.0]
    assert [None if pd.isna(f) else f for f in table.fallback] == [row["fallback"] for row in expected]
    assert table.records.tolist() == ["traced"] * 4 + ["static", "traced"]


def test_figure_splits_passing_and_longer_trajectories(tmp_path):
    corpus, out = build_corpus(tmp_path / "corpus"), tmp_path / "out"
    result = corpus_report([corpus], out, "worked examples", CreditConfig(), static=False)
    notes = figure_notes(result)
    # Passing: scheduling (6 commands), write-42 (3), tokens (3); the failing scheduling copy is not counted.
    assert notes[0] == "3 passing trajectories, 1 of them with ≥ 5 commands."
    assert "1 trajectories without a reward are left out." in notes
    assert_figures(out)
    index = (out / "index.md").read_text()
    assert "# Report on the corpus worked examples" in index and f"- `{corpus}`" in index
    assert "3 passing trajectories, 1 of them with ≥ 5 commands." in index
    assert "[fig1d.png](fig1d.png)" in index and "[table11.md](table11.md)" in index
    assert '"beta": 0.5' in index and "4 files found, 0 skipped; 6 trajectories loaded" in index


def test_table11_is_the_credit_modules_aggregate(tmp_path):
    corpus, out, config = build_corpus(tmp_path / "corpus"), tmp_path / "out", CreditConfig()
    corpus_report([corpus], out, "worked examples", config, static=False)
    expected = aggregate_diagnostics([row["diagnostics"] for row in expected_rows(corpus, config)])
    values = pd.read_csv(out / "table11.csv").set_index("statistic")["value"]
    rows = {"Commands per trajectory": "commands_per_trajectory",
            "Trajectories with usable dependency credit": "usable_pct",
            "Trajectories using the unit-factor fallback": "fallback_pct",
            "Write commands with positive credit": "positive_write_commands_pct",
            "Read commands with positive credit": "positive_read_commands_pct",
            "Positive-credit writes with indirect contribution": "positive_writes_with_indirect_pct"}
    for label, key in rows.items():
        assert values[label] == pytest.approx(expected[key]), label
    assert values["Commands per trajectory"] == pytest.approx((6 + 3 + 6 + 3 + 5 + 3) / 6)
    assert values["credit/step_factor_std"] == pytest.approx(expected["mean_step_factor_std"])
    cells = markdown_values(out / "table11.md")
    assert list(cells)[:6] == list(rows)
    assert cells["Commands per trajectory"] == f"{expected['commands_per_trajectory']:.3g}"
    assert cells["Trajectories with usable dependency credit"] == f"{expected['usable_pct']:.1f}%"
    assert "Dependency-trace statistics on worked examples." in (out / "table11.md").read_text()


def test_chat_logs_without_reward_plot_every_trajectory(tmp_path):
    out = tmp_path / "out"
    sources = [OFFLINE / "chat_single.json", OFFLINE / "terminus2.json"]
    result = corpus_report(sources, out, "chat logs", CreditConfig(), static=False)
    notes = figure_notes(result)
    assert notes[0] == "2 loaded trajectories, 1 of them with ≥ 5 commands."
    assert notes[1].startswith("No trajectory records a verifier reward") and "all 2 trajectories" in notes[1]
    assert "passing" not in notes[0]
    assert_figures(out)
    assert pd.read_csv(out / "trajectories.csv").reward.isna().all()


def test_static_reinfers_traced_records(tmp_path):
    out, config = tmp_path / "out", CreditConfig()
    corpus_report([OFFLINE / "native_traced.json"], out, "static", config, static=True)
    row = pd.read_csv(out / "trajectories.csv").iloc[0]
    static = load_trajectories(OFFLINE / "native_traced.json", static=True)[0]
    assert row.records == "static"
    result = credit_with_fallback(static, config, static.get("num_turns"))
    # static inference follows make.py's literal open('/app/out.txt', 'w'): its writer and the script's are credited
    assert [command.q for command in result.commands] == [1.0, 1.0, 0.0]
    assert row.connected_fraction == 2 / 3
    assert pd.isna(row.fallback)
    assert "re-inferred from the command texts (`--static`)" in (out / "index.md").read_text()


def test_cli_skips_a_malformed_file_names_it_and_exits_2(tmp_path):
    corpus = build_corpus(tmp_path / "corpus")
    (corpus / "nested" / "broken.jsonl").write_text('{"messages": [\n')
    (corpus / "zz-unknown.json").write_text(json.dumps({"hello": "world"}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "depgpo", "report", "--trajectories", str(corpus),
                           "--name", "with broken files", "--out", str(out)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "6 trajectories of with broken files reported in" in proc.stdout
    stderr = proc.stderr.splitlines()
    assert stderr[0].startswith(f"{corpus / 'nested' / 'broken.jsonl'}: skipped: ")
    assert stderr[1].startswith(f"{corpus / 'zz-unknown.json'}: skipped: unknown shape")
    assert len(stderr) == 2
    assert len(pd.read_csv(out / "trajectories.csv")) == 6  # the good files are still reported
    assert_figures(out)
    index = (out / "index.md").read_text()
    assert f"- `{corpus / 'zz-unknown.json'}`: unknown shape" in index and "6 files found, 2 skipped" in index


def test_cli_exit_codes_and_argument_errors(tmp_path, capsys):
    corpus, out = build_corpus(tmp_path / "corpus"), tmp_path / "out"
    assert report("--trajectories", str(corpus / "tokens.json"), str(corpus / "nested"), "--name", "two sources",
                  "--out", str(out), "--variant", "direct_only") == 0
    assert len(pd.read_csv(out / "trajectories.csv")) == 5
    assert '"variant": "direct_only"' in (out / "index.md").read_text()
    capsys.readouterr()
    assert report("--trajectories", str(corpus), "--out", str(out)) == 2
    assert "--trajectories needs --name" in capsys.readouterr().err
    assert report("--trajectories", str(corpus), "--name", "x") == 2
    assert "--trajectories needs --out" in capsys.readouterr().err
    assert report("--trajectories", str(corpus), "--name", "x", "--out", str(out), "--beta", "2") == 2
    assert "beta must lie in [0, 1]" in capsys.readouterr().err
    assert report("--results", str(tmp_path), "--name", "x") == 2
    assert "--name: only with --trajectories" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        report("--results", str(tmp_path), "--trajectories", str(corpus))
    assert exit_.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        report("--name", "x")


def test_nothing_loadable_is_an_error_with_the_reasons(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.json").write_text("")
    out = tmp_path / "out"
    assert report("--trajectories", str(tmp_path / "in"), str(tmp_path / "none"), "--name", "nothing",
                  "--out", str(out)) == 2
    stderr = capsys.readouterr().err
    assert f"{tmp_path / 'in' / 'empty.json'}: skipped: the file is empty" in stderr
    assert f"{tmp_path / 'none'}: skipped: " in stderr and "error: no trajectory could be loaded" in stderr
    assert not (out / "fig1d.png").exists()
    assert "- nothing: no trajectory could be loaded" in (out / "index.md").read_text()


def test_a_share_with_nothing_to_count_is_not_available(tmp_path):
    """One write and no read: the read share has no denominator, shown as – (NaN in the CSV), not as 0%."""
    lines = ["42"]
    write = examples.command(0, "echo 42 > /app/out.txt", writes=(examples.text_write("/app/out.txt", lines, lines),))
    writes_only = examples.trajectory("write-only", "Write 42 to /app/out.txt.", [write], ["/app/out.txt"],
                                      {"/app/out.txt": lines})
    (tmp_path / "in.json").write_text(json.dumps(writes_only))
    corpus_report([tmp_path / "in.json"], tmp_path / "out", "one write", CreditConfig(), static=False)
    cells = markdown_values(tmp_path / "out" / "table11.md")
    assert cells["Read commands with positive credit"] == "–"
    assert cells["Write commands with positive credit"] == "100.0%"
    values = pd.read_csv(tmp_path / "out" / "table11.csv").set_index("statistic")["value"]
    assert pd.isna(values["Read commands with positive credit"])
