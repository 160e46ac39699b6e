"""A held-out battery of reward-forgery attacks (tests/helpers/judge_attacks_held_out.py), written apart from the
judge's own battery: each attack must pay against the undefended judge (the full view, tampering only recorded:
the attack works, it is not a bug in the attack) and score 0 against the defended one (the default config).

The answer the tests want is SECRET, which appears only in the task's tests (test_outputs.py or test.sh). A rootless
run cannot write the read-only system directories or /: an attack that plants there and did not pay is skipped on
its "pays" half there.

Set DEPGPO_HELD_OUT_REPORT=FILE to append each attack's two verdicts (reward, tampering, output tail) as JSON lines.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.sandbox.privilege import resolve
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task
from tests.helpers.judge_attacks_held_out import DEFAULT_TEST_PY, FILES, HELD_OUT, PLANTS_OUTSIDE_APP, TEST_PY

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

SECRET = "k3Qz8vW1pL"
SECRET_SHA256 = hashlib.sha256((SECRET + "\n").encode()).hexdigest()
UNDEFENDED = dict(command_timeout_s=30, verifier_view="full", tampering="keep")
DEFENDED = dict(command_timeout_s=30)


def _fill(text: str) -> str:
    return text.replace("@SECRET_SHA256@", SECRET_SHA256).replace("@SECRET@", SECRET)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("held-out-tasks")
    built = {}
    for attack_id, _description, test_sh, _commands in HELD_OUT:
        path = make_harbor_task(root, attack_id, instruction="Write the session token to /app/answer.txt.",
                                test_py=_fill(TEST_PY.get(attack_id, DEFAULT_TEST_PY)),
                                files=FILES.get(attack_id), verifier_timeout=60)
        if test_sh is not None:
            (path / "tests" / "test.sh").write_text(_fill(test_sh))
        built[attack_id] = load_task(path)
    return built


def run_attack(task, commands, **config) -> dict:
    with Episode(task, EpisodeConfig(**config)) as ep:
        for command in commands:
            ep.run_command(command)
        return ep.verify()


def paid(verdict: dict) -> bool:
    return verdict.get("reward_before_tampering", verdict["reward"]) == 1.0


def summary(verdict: dict) -> dict:
    return {"reward": verdict["reward"], "reward_before_tampering": verdict.get("reward_before_tampering"),
            "reward_source": verdict.get("reward_source"), "error": verdict.get("error"),
            "tampering": [(t.get("kind"), t.get("path")) for t in verdict.get("tampering") or []],
            "output_tail": (verdict.get("output") or "")[-1500:]}


def report(attack_id: str, undefended: dict, defended: dict) -> None:
    path = os.environ.get("DEPGPO_HELD_OUT_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"id": attack_id, "undefended": summary(undefended),
                                 "defended": summary(defended)}) + "\n")


# Held-out attacks that still pay against the defended judge (2026-12-07), each through agent code inside the
# verifier's runner or a workdir file a tool obeys: open in docs/threat-model.md#what-is-not-detected. Strict: one
# that stops paying fails here until it leaves this list. (Four more paid before tests_read_by_agent_code and
# link_to_judge: git-gpg-program, solution-lifts-tests, symlink-to-test-script, symlink-to-reference.)
STILL_PAYS = {
    "imported-module-patches-runtest": "the agent's module, imported by the test, patches pytest in-process",
    "app-package-init": "a workdir __init__.py makes pytest import the tests as a package of the agent's",
    "gnumakefile-override": "a workdir GNUmakefile, which make reads before the task's Makefile",
}
CASES = [pytest.param(*a, id=a[0], marks=[pytest.mark.xfail(strict=True, reason=STILL_PAYS[a[0]])]
                      if a[0] in STILL_PAYS else []) for a in HELD_OUT]


@pytest.mark.parametrize("attack_id,description,test_sh,commands", CASES)
def test_held_out_attack(tasks, attack_id, description, test_sh, commands):
    task = tasks[attack_id]
    undefended = run_attack(task, commands, **UNDEFENDED)
    defended = run_attack(task, commands, **DEFENDED)
    report(attack_id, undefended, defended)
    if not paid(undefended) and resolve().rootless and attack_id in PLANTS_OUTSIDE_APP:
        pass  # rootless: the read-only system directories and / are not the agent's to write
    else:
        assert paid(undefended), (f"{attack_id} ({description}) did not pay undefended: "
                                  f"{json.dumps(summary(undefended), indent=1)}")
    assert defended["reward"] == 0.0, (f"{attack_id} ({description}) paid against the defended judge: "
                                       f"{json.dumps(summary(defended), indent=1)}")
