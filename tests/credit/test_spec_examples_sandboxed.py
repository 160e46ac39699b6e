"""docs/credit.md#worked-examples (paper Tables 12-14) as real episodes: `depgpo run-episode` in the traced sandbox, then `depgpo credit`.

The hand-built versions live in tests/helpers/credit_examples.py (test_credit_spec.py). Here the same commands really run,
the tracer records what they did, the verifier really reads E, and the credit must come out exactly (β = 0.5).
Table 13 uses R in the paper; R is not installed here, so its structure is reproduced with Python: a package
install that writes only outside the tracked scope, a script written by a heredoc, then run to write what the
verifier reads.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.credit_examples import CONSTRAINTS_SCHEDULING, COUNT_DATASET_TOKENS, FINAL_ICS, ICS
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.sandbox

MODIFY_BN_PY = """cat > modify_bn.py <<'EOF'
import csv
rows = list(csv.reader(open("/app/bn_sample.csv")))
open("/app/learned_dag.csv", "w").write("from,to\\nU,Y\\nY,R\\n")
open("/app/intervened_dag.csv", "w").write("from,to\\nY,R\\n")
open("/app/final_bn_sample.csv", "w").write("".join(",".join(r) + "\\n" for r in rows[:3]))
EOF"""

CASES = {
    "table12": dict(
        commands=[c["text"] for c in COUNT_DATASET_TOKENS.trajectory["commands"]],
        files={"data/sample.jsonl": COUNT_DATASET_TOKENS.setup_files["/app/data/sample.jsonl"]},
        test_py="def test_answer():\n    assert open('/app/answer.txt').read().strip() == '63841'\n",
        expected=[("supporting read", 0.5), ("direct write", 1.0), ("read with no downstream use", 0.0)],
    ),
    "table13": dict(
        commands=["mkdir -p /usr/local/lib/R/site-library/bnlearn && echo 'Version: 4.9' > "
                  "/usr/local/lib/R/site-library/bnlearn/DESCRIPTION", MODIFY_BN_PY, "python3 modify_bn.py"],
        files={"bn_sample.csv": "U,Y,R\n1,0,2\n3,0,4\n5,0,6\n"},
        test_py=("def test_outputs():\n"
                 "    assert open('/app/learned_dag.csv').read().startswith('from,to')\n"
                 "    assert open('/app/intervened_dag.csv').read() == 'from,to\\nY,R\\n'\n"
                 "    assert len(open('/app/final_bn_sample.csv').read().splitlines()) == 3\n"),
        expected=[("no recorded dependency", 0.0), ("indirect write", 1.0), ("direct write", 1.0)],
    ),
    "table14": dict(
        commands=[c["text"] for c in CONSTRAINTS_SCHEDULING.trajectory["commands"]],
        files={},
        test_py=(f"def test_ics():\n    lines = open('{ICS}').read().splitlines()\n"
                 f"    assert lines == {FINAL_ICS!r}\n"),
        expected=[("deleted before contribution", 0.0), ("read with no downstream use", 0.0),
                  ("no credited output", 0.0), ("direct write", 1.0), ("read with no downstream use", 0.0),
                  ("direct write", 1.0)],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_spec_example_through_run_episode_and_credit(tmp_path, name):
    case = CASES[name]
    task = make_harbor_task(tmp_path, name, instruction=COUNT_DATASET_TOKENS.trajectory["instruction"]
                            if name == "table12" else f"Reproduce {name}.", test_py=case["test_py"],
                            files=case["files"])
    commands = tmp_path / "commands.json"
    commands.write_text(json.dumps(case["commands"]))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "depgpo", "run-episode", str(task), "--commands", str(commands),
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    trajectory = json.loads((out / "trajectory.json").read_text())
    assert trajectory["verifier"]["reward"] == 1.0 and trajectory["verifier"]["E_source"] == "trace"
    credit = subprocess.run([sys.executable, "-m", "depgpo", "credit", str(out / "trajectory.json"), "--format",
                             "json", "--beta", "0.5"], capture_output=True, text=True, timeout=60)
    assert credit.returncode == 0, credit.stderr
    result = json.loads(credit.stdout.splitlines()[0])
    assert [(c["role"], round(c["credit"], 6)) for c in result["commands"]] == case["expected"]
