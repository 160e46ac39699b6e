"""The CPU-kernel pin (depgpo.numerics): SFT weights and evaluation rewards are the same under this machine's
default dispatch and under the kernels of a machine without AVX-512, and differ without the pin where this machine
has AVX-512 (so the comparison can fail)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from depgpo import numerics
from tests.helpers.cli import depgpo
from tests.train.test_sft import hand_made_conversations

# A machine without AVX-512, as each library sees it: ATen's dispatch, MKL's and oneDNN's ISA caps.
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
SFT = ["scale=ci", "sft.epochs=6", "sft.batch_size=6", "model.hidden=64", "model.layers=2", "agent.max_turns=3"]


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any kernel variable or pin (a user's shell as it comes), plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in numerics.RECORDED and not k.startswith("DEPGPO_CPU_PIN")}
    return {**env, **extra}


# ------------------------------------------------------------------ the pin's rules
def test_the_pin_sets_what_the_user_left_unset_and_keeps_what_they_set():
    env = {"ATEN_CPU_CAPABILITY": "avx512"}
    numerics.pin_cpu_kernels(env)
    assert env["ATEN_CPU_CAPABILITY"] == "avx512"  # the user's, kept
    assert env["MKL_CBWR"] == "COMPATIBLE" and env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert numerics.user_settings(env) == {"ATEN_CPU_CAPABILITY": "avx512"}


def test_a_child_process_does_not_take_its_parents_pin_for_a_user_setting():
    parent = {}
    numerics.pin_cpu_kernels(parent)
    child = dict(parent)
    numerics.pin_cpu_kernels(child)
    assert child == parent and numerics.user_settings(child) == {}
    off = {**parent, "DEPGPO_CPU_PIN": "0"}  # turned off below a pinned parent: the parent's values go too
    numerics.pin_cpu_kernels(off)
    assert off == {"DEPGPO_CPU_PIN": "0"}


def test_a_pin_that_came_after_torch_says_it_is_not_in_force():
    if not _has_avx512():
        pytest.skip("this CPU has no AVX-512: a late pin cannot be told from one in force here")
    code = ("import torch, depgpo.numerics as n; torch.ones(8).sum(); n.pin_cpu_kernels(); p = n.provenance(); "
            "print(p['pin'], p['cpu_capability'])")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_environment(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["not", "in", "force", "AVX512"]


# ------------------------------------------------------------------ the same numbers on both kernel sets
@pytest.fixture(scope="module")
def tasks_and_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("numerics")
    depgpo("generate-tasks", "--out", str(root / "tasks"), "--pool", "2", "--test", "0", "--seed", "3",
           "--families", "supporting_read,required_deletion")
    data = root / "conversations.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in hand_made_conversations()))
    return root, data


def train_and_evaluate(root, data, name: str, env: dict[str, str]) -> tuple[str, dict, dict]:
    """`depgpo sft` then `depgpo evaluate`, each a process of its own under `env`: (weights md5, per-task rewards,
    the evaluation's numerics record)."""
    out = root / name
    for args in (["sft", "--data", str(data), "--out", str(out / "sft"), *SFT],
                 ["evaluate", "--policy", str(out / "sft" / "checkpoint"), "--tasks", str(root / "tasks" / "pool"),
                  "--run", "sft", "--out", str(out / "eval"), *SFT]):
        proc = subprocess.run([sys.executable, "-m", "depgpo", *args], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    weights = hashlib.md5((out / "sft" / "checkpoint" / "model.safetensors").read_bytes()).hexdigest()
    result = json.loads((out / "eval" / "pool.json").read_text())
    rewards = {entry["round"]: entry["tasks"] for entry in result["rounds"]}
    return weights, rewards, json.loads((out / "eval" / numerics.NUMERICS_FILE).read_text())


@pytest.mark.sandbox
@pytest.mark.slow
def test_sft_and_evaluation_are_the_same_on_a_machine_without_avx512(tasks_and_data):
    root, data = tasks_and_data
    default = train_and_evaluate(root, data, "default", clean_environment())
    avx2 = train_and_evaluate(root, data, "avx2", clean_environment(**AVX2_MACHINE))
    assert default[0] == avx2[0]  # the weights, bit for bit
    assert default[1] == avx2[1]  # the rewards of every task in every round
    assert default[2]["pin"] == avx2[2]["pin"] == "on"
    assert default[2]["cpu_capability"] == avx2[2]["cpu_capability"] == "AVX2"
    assert avx2[2]["user_settings"] == AVX2_MACHINE  # recorded: the user set them, the pin agreed on ATen's


def _has_avx512() -> bool:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    proc = subprocess.run([sys.executable, "-c", code], env=clean_environment(), capture_output=True, text=True)
    return proc.stdout.strip() == "AVX512"


@pytest.mark.sandbox
@pytest.mark.slow
def test_without_the_pin_the_weights_follow_the_vector_unit(tasks_and_data):
    if not _has_avx512():
        pytest.skip("this CPU has no AVX-512: both kernel sets are the same here without the pin")
    root, data = tasks_and_data
    default = train_and_evaluate(root, data, "off_default", clean_environment(DEPGPO_CPU_PIN="0"))
    avx2 = train_and_evaluate(root, data, "off_avx2", clean_environment(DEPGPO_CPU_PIN="0", **AVX2_MACHINE))
    assert default[0] != avx2[0]
    assert default[2]["pin"] == avx2[2]["pin"] == "off"
    assert (default[2]["cpu_capability"], avx2[2]["cpu_capability"]) == ("AVX512", "AVX2")
