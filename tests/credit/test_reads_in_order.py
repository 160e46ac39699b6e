"""A command's reads in order with its own writes (docs/credit-decisions.md#d-order), on real episodes and on the
same command texts inferred statically.

Command 0 writes /app/x; command 1 rewrites it whole, with other lines, and prints it back (or runs a script it
has just written). The verifier inspects /app/x, which holds only command 1's lines. Read as sets, command 1's
read-back was a read of command 0's version, so command 0 was credited 1.0 as an indirect write (a Terminal-Bench
trial: `cat << 'EOF' > meeting_scheduled.ics … EOF` then `cat meeting_scheduled.ics`). In order, what command 1
read was its own: command 0 gets nothing. Where command 1 reads first and then writes, it did use command 0's
version, and command 0 keeps its credit.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from depgpo.credit import CreditConfig, compute_credit
from depgpo.inference import infer_trajectory
from tests.helpers.harbor_builder import make_harbor_task

FIRST = "printf 'alpha\\nbeta\\n' > /app/x"
TEST_PY = "def test_x():\n    assert open('/app/x').read() == 'gamma\\ndelta\\n'\n"
CASES = {  # the second command, and command 0's credit, role
    "rewritten then printed back": ("cat > /app/x <<'EOF'\ngamma\ndelta\nEOF\ncat /app/x", (0.0, "no credited output")),
    "script written then run": ("cat > /app/gen.py <<'EOF'\nprint('gamma')\nprint('delta')\nEOF\n"
                                "python3 /app/gen.py > /app/x", (0.0, "no credited output")),
    "read, then rewritten": ("cat /app/x; printf 'gamma\\ndelta\\n' > /app/x", (1.0, "indirect write")),
    "edited in place": ("sed -i 's/alpha/gamma/; s/beta/delta/' /app/x", (1.0, "indirect write")),
}
SCRIPT_FIRST = "printf 'print(1)\\n' > /app/gen.py"  # the script case: command 0 wrote an earlier gen.py


def _commands(name: str) -> list[str]:
    return [SCRIPT_FIRST if name == "script written then run" else FIRST, CASES[name][0]]


def _credit(trajectory: dict, **config) -> list[tuple[float, str]]:
    result = compute_credit(trajectory, CreditConfig(**config))
    return [(round(entry.q, 6), entry.role) for entry in result.commands]


@pytest.mark.sandbox
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_real_episode(tmp_path, name):
    task = make_harbor_task(tmp_path, "order", instruction="Write /app/x.", test_py=TEST_PY)
    commands = tmp_path / "commands.json"
    commands.write_text(json.dumps(_commands(name)))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "depgpo", "run-episode", str(task), "--commands", str(commands),
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    trajectory = json.loads((out / "trajectory.json").read_text())
    assert trajectory["verifier"]["reward"] == 1.0 and "/app/x" in trajectory["verifier"]["E"]
    reread = "/app/gen.py" if name == "script written then run" else "/app/x"
    second = trajectory["commands"][1]
    assert reread in second["reads"]
    assert (reread in second["reads_after_write"]) == (CASES[name][1][0] == 0.0)
    assert _credit(trajectory) == [CASES[name][1], (1.0, "direct write")]
    if CASES[name][1][0] == 0.0:  # read as sets, the read-back was a read of command 0's version
        assert _credit(trajectory, order_within_command=False)[0] == (1.0, "indirect write")


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_texts_inferred_statically(name):
    trajectory = infer_trajectory([{"text": text} for text in _commands(name)], instruction="Write /app/x.")
    assert trajectory["verifier"]["E"] == ["/app/x"]
    assert _credit(trajectory) == [CASES[name][1], (1.0, "direct write")]
    if CASES[name][1][0] == 0.0:
        assert _credit(trajectory, order_within_command=False)[0] == (1.0, "indirect write")


def test_a_record_without_the_field_reads_as_sets():
    """A trajectory.json made before `reads_after_write` existed: every read is of the version the command found."""
    trajectory = infer_trajectory([{"text": text} for text in _commands("rewritten then printed back")],
                                  instruction="Write /app/x.")
    for command in trajectory["commands"]:
        del command["reads_after_write"]
    assert _credit(trajectory)[0] == (1.0, "indirect write")


def test_a_connect_to_the_commands_own_server_is_no_read_of_an_earlier_one():
    """Ports the same way: command 1 stops command 0's server, starts its own and asks it; command 0's (dead)
    server served nothing."""
    texts = ["python3 -m http.server 8080 &",
             "pkill -f http.server; python3 -m http.server 8080 & sleep 1; "
             "curl -s http://localhost:8080/ > /app/index.html"]
    trajectory = infer_trajectory([{"text": text} for text in texts], instruction="Write /app/index.html.")
    assert trajectory["commands"][1]["reads_after_write"] == ["tcp:8080"]
    assert _credit(trajectory) == [(0.0, "no credited output"), (1.0, "direct write")]
    assert _credit(trajectory, order_within_command=False)[0] == (1.0, "indirect write")


def test_a_script_rewritten_outside_the_tracked_roots_is_no_handoff():
    """/tmp lies outside the roots; a file one command wrote and a later one read is tracked there (decision 16),
    but not where the later command had rewritten it before it ran it."""
    texts = ["printf 'print(1)\\n' > /tmp/gen.py",
             "cat > /tmp/gen.py <<'EOF'\nprint('gamma')\nprint('delta')\nEOF\npython3 /tmp/gen.py > /app/x"]
    trajectory = infer_trajectory([{"text": text} for text in texts], instruction="Write /app/x.")
    assert _credit(trajectory) == [(0.0, "no recorded dependency"), (1.0, "direct write")]
    assert _credit(trajectory, order_within_command=False)[0] == (1.0, "indirect write")
