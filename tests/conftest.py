
import pytest

from tests.helpers.cli import depgpo


@pytest.fixture(scope="session")
def sft_policy(tmp_path_factory):
    """(Shared by the pipeline and agent-loop tests.) Two generated tasks, their oracle conversations, and a tiny
    policy fine-tuned on them."""
    root = tmp_path_factory.mktemp("pipeline")
    depgpo("generate-tasks", "--out", str(root / "tasks"), "--pool", "2", "--test", "0", "--seed", "3",
           "--families", "supporting_read,required_deletion")
    sft = root / "sft"
    depgpo("sft-data", "--tasks", str(root / "tasks" / "pool"), "--out", str(sft / "conversations.jsonl"),
           "--reference", str(sft / "reference_credit.json"), "--variants", "1", "scale=ci")
    # ci's 100 epochs take ~10 s, as 5 do, and give a policy that solves its tasks in some attempts (8/8 and 5/8 of
    # filtering's; with 5 epochs it solved none, so every reward and advantage was 0)
    depgpo("sft", "--data", str(sft / "conversations.jsonl"), "--out", str(sft), "scale=ci")
    train = root / "rl_train.txt"
    train.write_text("".join(f"{d}\n" for d in sorted((root / "tasks" / "pool").iterdir()) if d.is_dir()))
    return root, sft / "checkpoint", train


@pytest.fixture(scope="session")
def wheel_cache():
    """The default wheel cache, filled (once per session; quick when already full) with what the fixture tasks'
    builds and verifiers install offline: `depgpo data prefetch`, as envs/setup.sh test runs it."""
    from depgpo.env.images.backend import DEFAULT_WHEELS
    from depgpo.env.images.wheel_cache import prefetch
    from depgpo.tasks import load_task
    from depgpo.tasks.task import TaskFormatError
    from tests.helpers import DATA

    tasks = []
    for directory in sorted([*(DATA / "tasks").iterdir(), *(DATA / "harbor-shapes").iterdir()]):
        try:
            tasks.append(load_task(directory))
        except TaskFormatError:
            continue  # the malformed fixtures
    wheels = DEFAULT_WHEELS
    failures = [line for line in prefetch(tasks, wheels) if "not known before its image is built" not in line]
    assert not failures, failures
    return wheels


@pytest.fixture(scope="session")
def ordinary_user_ready(wheel_cache):
    """The ordinary user the rootless suites and the Slurm test's jobs run as (tests/helpers/ordinary_user.py),
    able to reach this checkout and with the prefetched wheels in its own cache; the way is closed again after."""
    from tests.helpers import ordinary_user as user

    opened = user.opened_way()
    user.share_wheel_cache()
    yield user.ensure()
    user.close_way(opened)
