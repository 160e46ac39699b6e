"""Counterfactual (e), the minimal sufficient set from replays of subsets (depgpo.replay.subsets), beside the removal
label: on real replays of a task where two commands each write the answer whole, leave-one-out labels neither
necessary and the set keeps one; where nothing is redundant the two labels agree; and the report scores both."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.replay.subsets import search
from depgpo.report.load import BadInput
from depgpo.report.scores import SUBSET_LABEL, read_counterfactuals, score_frame, summarise, weightings
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

ANSWER_TEST = ("from pathlib import Path\n\ndef test_outcome():\n"
               "    assert Path('/app/answer.txt').read_text().splitlines() == ['42']\n")
# Commands 1 and 3 each write the answer whole: either alone earns the reward.
TWO_WRITES = ["ls /app", "echo 42 > answer.txt", "cat answer.txt", "printf '42\\n' > answer.txt", "wc -c answer.txt"]
COPY_TEST = ("from pathlib import Path\n\ndef test_outcome():\n"
             "    assert Path('/app/answer.txt').read_text().splitlines() == ['4821']\n")
# No redundancy: the read that copies the value and the copy are each necessary, the rest is not.
COPY_VALUE = ["ls /app", "grep -o '[0-9][0-9]*' data.txt > /tmp/value", "cp /tmp/value answer.txt",
              "cp answer.txt /tmp/backup.txt"]


def counterfactual_json(root, name, commands, *options, stem=None):
    """`depgpo counterfactual --format json --out` on task `name`, written to STEM.jsonl (default: the name)."""
    task_dir, stem = root / name, stem or name
    listing = root / f"{stem}.json"
    listing.write_text(json.dumps(commands))
    proc = subprocess.run([sys.executable, "-m", "depgpo", "counterfactual", str(listing), "--task", str(task_dir),
                           "--format", "json", "--timeout", "20", "--out", str(root / f"out-{stem}"),
                           "agent.workers=2", *options], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (root / f"{stem}.jsonl").write_text(proc.stdout)
    return json.loads(proc.stdout)


def reward(task_dir, commands: list[str]) -> float:
    """The reward of `commands` in a plain Episode: an independent replay, not the counterfactual's own."""
    with Episode(load_task(task_dir), EpisodeConfig(command_timeout_s=20)) as episode:
        for turn, command in enumerate(commands):
            episode.run_command(command, turn=turn)
        return episode.verify()["reward"]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    root = tmp_path_factory.mktemp("subsets")
    make_harbor_task(root, "two-writes", instruction="Write 42 to /app/answer.txt.", test_py=ANSWER_TEST,
                     files={"notes.txt": "the answer is 42\n"})
    make_harbor_task(root, "copy-value", instruction="Copy the count to /app/answer.txt.", test_py=COPY_TEST,
                     files={"data.txt": "count: 4821\n"})
    return root, {"two-writes": counterfactual_json(root, "two-writes", TWO_WRITES),
                  "copy-value": counterfactual_json(root, "copy-value", COPY_VALUE)}


@pytest.mark.sandbox
def test_two_writes_that_each_suffice_removal_labels_neither_and_the_set_keeps_one(replayed):
    root, results = replayed
    result = results["two-writes"]
    assert result["reward"] == 1.0 and result["reproducible"] is True
    assert [c["necessary"] for c in result["commands"]] == [False] * 5  # removal is blind to the redundancy
    # The forward greedy tries the earlier write first and drops it: the later one suffices alone.
    assert result["sufficient_set"] == {"kept": [3], "complete": True, "replays": 5}
    assert [c["in_sufficient_set"] for c in result["commands"]] == [False, False, False, True, False]
    # Checked with independent replays: the set alone suffices, and without its one command nothing is left.
    task_dir = root / "two-writes"
    assert reward(task_dir, [TWO_WRITES[3]]) == 1.0 and reward(task_dir, []) == 0.0
    # Replays of subsets, worked out: () fails, (2,3,4) suffices, (3,4) suffices, (4) fails, (3) suffices; the
    # other sets it visits were (a)'s or already known. Then (a) + repeat + 5 removals + credited only.
    assert result["cost"]["replays"] == 1 + 1 + 5 + 1 + 5


@pytest.mark.sandbox
def test_without_redundancy_the_set_is_the_necessary_commands_in_one_replay(replayed):
    _, results = replayed
    result = results["copy-value"]
    necessary = [c["necessary"] for c in result["commands"]]
    assert necessary == [False, True, True, False]
    assert [c["in_sufficient_set"] for c in result["commands"]] == necessary
    # The necessary commands alone suffice: the one replay of subsets the search needed.
    assert result["sufficient_set"] == {"kept": [1, 2], "complete": True, "replays": 1}


