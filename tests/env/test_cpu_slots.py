"""An episode runs on a CPU of its own among those the process may use while one is free (cpu_slots.py):
the agent's commands and the verifier alike, read back from inside the sandbox; `pin=False` leaves them floating."""

from __future__ import annotations

import os
import threading

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.sandbox.cpu_slots import CpuSlots, shared_slots
from depgpo.env.sandbox.layout import SandboxLimits
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

# The verifier's own test passes only where the verifier's process may run on exactly one CPU.
PINNED_TEST = "import os\n\ndef test_the_verifier_is_pinned():\n    assert len(os.sched_getaffinity(0)) == 1\n"
ALLOWED = "grep Cpus_allowed_list /proc/self/status | cut -f2"


def test_slots_give_each_episode_a_cpu_of_its_own_and_take_back_what_ends():
    slots = CpuSlots({3, 5, 7})
    taken = [slots.take() for _ in range(4)]
    assert taken == [3, 5, 7, None]  # a fourth episode floats rather than share a CPU
    slots.give_back(5)
    assert slots.take() == 5 and slots.held() == {3, 5, 7}
    with pytest.raises(ValueError, match="CPU 9 was not taken"):
        slots.give_back(9)


def test_slots_are_shared_safely_between_threads():
    slots = CpuSlots({0, 1})
    got: list[int | None] = []
    threads = [threading.Thread(target=lambda: got.append(slots.take())) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got.count(0) == 1 and got.count(1) == 1 and got.count(None) == 62


def test_the_process_slots_are_its_affinity_not_the_machine():
    assert set(shared_slots().cpus) == os.sched_getaffinity(0)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return load_task(make_harbor_task(tmp_path_factory.mktemp("pin"), "pin", instruction="x", test_py=PINNED_TEST,
                                      verifier_timeout=20))


@pytest.mark.sandbox
@pytest.mark.slow
def test_an_episode_and_its_verifier_run_on_one_cpu_and_give_it_back(task):
    """...and the harness's own thread keeps its CPUs: the chains are spawned from a thread of their own (spawn.py)."""
    before, harness_cpus = shared_slots().held(), os.sched_getaffinity(0)
    with Episode(task, EpisodeConfig(command_timeout_s=30)) as ep:
        assert ep.placement.cpu is not None  # no other episode of this process holds a CPU
        command = ep.run_command(ALLOWED)
        verifier = ep.verify()
        assert ep.placement.cpu not in before and shared_slots().held() == before | {ep.placement.cpu}
        record = ep.trajectory()["environment"]
    assert command["observation"].strip() == str(ep.placement.cpu)
    assert verifier["reward"] == 1.0, verifier["output"][-800:]
    assert record["cpu"] == ep.placement.cpu
    assert shared_slots().held() == before
    assert os.sched_getaffinity(0) == harness_cpus


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="unpinned and pinned look alike on one CPU")
def test_pinning_turned_off_leaves_the_episode_on_every_cpu(task):
    with Episode(task, EpisodeConfig(command_timeout_s=30, limits=SandboxLimits(pin=False))) as ep:
        command = ep.run_command("python3 -c 'import os; print(len(os.sched_getaffinity(0)))'")
        verifier = ep.verify()
    assert ep.placement.cpu is None
    assert command["observation"].strip() == str(len(os.sched_getaffinity(0)))
    assert verifier["reward"] == 0.0  # its test asserts one CPU


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to spread over")
def test_concurrent_episodes_take_different_cpus(task):
    with Episode(task, EpisodeConfig(command_timeout_s=30)) as first, \
            Episode(task, EpisodeConfig(command_timeout_s=30)) as second:
        seen = {first.run_command(ALLOWED)["observation"].strip(), second.run_command(ALLOWED)["observation"].strip()}
    assert first.placement.cpu != second.placement.cpu and seen == {str(first.placement.cpu), str(second.placement.cpu)}
