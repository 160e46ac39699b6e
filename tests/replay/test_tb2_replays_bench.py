"""bench/tb2_replays.py end to end on a miniature of its real input: a git repository laid out as TMax's evaluation
assets (evaluation_assets/daytona/<model>/terminal-bench-2-0/<task>__<id>/, chat-message trials in the shape of
tests/data/offline/harbor/chat) and a Harbor task of the same name. It extracts, chooses, replays, runs the
counterfactuals and writes the report, as it does on the public trials (docs/replay.md#real-terminal-bench-20-trials)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.helpers import DATA, REPO
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.sandbox

TRIAL = DATA / "offline" / "harbor" / "chat" / "sum-column__Kp2wQ7z"
TEST_PY = "def test_total():\n    assert open('/app/total.txt').read().strip() == '42'\n"


def _failing_copy(source, target):
    """The same trial whose last shell command wrote the wrong total, logged with reward 0."""
    shutil.copytree(source, target)
    messages = json.loads((target / "agent" / "trajectory.json").read_text())
    for message in messages:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = call["function"]["arguments"].replace("print s", "print s+1")
    (target / "agent" / "trajectory.json").write_text(json.dumps(messages))
    result = json.loads((target / "result.json").read_text())
    result["verifier_result"]["rewards"]["reward"] = 0.0
    (target / "result.json").write_text(json.dumps(result))


def test_the_bench_replays_chosen_trials_and_scores_their_counterfactuals(tmp_path):
    assets = tmp_path / "repo" / "evaluation_assets" / "daytona" / "some-model" / "terminal-bench-2-0"
    shutil.copytree(TRIAL, assets / "sum-column__Kp2wQ7z")
    _failing_copy(TRIAL, assets / "sum-column__Zz9yX8w")
    git = ["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "trials"], check=True)
    make_harbor_task(tmp_path / "tasks", "sum-column", instruction="Sum the second column.", test_py=TEST_PY,
                     files={"sales.csv": "item,amount\npen,12\ncup,30\n"})

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "bench/tb2_replays.py", "--mirror", str(tmp_path / "repo" / ".git"),
                           "--tasks-dir", str(tmp_path / "tasks"), "--out", str(out), "--per-task", "2",
                           "--cf-pass", "1", "--cf-fail", "0", "--removals", "2", "--timeout", "20"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["trial"]: row for row in map(json.loads, (out / "fidelity.jsonl").read_text().splitlines())}
    assert {trial: (row["logged_reward"], row["replayed_reward"]) for trial, row in rows.items()} == {
        "sum-column__Kp2wQ7z": (1.0, 1.0), "sum-column__Zz9yX8w": (0.0, 0.0)}
    # The logged observations come back ("(no output)" and "(exit_code=N)" are the harness's, not differences), but
    # for `sqlite3 --version` where this machine has the sqlite3 the logged one lacked: an environment's difference.
    assert set(rows["sum-column__Kp2wQ7z"]["fidelity"]["differing"]) <= {1}
    objects = [json.loads(line) for line in (out / "counterfactual" / "sum-column.jsonl").read_text().splitlines()]
    assert [o["reward"] for o in objects] == [1.0]  # --cf-fail 0: the success alone
    [success] = objects
    assert success["gigpo_group"]["rewards"] == [1.0, 0.0]  # the model's two attempts at the task, by trial name
    awk = next(c for c in success["commands"] if c["text"].startswith("awk"))
    assert awk["necessary"] is True and awk["credit"] > 0  # the command that wrote the total
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reproduced"] == 2 and summary["report_exit"] == 0
    assert (out / "report" / "table_scores.csv").is_file() and (out / "report" / "credit_disagreements.csv").is_file()

    assert subprocess.run([sys.executable, "bench/tb2_replays.py", "--merge", str(out), "--out", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=600, cwd=REPO).returncode == 0
    assert "| sum-column | 2 (1) | 2 | 2 (1 pass) |" in (tmp_path / "m" / "fidelity.md").read_text()
