"""Generated tasks: deterministic, loadable, and for every family the oracle passes a real traced episode, the
family's record reaches E, and a plausible wrong answer fails."""

from __future__ import annotations

import argparse
import json
import re
from itertools import zip_longest
from pathlib import Path

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.tasks import TaskFormatError, generate_cli, load_task, offline_test_command
from depgpo.tasks.generate import (
    FAMILIES,
    build_task,
    distractor_commands,
    generate_all,
    generate_task_set,
    oracle_commands,
    write_task,
)
from depgpo.tasks.generate import SPLITS

SEED = 3


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def index_of(split_dir: Path) -> list[dict]:
    return json.loads((split_dir / "index.json").read_text())["tasks"]


def test_same_seed_writes_the_same_bytes(tmp_path):
    generate_all(tmp_path / "a", seed=SEED, pool=6, test=6)
    generate_all(tmp_path / "b", seed=SEED, pool=6, test=6)
    generate_all(tmp_path / "c", seed=SEED + 1, pool=6, test=6)
    first = tree_bytes(tmp_path / "a")
    assert first == tree_bytes(tmp_path / "b")
    assert first != tree_bytes(tmp_path / "c")
    assert len(first) > 3 * 6 * 8  # every task has at least 8 files


def test_every_family_loads_as_a_harbor_task(tmp_path):
    paths = generate_task_set(tmp_path, "pool", len(FAMILIES), SEED)
    assert [entry["family"] for entry in index_of(tmp_path / "pool")] == list(FAMILIES)
    for path, family in zip(paths, FAMILIES):
        task = load_task(path)
        assert task.id == path.name and task.metadata["family"] == family
        assert task.workdir == "/app" and task.setup_commands == [] and task.unreplayable == []
        assert offline_test_command(task) == task.test_command  # the verifier needs no network
        assert {sandbox for _, sandbox in task.verifier_files} == {"/tests/test.sh"}  # shell checks alone
        assert task.solution_script.read_text().endswith("\n".join(oracle_commands(path)) + "\n")
        assert oracle_commands(path) and distractor_commands(path)


def test_test_sets_share_ids_but_not_parameters(tmp_path):
    generate_all(tmp_path, seed=SEED, pool=24, test=12)
    tb20, tb21 = index_of(tmp_path / "test_tb20"), index_of(tmp_path / "test_tb21")
    assert tb20 == tb21 and len(tb20) == 12
    for entry in tb20:
        old, new = tmp_path / "test_tb20" / entry["id"], tmp_path / "test_tb21" / entry["id"]
        assert (old / "instruction.md").read_text() != (new / "instruction.md").read_text()
        assert oracle_commands(old) != oracle_commands(new)

    def answer_numbers(split: str) -> set[str]:  # answers, ports and new settings all have 4-5 digits
        return {number for entry in index_of(tmp_path / split)
                for command in oracle_commands(tmp_path / split / entry["id"])
                for number in re.findall(r"\b\d{4,5}\b", command)}

    pool, test20, test21 = answer_numbers("pool"), answer_numbers("test_tb20"), answer_numbers("test_tb21")
    assert pool and test20 and test21
    assert not pool & test20 and not pool & test21 and not test20 & test21


def test_every_split_writes_every_digit_at_every_position():
    """Splits are disjoint, yet a policy that copies a test value meets no digit at a position training never had
    (splitting by the value's own remainder left test values ending on digits no training value ended on)."""
    for name, split in SPLITS.items():
        for position in (1, 2, 3):  # values: 1000-9999
            assert {str(n)[position] for n in split.values} == set("0123456789"), (name, position)
        for position in (3, 4):  # ports: 18500-18999
            assert {str(n)[position] for n in split.ports} == set("0123456789"), (name, position)
    training = set(SPLITS["pool"].values)
    assert not training & set(SPLITS["test_tb20"].values) and not training & set(SPLITS["test_tb21"].values)


def test_supporting_read_value_is_only_in_the_file():
    for index in range(20):
        spec = build_task("supporting_read", "pool", index, SEED)
        (value,) = [command.split()[1] for command in spec.oracle if command.startswith("echo ")]
        assert value not in spec.instruction
        assert any(f": {value}\n" in content for content in spec.files.values())


def test_rerun_replaces_a_generated_split_but_not_a_foreign_directory(tmp_path):
    generate_task_set(tmp_path, "pool", 12, SEED)
    generate_task_set(tmp_path, "pool", 6, SEED)
    assert len([p for p in (tmp_path / "pool").iterdir() if p.is_dir()]) == 6
    (tmp_path / "test_tb20").mkdir()
    (tmp_path / "test_tb20" / "mine.txt").write_text("keep me\n")
    with pytest.raises(FileExistsError):
        generate_task_set(tmp_path, "test_tb20", 6, SEED)
    assert (tmp_path / "test_tb20" / "mine.txt").exists()


