"""The sandbox suites once more, as an ordinary user (no root, no sudo): every episode in them then runs rootless
(agent.environment.privilege auto; docs/sandbox.md#privilege). The root run of the same files is the other mode.

Each suite is its own pytest process under `runuser`, in a directory the user owns; it must pass as it is, with
the tests that differ by mode asserting each mode's own behaviour. Skipped when this run is not root (then the
suites themselves are the rootless run) or the tools to make the user are missing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, ordinary_user

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(bool(ordinary_user.unavailable()),
                                                      reason=str(ordinary_user.unavailable()))]

# The suites whose episodes depend on the privilege level: episodes and their verifier (its E included), the hostile and
# reward-forgery batteries, tampering, harness robustness, the image backend. The forgery battery's cases run
# through an Episode (its CLI and rollout paths are plumbing above the sandbox, run at root). The CI-scale DAG runs
# as the same user in tests/workflow/test_slurm.py, every stage a Slurm job of that user.
SUITES = {
    "episode": ["tests/env/test_episode.py", "tests/env/test_privilege.py", "tests/env/test_verifier_startup_reads.py"],
    "hostile": ["tests/env/test_sandbox_hostile.py"],
    "forgery": ["tests/env/test_reward_forgery.py", "-k",
                "not test_forgery_run_episode_cli and not test_forgery_rollout"],
    "tampering": ["tests/env/test_tampering.py", "tests/env/test_verifier_tool_attacks.py"],
    "judge": ["tests/env/test_judge_battery.py", "tests/env/test_judge_held_out.py"],
    "robustness": ["tests/env/test_harness_robustness.py"],
    "image": ["tests/env/test_image_backend.py", "tests/env/test_image_tree.py"],
}


@pytest.mark.parametrize("suite", SUITES)
def test_suite_passes_as_an_ordinary_user(suite, ordinary_user_ready):
    """The suite's own pytest run as the user; its output is the failure message."""
    base = ordinary_user.own_dir("pytest")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                          f"--basetemp={base / 'tmp'}", *SUITES[suite]], cwd=REPO, capture_output=True, text=True,
                         timeout=1800, **ordinary_user.popen_kwargs())
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert " passed" in out.splitlines()[-1], out[-2000:]
    subprocess.run(["rm", "-rf", str(base)], capture_output=True)


def test_the_ordinary_user_really_is_one(ordinary_user_ready):
    """The suites above run without root: not uid 0, no capability, no sudo."""
    probe = ("import os; print(os.getuid(), os.geteuid()); "
             "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         **ordinary_user.popen_kwargs())
    uid, euid, caps = run.stdout.split()
    assert uid == euid and int(uid) != 0 and int(caps, 16) == 0
    sudo = subprocess.run(["sudo", "-n", "true"], capture_output=True, **ordinary_user.popen_kwargs()) \
        if subprocess.run(["which", "sudo"], capture_output=True).returncode == 0 else None
    assert sudo is None or sudo.returncode != 0
