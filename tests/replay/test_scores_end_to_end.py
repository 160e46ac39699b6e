"""The credit scores' real path: generated tasks, an RL run's update file holding a success (the oracle) and a
failure (the oracle, then its answer
deleted), `depgpo counterfactual-sample` on it, then the scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depgpo.cli import main
from depgpo.env.episode import EpisodeConfig
from depgpo.replay.run import run_commands
from depgpo.report.load import turn_anchors
from depgpo.report.scores import read_counterfactuals, score_frame, summarise, weightings, weights
from depgpo.tasks import load_task
from depgpo.tasks.generate import build_task, write_task

pytestmark = pytest.mark.sandbox

FAMILY = "supporting_read"  # a read credited for what it showed, and writes: DepGPO's credit differs from uniform


def rollout(task_dir: Path, commands: list[str], out: Path) -> dict:
    """A trajectory record as `depgpo rl` logs it: the traced episode, with num_turns and anchor_keys."""
    trajectory = run_commands(load_task(task_dir), commands, list(range(len(commands))),
                              EpisodeConfig(command_timeout_s=10), out)
    trajectory["num_turns"] = len(commands)
    return {"num_turns": len(commands), "anchor_keys": turn_anchors(trajectory), **trajectory}


def test_sample_replays_both_outcomes_and_scores_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # task.path is relative, as in the DAG (run from the repository root)
    task_dir = write_task(build_task(FAMILY, "pool", 0, seed=0), Path("tasks") / FAMILY, {"split": "pool"})
    oracle = json.loads((task_dir / "solution" / "oracle.json").read_text())
    success = rollout(task_dir, oracle, tmp_path / "ep-success")
    failure = rollout(task_dir, [*oracle, "rm /app/answer.txt"], tmp_path / "ep-failure")
    assert success["verifier"]["reward"] == 1.0 and failure["verifier"]["reward"] == 0.0
    seed_dir = Path("rl/depgpo/seed0")
    (seed_dir / "trajectories").mkdir(parents=True)
    (seed_dir / "trajectories" / "update0000.jsonl").write_text(
        "\n".join(json.dumps(r) for r in (failure, success, failure)) + "\n")

    out = Path("counterfactual/depgpo.jsonl")
    assert main(["counterfactual-sample", str(seed_dir), "--per-outcome", "1", "--out", str(out),
                 "agent.workers=2", "agent.command_timeout_s=10"]) == 0
    objects = [json.loads(line) for line in out.read_text().splitlines()]
    assert [o["reward"] for o in objects] == [1.0, 0.0]  # one of each outcome, successes first
    assert all((out.parent / o["trajectory"]).is_file() for o in objects)
    # GiGPO's group: the three rollouts of the task in the update file, the success the middle one.
    assert objects[0]["gigpo_group"]["member"] == 1 and objects[0]["gigpo_group"]["rewards"] == [0.0, 1.0, 0.0]

    # (e): the success gets its minimal sufficient set, holding every necessary command; a failure none.
    found = objects[0]["sufficient_set"]
    assert found["complete"] and {c["index"] for c in objects[0]["commands"] if c["necessary"]} <= set(found["kept"])
    assert objects[1]["sufficient_set"] is None and objects[1]["sufficient_set_note"].startswith("not a success")
    results = read_counterfactuals(out)
    frame = score_frame(results, weightings([0.25]))
    # Full DepGPO recomputed on the kept replay gives the q the counterfactual itself reported.
    depgpo = next(w for w in weightings() if w.name == "depgpo")
    scores, factors, fallback = weights(depgpo, results[0])
    assert fallback is None and scores == pytest.approx([c["credit"] for c in objects[0]["commands"]])
    # Every necessary command of the oracle is credited (docs/replay.md#cost found the same), and the step-factor
    # mass on necessary turns is at least uniform's share.
    success_rows = frame[(frame.outcome == "success") & (frame.label == "necessary")]
    assert (frame.label == "in_sufficient_set").sum() == len(weightings([0.25]))  # the success, scored twice
    full = summarise(success_rows[success_rows.weighting == "depgpo"])
    uniform = summarise(success_rows[success_rows.weighting == "uniform"])
    # In its group the success's turns that share the failures' states get a positive step advantage: defined.
    assert success_rows[success_rows.weighting == "gigpo"].defined.tolist() == [True]
    necessary = sum(c["necessary"] for c in objects[0]["commands"])
    assert necessary > 0 and full["recall"].value == 1.0
    assert uniform["precision"].value == pytest.approx(necessary / len(objects[0]["commands"]))
    assert full["mass"].value >= uniform["mass"].value
    # The failure is scored apart, against the commands whose removal raised its reward: the deletion alone, which
    # the last-command weighting finds and uniform weights dilute.
    failure = frame[frame.outcome == "failure"]
    assert failure[failure.weighting == "uniform"].labelled.tolist() == [1]
    assert summarise(failure[failure.weighting == "last"])["recall"].value == 1.0
    uniform_failure = summarise(failure[failure.weighting == "uniform"])
    assert uniform_failure["precision"].value == pytest.approx(1 / (len(oracle) + 1))
    # Each disagreement listed is a labelled command without credit or a credited one without a label, and no other.
    from depgpo.report.disagreements import MISSED, SPURIOUS, disagreements

    listed = {(row.kind, row.index) for row in disagreements(results).itertuples()}
    expected = {(MISSED if c["necessary"] else SPURIOUS, c["index"]) for c, q in zip(objects[0]["commands"], scores)
                if c["necessary"] != (q > 0)}
    assert listed == expected  # the failure's harmful deletion is credited: not listed
