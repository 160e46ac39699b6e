"""The judge battery (tests/helpers/judge_attacks.py): 52 forgeries over every channel from the agent's work to its
verifier, on six Harbor test.sh shapes. Each is shown to pay without the defence (the verifier sees the agent's
whole file system and tampering is only recorded: reward 1) and to earn 0 with it (the default: the verifier's image
view, judge_view.py, and the rules over its workdir). A held-out set of attacks, not used while the judge was built,
runs the same way (tests/helpers/judge_attacks_held_out.py).

Rootless on the host's root the system directories and `/` are read-only, so a plant there never lands: the case
cannot pay undefended either, which is then what is asserted (tests/test_rootless.py runs this file so).
"""

from __future__ import annotations

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.sandbox.privilege import resolve
from depgpo.tasks import load_task
from tests.helpers import judge_attacks as attacks
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

ROOTLESS = resolve().rootless
UNDEFENDED = {"verifier_view": "full", "tampering": "keep"}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("judge-battery")
    made = {}
    for shape in attacks.SHAPES:
        task = make_harbor_task(root, shape, instruction="Write the answer to /app/answer.txt.",
                                test_py=attacks.TEST_PY, verifier_timeout=60)
        (task / "tests" / "test.sh").write_text(attacks.test_sh(shape))
        made[shape] = load_task(task)
    return made


def run(task, commands: str, **config) -> dict:
    with Episode(task, EpisodeConfig(command_timeout_s=30, **config)) as ep:
        observation = ep.run_command(commands)["observation"]
        return {**ep.verify(), "observation": observation}


def paid(verifier: dict) -> float:
    return verifier.get("reward_before_tampering", verifier["reward"])


def test_the_battery_covers_every_family_and_knows_no_answer():
    assert len(attacks.CASES) >= 50 and len(set(attacks.IDS)) == len(attacks.CASES)
    assert {case[1] for case in attacks.CASES} == set(attacks.FAMILIES)
    assert {case[2] for case in attacks.CASES} == set(attacks.SHAPES)
    assert not any(attacks.ANSWER in case[3] for case in attacks.CASES)


@pytest.mark.parametrize("shape", attacks.SHAPES)
def test_each_shape_scores_its_oracle_1_and_doing_nothing_0(shape, tasks):
    setup = attacks.GIT_REPO + " && " if shape == "git-status" else ""
    assert run(tasks[shape], setup + attacks.ORACLE)["reward"] == 1.0
    assert run(tasks[shape], setup + "true")["reward"] == 0.0


@pytest.mark.parametrize("case", attacks.CASES, ids=attacks.IDS)
def test_the_attack_pays_without_the_defence_and_earns_0_with_it(case, tasks):
    case_id, family, shape, commands = case
    undefended = run(tasks[shape], commands, **UNDEFENDED)
    defended = run(tasks[shape], commands)
    assert defended["reward"] == 0.0, (case_id, defended["output"][-1500:], defended["tampering"])
    if ROOTLESS and (family != "workdir" or attacks.APT_LOCK in commands) and paid(undefended) == 0.0:
        return  # the plant (or the trigger's removal of apt's lock) was refused: the host's system directories
        #         and `/` are read-only rootless
    assert paid(undefended) == 1.0, (case_id, undefended["observation"][-800:], undefended["output"][-1500:])
