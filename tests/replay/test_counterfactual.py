"""`depgpo counterfactual` against ground truth: three Harbor tasks whose commands' necessity is known by
construction, replayed from their command lists. The necessity it reports must be what independent leave-one-out
replays (plain Episodes, run here) give, and what the construction says."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.sandbox


def answer_test(path: str, lines: list[str], absent: tuple[str, ...] = ()) -> str:
    checks = "".join(f"    assert not Path({p!r}).exists()\n" for p in absent)
    return ("from pathlib import Path\n\ndef test_outcome():\n"
            f"    assert Path({path!r}).read_text().splitlines() == {lines!r}\n" + checks)


# (name, files, test, commands, necessary by construction)
TASKS = [
    ("copy-value", {"data.txt": "count: 4821\n"}, answer_test("/app/answer.txt", ["4821"]),
     ["ls /app",                                       # looks: not necessary
      "grep -o '[0-9][0-9]*' data.txt > /tmp/value",   # reads the value that is later copied: necessary
      "cp /tmp/value answer.txt",                      # writes the answer: necessary
      "cp answer.txt /tmp/backup.txt"],                # a backup copy: not
     [False, True, True, False]),
    ("edit-config", {"config.ini": "port = 9000\nmode = dev\n"},
     answer_test("/app/config.ini", ["port = 8080", "mode = dev"]),
     ["cat config.ini", "cp config.ini /tmp/config.bak", "sed -i 's/9000/8080/' config.ini", "wc -l config.ini"],
     [False, False, True, False]),
    ("script-run", {"stale.txt": "old\n"}, answer_test("/app/out.txt", ["42"], absent=("/app/stale.txt",)),
     ["cat > gen.sh <<'EOF'\necho 42 > /app/out.txt\nEOF",  # the script that writes the answer: necessary
      "ls -la",
      "bash gen.sh",                                           # runs it: necessary
      "rm stale.txt",                                          # a required deletion: necessary
      "cat out.txt"],
     [True, False, True, True, False]),
]


def leave_one_out(task_dir, commands: list[str]) -> tuple[float, list[float]]:
    """The reward of the whole list and of the list without each command, each its own Episode."""
    task = load_task(task_dir)

    def reward(keep: list[str]) -> float:
        with Episode(task, EpisodeConfig(command_timeout_s=20)) as episode:
            for turn, command in enumerate(keep):
                episode.run_command(command, turn=turn)
            return episode.verify()["reward"]

    return reward(commands), [reward(commands[:k] + commands[k + 1:]) for k in range(len(commands))]


@pytest.fixture(scope="module")
def counterfactuals(tmp_path_factory):
    """`depgpo counterfactual --format json` on each task's command list, and the tasks."""
    root = tmp_path_factory.mktemp("counterfactual")
    results = {}
    for name, files, test_py, commands, _ in TASKS:
        task_dir = make_harbor_task(root, name, instruction=f"Task {name}.", test_py=test_py, files=files)
        listing = root / f"{name}.json"
        listing.write_text(json.dumps(commands))
        proc = subprocess.run([sys.executable, "-m", "depgpo", "counterfactual", str(listing), "--task",
                               str(task_dir), "--format", "json", "--timeout", "20", "agent.workers=2"],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        (line,) = proc.stdout.splitlines()
        results[name] = (task_dir, json.loads(line))
    return results


@pytest.mark.parametrize("name,commands,expected", [(t[0], t[3], t[4]) for t in TASKS], ids=[t[0] for t in TASKS])
def test_necessity_is_what_leave_one_out_replays_give(counterfactuals, name, commands, expected):
    task_dir, result = counterfactuals[name]
    full, without = leave_one_out(task_dir, commands)
    assert result["reward"] == full == 1.0
    assert [c["reward_without"] for c in result["commands"]] == without
    assert [c["necessary"] for c in result["commands"]] == [r < full for r in without] == expected
    assert [c["text"] for c in result["commands"]] == commands
    # (c): the credited commands alone, replayed, earn the reward; every necessary command is credited.
    assert result["sufficient"] is True and result["reward_credited_only"] == 1.0
    assert all(c["credit"] > 0 for c in result["commands"] if c["necessary"])
    assert result["credited"] == [c["index"] for c in result["commands"] if c["credit"] > 0]


def test_the_json_holds_what_the_scores_need(counterfactuals):
    _, result = counterfactuals["copy-value"]
    assert len(result["step_factors"]) == len(result["turn_credit"]) == 4
    # (a) and its repeat, (b) per command, (c); no (d) replay where the task cannot be redrawn; (e) the necessary
    # commands alone, which suffice (nothing is redundant)
    assert result["cost"]["replays"] == 2 + 4 + 1 + 1 and result["sufficient_set"]["replays"] == 1
    assert result["reward_repeat"] == 1.0 and result["reproducible"] is True
    assert result["cost"]["seconds"] > 0 and result["fidelity"]["reward_replayed"] == 1.0
    assert result["trajectory"] is None  # no --out: the replay (a) was not kept
    for command in result["commands"]:
        assert set(command) >= {"index", "turn", "credit", "reward_without", "necessary", "reward_perturbed"}
        if command["credited_read"]:  # not a generated task: no perturbation, and the reason
            assert command["reward_perturbed"] is None and "not a generated task" in command["perturbation"]


def test_a_credited_read_of_a_generated_task_is_perturbed(tmp_path):
    """supporting_read: the oracle cats the data file, then echoes the value it saw. In the task drawn with other
    values the same commands write the old value: the read's values mattered (reward 0). The echo's own reads
    reveal nothing, and the task's data file is written with the new values."""
    subprocess.run([sys.executable, "-m", "depgpo", "generate-tasks", "--out", str(tmp_path / "tasks"), "--pool",
                    "1", "--test", "0", "--seed", "5", "--families", "supporting_read"], check=True,
                   capture_output=True, timeout=300)
    (task_dir,) = [d for d in (tmp_path / "tasks" / "pool").iterdir() if d.is_dir()]
    oracle = task_dir / "solution" / "oracle.json"
    proc = subprocess.run([sys.executable, "-m", "depgpo", "counterfactual", str(oracle), "--task", str(task_dir),
                           "--format", "json", "--timeout", "20"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["reward"] == 1.0
    reads = [c for c in result["commands"] if c["credited_read"] and c["reward_perturbed"] is not None]
    assert reads, result["commands"]
    for command in reads:
        assert command["reward_perturbed"] == 0.0 and command["perturbation"].startswith("values changed: ")
    echo = next(c for c in result["commands"] if c["text"].startswith("echo "))
    assert echo["necessary"] is True and echo["reward_perturbed"] is None


def test_a_reward_that_changes_between_identical_replays_is_said(tmp_path, monkeypatch):
    """No task here is flaky on purpose, so the verdicts after (a) are what a racing task gives: the repeat of (a)
    earns 0. (a) itself is a real replay; the report must say that its necessity cannot be trusted."""
    from depgpo.credit import CreditConfig
    from depgpo.replay import counterfactual as module
    from depgpo.replay.source import read_sources

    name, files, test_py, commands, _ = TASKS[0]
    task_dir = make_harbor_task(tmp_path, name, instruction="x", test_py=test_py, files=files)
    listing = tmp_path / "commands.json"
    listing.write_text(json.dumps(commands))
    monkeypatch.setattr(module, "run_commands", lambda *a, **k: {"verifier": {"reward": 0.0}})
    result, lines = module.counterfactual(read_sources(listing)[0], task_dir, EpisodeConfig(command_timeout_s=20),
                                          CreditConfig(), workers=1)
    assert (result["reward"], result["reward_repeat"], result["reproducible"]) == (1.0, 0.0, False)
    (line,) = lines
    assert line.startswith(f"{listing}: the replay's reward is not reproducible (1.0 then 0.0 for the same commands)")


def test_a_removal_budget_removes_the_credited_commands_and_a_weighted_sample_of_the_rest(tmp_path):
    # script-run's five commands and two more looks, under a budget of 4: every credited command (at least gen.sh
    # written, run, the deletion) is removed, and max(4 - credited, ceil(4 / 2)) = 2 of the others, each weighing
    # others / 2; the rest get no label.
    name, files, test_py, commands, expected = TASKS[2]
    task_dir = make_harbor_task(tmp_path, name, instruction=f"Task {name}.", test_py=test_py, files=files)
    listing = tmp_path / "commands.json"
    listing.write_text(json.dumps(commands + ["echo one more look", "true"]))
    proc = subprocess.run([sys.executable, "-m", "depgpo", "counterfactual", str(listing), "--task", str(task_dir),
                           "--format", "json", "--timeout", "20", "--removals", "4", "--seed", "3",
                           "--out", str(tmp_path / "out"), "agent.workers=2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    credited = set(result["credited"])
    assert credited >= {0, 2, 3}
    others = [k for k in range(7) if k not in credited]
    removed = {c["index"] for c in result["commands"] if c["necessary"] is not None}
    assert credited <= removed and len(removed - credited) == 2
    assert result["removal_sample"] == {"others": len(others), "drawn": 2}
    for c in result["commands"]:
        weight = 1.0 if c["index"] in credited else len(others) / 2 if c["index"] in removed else 0.0
        assert c["weight"] == weight
        if c["index"] in removed:
            assert c["necessary"] == (expected + [False, False])[c["index"]]
        else:
            assert c["reward_without"] is None
    assert result["cost"]["replays"] == 2 + len(removed) + 1 + result["sufficient_set"]["replays"]

    # The report's scores read it: the sampled trajectory counts, weighted.
    from depgpo.report.scores import read_counterfactuals, score_frame, weightings
    path = tmp_path / "scores.jsonl"
    path.write_text(proc.stdout)
    (read,) = read_counterfactuals(path)
    assert read.removal_sample == (len(others), 2)
    frame = score_frame([read], weightings())
    depgpo = frame[frame.weighting == "depgpo"].iloc[0]
    assert depgpo.precision_num == 3 and depgpo.precision_den == len(credited) and depgpo.mass_den == 0


def test_a_removal_budget_below_1_is_refused_before_any_replay(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "depgpo", "counterfactual", str(tmp_path / "x.json"), "--task",
                           str(tmp_path), "--removals", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--removals 0: must be at least 1" in proc.stderr