@pytest.mark.sandbox
def test_the_scores_table_scores_both_labels(replayed):
    root, _ = replayed
    results = [r for name in ("two-writes", "copy-value") for r in read_counterfactuals(root / f"{name}.jsonl")]
    frame = score_frame(results, weightings())
    uniform = frame[frame.weighting == "uniform"]
    removal = summarise(uniform[uniform.label == "necessary"])
    subset = summarise(uniform[uniform.label == SUBSET_LABEL])
    # Removal labels 0 of two-writes' 5 and 2 of copy-value's 4; the set 1 and 2.
    assert removal["precision"].value == pytest.approx(2 / 9) and subset["precision"].value == pytest.approx(3 / 9)
    two = frame[(frame.task == "two-writes") & (frame.weighting == "depgpo")].set_index("label")
    assert two.loc["necessary", "recall_den"] == 0 and two.loc[SUBSET_LABEL, "recall_den"] == 1
    # DepGPO credits the later write (so it finds the set's command), and the earlier one too (counted against it).
    assert two.loc[SUBSET_LABEL, "recall_num"] == 1 and two.loc[SUBSET_LABEL, "precision_den"] >= 2

    out = root / "report"
    proc = subprocess.run([sys.executable, "-m", "depgpo", "report", "--counterfactuals",
                           *(str(root / f"{n}.jsonl") for n in ("two-writes", "copy-value")), "--name", "subsets",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = (out / "table_scores.md").read_text()
    assert "Successes (necessary) Precision" in text and "Successes (in minimal sufficient set) Precision" in text
    assert "2 successes carry a minimal sufficient set" in text


@pytest.mark.sandbox
def test_a_subset_budget_stops_the_search_and_leaves_the_rest_unlabelled(replayed):
    root, _ = replayed
    result = counterfactual_json(root, "two-writes", TWO_WRITES, "--subsets", "2", stem="budget")
    # () fails, (2,3,4) suffices: 0 and 1 dropped; deciding 2 would take a third replay.
    assert result["sufficient_set"] == {"kept": [2, 3, 4], "complete": False, "replays": 2}
    assert [c["in_sufficient_set"] for c in result["commands"]] == [False, False, None, None, None]
    (read,) = read_counterfactuals(root / "budget.jsonl")
    frame = score_frame([read], weightings()[:1])
    assert frame[frame.label == SUBSET_LABEL].recall_den.item() == 0  # undecided commands weigh 0


def test_a_negative_subset_budget_is_refused_before_any_replay(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "depgpo", "counterfactual", str(tmp_path / "x.json"), "--task",
                           str(tmp_path), "--subsets", "-1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--subsets -1: must be 0 or more" in proc.stderr


@pytest.mark.sandbox
@pytest.mark.parametrize(("edit", "message"), [
    (lambda o: o["commands"][1].update(in_sufficient_set="yes"),
     "commands[1].in_sufficient_set: expected true, false or null, got 'yes'"),
    (lambda o: o["sufficient_set"].update(kept=[0]), "sufficient_set.kept: does not match"),
    (lambda o: o.update(sufficient_set=[3]), "sufficient_set: expected null or {"),
    (lambda o: o.update(reward=0.0), "sufficient_set: a failure (reward 0) has none"),
])
def test_a_malformed_sufficient_set_is_one_line_naming_file_field_and_fix(replayed, tmp_path, edit, message):
    root, results = replayed
    broken = json.loads(json.dumps(results["copy-value"]))
    edit(broken)
    path = root / "out-copy-value" / "broken.jsonl"  # beside the kept replay, which the object names
    broken["trajectory"] = str(root / "out-copy-value" / "trajectory.json")
    path.write_text(json.dumps(broken) + "\n")
    with pytest.raises(BadInput) as error:
        read_counterfactuals(path)
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"{path} line 1: ") and message in text
    assert "depgpo counterfactual TRAJ --task TASK_DIR --format json --out DIR" in text


def greedy(n: int, suffices) -> tuple[int, ...]:
    """The definition, one command at a time in order."""
    kept = set(range(n))
    for k in range(n):
        if suffices(tuple(sorted(kept - {k}))):
            kept.discard(k)
    return tuple(sorted(kept))


@pytest.mark.parametrize("seed", range(40))
def test_the_search_finds_the_forward_greedys_set_with_no_more_replays_than_it_needs(seed):
    # A monotone reward: a set suffices when it holds one of a few random "ways" (sets of commands), e.g. either of
    # two writes. The chunked search must give the one-at-a-time greedy's set, and every command of it is needed.
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    ways = [frozenset(rng.sample(range(n), rng.randint(1, min(3, n)))) for _ in range(rng.randint(1, 3))]

    def suffices(keep) -> bool:
        return any(way <= set(keep) for way in ways)

    necessary = [not suffices(tuple(i for i in range(n) if i != k)) for k in range(n)]
    known = {tuple(i for i in range(n) if i != k): not necessary[k] for k in range(n)}
    found = search(n, necessary, suffices, known)
    assert found.complete and found.kept == greedy(n, suffices)
    assert suffices(found.kept) and not any(suffices(tuple(i for i in found.kept if i != k)) for k in found.kept)
    assert found.labels == [k in found.kept for k in range(n)]
    # Never a set replayed twice nor one of (b)'s: at most the subsets of the candidates.
    assert found.replays <= 2 ** (n - sum(necessary))
    if suffices(tuple(k for k in range(n) if necessary[k])):
        assert found.replays <= 1  # no redundancy: the necessary commands alone, in one replay


def test_the_search_within_a_budget_keeps_a_sufficient_set():
    ways = [frozenset({1}), frozenset({3})]
    replayed = []

    def suffices(keep) -> bool:
        replayed.append(keep)
        return any(way <= set(keep) for way in ways)

    for budget in range(0, 6):
        replayed.clear()
        found = search(5, [False] * 5, suffices, {}, budget)
        assert len(replayed) == found.replays <= budget and suffices(found.kept)
        assert found.complete == (budget >= 5)
        # What it dropped is out of the set; what it kept, in it or undecided.
        assert all((label is False) == (k not in found.kept) for k, label in enumerate(found.labels))
    assert found.kept == (3,) and found.labels == [False, False, False, True, False]