def test_cli(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    generate_cli.add_arguments(parser)
    args = parser.parse_args(["--out", str(tmp_path), "--seed", "5", "--pool", "4", "--test", "2",
                              "--families", "config_edit,supporting_read"])
    assert generate_cli.run(args) == 0
    assert [e["family"] for e in index_of(tmp_path / "pool")] == ["supporting_read", "config_edit"] * 2
    assert len(index_of(tmp_path / "test_tb21")) == 2
    assert generate_cli.run(parser.parse_args(["--out", str(tmp_path / "x"), "--families", "nope"])) == 2
    assert "unknown task families nope" in capsys.readouterr().err


def test_sft_split_and_pytest_verifier(tmp_path):
    written = generate_all(tmp_path, seed=SEED, pool=2, test=1, sft=3, verifier="pytest")
    assert [len(written[s]) for s in ("sft", "pool", "test_tb20", "test_tb21")] == [3, 2, 1, 1]
    assert (written["sft"][0] / "tests" / "test_outputs.py").is_file()
    assert "sft" not in generate_all(tmp_path / "none", seed=SEED, pool=1, test=1)  # absent unless asked
    sft_numbers = {n for p in written["sft"] for n in re.findall(r"\b\d{4,5}\b", " ".join(oracle_commands(p)))}
    assert sft_numbers and all(sum(map(int, n)) % 5 in (0, 1, 2) for n in sft_numbers)  # training values, never a test's
    with pytest.raises(ValueError, match="unknown verifier"):
        write_task(build_task("config_edit", "pool", 0, SEED), tmp_path / "x", {}, verifier="perl")
    assert not (tmp_path / "x").exists()


def test_malformed_oracle_is_reported(tmp_path):
    (task,) = generate_task_set(tmp_path, "pool", 1, SEED)
    (task / "solution" / "oracle.json").write_text('{"turns": 1}')
    with pytest.raises(TaskFormatError, match="JSON list of command strings"):
        oracle_commands(task)


# --- real episodes ---------------------------------------------------------------------------------------------


def run_episode(task_dir: Path, commands: list[str]) -> tuple[list[dict], dict]:
    with Episode(load_task(task_dir), EpisodeConfig(command_timeout_s=20)) as ep:
        records = [ep.run_command(command, turn=turn) for turn, command in enumerate(commands)]
        return records, ep.verify()


@pytest.mark.sandbox
@pytest.mark.parametrize("verifier", ["shell", "pytest"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_oracle_passes_with_distractors_and_wrong_answer_fails(tmp_path, family, verifier):
    spec = build_task(family, "pool", 0, SEED)
    task_dir = write_task(spec, tmp_path / family, {"split": "pool", "seed": SEED}, verifier)
    # Distractors before and between the oracle's turns, and after the last one.
    commands = [c for pair in zip_longest(spec.distractors, spec.oracle) for c in pair if c is not None]
    records, verifier = run_episode(task_dir, commands)

    assert verifier["reward"] == 1.0, verifier["output"]
    assert all(r["exit_code"] == 0 for r in records), [(r["text"], r["observation"]) for r in records]
    for r in records:
        if r["text"] in spec.distractors:  # nothing the task is about; the one write lands under /tmp
            assert all(w["path"].startswith("/tmp/") for w in r["writes"]), r["writes"]
            assert r["deletions"] == [] and r["processes_started"] == []
    assert spec.record in verifier["E"]
    assert not any(record.startswith("/tmp/") for record in verifier["E"])  # the distractors' write is outside E
    how = {d["record"]: d["how"] for d in verifier["E_detail"]}
    if family == "required_deletion":
        assert how[spec.record] == "missing"
    if family == "server_port":
        assert how[spec.record] == "connect"
        (serve,) = [r for r in records if r["text"] == spec.oracle[-1]]  # the last command serves
        assert serve["ports_bound"] == [spec.record]
    if family == "script_then_run":  # the script reaches E only through the run that read it
        assert not any(r.endswith(".sh") for r in verifier["E"])

    _, wrong_verifier = run_episode(task_dir, spec.wrong)
    assert wrong_verifier["reward"] == 0.0, wrong_verifier["output"]

    # An agent that does nothing: the verifier's trace still shows the record it looked for (a closed port is a
    # refused connect), so E never falls back to the text of the verifier.
    _, idle = run_episode(task_dir, [])
    assert idle["reward"] == 0.0 and idle["E_source"] == "trace", idle
    assert spec.record in idle["E"], idle["E_detail"]
