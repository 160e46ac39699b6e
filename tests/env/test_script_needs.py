"""`data check` reads a task's scripts as bash does (tasks/shell_words.simple_commands, tree-sitter-bash) before it
names what they install: redirections, pipes, `&&` lists, line continuations and heredocs are not package names.
The scripts are written here in the shapes of Harbor's test.sh files; what they need is checked against a built
image's contents by offline_needs.run_problems, as data check does."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from depgpo.env.images.offline_needs import ImageContents, apt_packages, run_problems
from depgpo.tasks import load_task
from depgpo.tasks.shell_words import simple_commands

TEST_SH = textwrap.dedent("""\
    #!/bin/bash
    apt-get update
    apt-get install -y curl > /dev/null 2>&1
    curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
    source $HOME/.local/bin/env
    uvx -p 3.11 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
    if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
    """)


@pytest.mark.parametrize("script, packages", [
    ("apt-get install -y curl > /dev/null 2>&1", ["curl"]),
    ("apt-get update; apt-get install -y curl &> /dev/null", ["curl"]),
    ("apt-get install -y curl >> $DEBUG_LOG 2>&1", ["curl"]),
    ("apt-get update && apt-get install -y --no-install-recommends curl ca-certificates && rm -rf /var/lib/apt/lists/*",
     ["curl", "ca-certificates"]),
    ("DEBIAN_FRONTEND=noninteractive apt-get install -y \\\n    jq=1.6-2.1 \\\n    git/bookworm 2>/dev/null | tail -1",
     ["jq", "git"]),
    ("sudo -E apt-get -o Dpkg::Options::=--force-confold -qq install -y tmux", ["tmux"]),
    ("cat > notes.txt <<'EOF'\napt-get install -y not-a-command\nEOF\n", []),
    ("bash <<'EOF'\napt-get install -y from-a-heredoc-script\nEOF\n", ["from-a-heredoc-script"]),
    ("bash -c 'apt-get install -y via-dash-c > /dev/null'", ["via-dash-c"]),
    ("apt-get install -y $PACKAGES", []),
    ("echo apt-get install -y nothing", []),
])
def test_apt_packages_are_the_words_bash_passes_to_apt(script, packages):
    assert apt_packages(script) == packages


def test_simple_commands_leave_out_redirections_and_assignments():
    assert simple_commands("A=1 uvx -w 'pytest==8.4.1' pytest \\\n  /tests -rA 2>&1 | tee /logs/out") == [
        ["uvx", "-w", "pytest==8.4.1", "pytest", "/tests", "-rA"], ["tee", "/logs/out"]]


def _task(tmp_path, test_sh):
    task = tmp_path / "task"
    for d in ("environment", "tests", "solution"):
        (task / d).mkdir(parents=True)
    (task / "instruction.md").write_text("Do it.")
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 30\n')
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "solution" / "solve.sh").write_text("true\n")
    return load_task(task)


def test_the_standard_test_sh_needs_nothing_at_test_time_that_the_episode_lacks(tmp_path):
    image = ImageContents(pythons={"3.11"}, packages={"bash", "python3.11"}, has_pytest=False)
    problems = run_problems(_task(tmp_path, TEST_SH), tmp_path / "no-wheels", image)
    assert not [p for p in problems if "apt-installs" in p], problems  # curl is served by our uv, not apt
    assert problems == ["test.sh installs uv 0.9.5, which the wheel cache lacks (run `depgpo data prefetch`)",
                        "test.sh installs pytest==8.4.1, which the wheel cache lacks (run `depgpo data prefetch`)",
                        "test.sh installs pytest, which the wheel cache lacks (run `depgpo data prefetch`)"]


def test_a_package_the_image_lacks_is_named_alone(tmp_path):
    image = ImageContents(pythons={"3.11"}, packages={"bash", "curl"}, has_pytest=True)
    script = "#!/bin/bash\napt-get update\napt-get install -y jq > /dev/null 2>&1 && jq . /app/x.json\n"
    assert run_problems(_task(tmp_path, script), tmp_path / "no-wheels", image) == [
        "test.sh apt-installs jq at test time, which the image lacks (episodes have no network)"]


@pytest.mark.parametrize("script, stop", [
    ("#!/bin/bash\nset -e\napt-get update\napt-get install -y curl\n", "apt-get update"),
    ("#!/bin/bash\nset -euo pipefail\nexport DEBIAN_FRONTEND=noninteractive\n"
     "apt-get update && apt-get install -y --no-install-recommends curl ca-certificates > /dev/null 2>&1\n",
     "apt-get install -y --no-install-recommends curl ca-certificates"),
    ("#!/bin/bash -e\nsudo apt-get install -y curl\n", "apt-get install -y curl"),
    ("#!/bin/bash\napt-get update\napt-get install -y curl > /dev/null 2>&1\nset -e\npython3 -m pytest /tests\n", None),
    ("#!/bin/bash\nset -e\napt-get update || true\nif apt-get install -y curl; then :; fi\n", None),
    ("#!/bin/bash\nset -e\nset +e\napt-get update\n", None),
])
def test_an_apt_get_that_ends_a_set_e_script_is_named(script, stop, tmp_path):
    image = ImageContents(pythons={"3.11"}, packages={"bash", "curl", "ca-certificates"}, has_pytest=True)
    problems = run_problems(_task(tmp_path, script), tmp_path / "no-wheels", image)
    assert problems == ([f"test.sh runs under `set -e` and `{stop}` fails in every episode (no network; apt cannot "
                         "drop to its _apt user in the sandbox): the script stops before its tests"] if stop else [])


@pytest.mark.sandbox
@pytest.mark.skipif(shutil.which("podman") is None or shutil.which("mmdebstrap") is None,
                    reason="podman and mmdebstrap build the image (envs/setup.sh test installs them)")
@pytest.mark.parametrize("errexit", [True, False])
def test_data_checks_verdict_on_a_test_time_apt_get_is_the_oracles_outcome(errexit, tmp_path):
    """A real Debian image (python:3.11-slim, with apt and curl's absence): its test-time apt-get fails in the
    episode; under `set -e` that ends test.sh before it writes the reward, else the script goes on."""
    from depgpo.env.checks.task_check import check_task
    from depgpo.env.episode import Episode, EpisodeConfig

    script = ("#!/bin/bash\n" + ("set -e\n" if errexit else "") + "apt-get update\n"
              "apt-get install -y curl > /dev/null 2>&1\n"
              'if [ "$(cat /app/out.txt)" = done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    task = _task(tmp_path, script)
    (task.root / "solution" / "solve.sh").write_text("echo done > /app/out.txt\n")
    report = check_task(task.root, "image", "podman", wheels=tmp_path / "no-wheels")
    config = EpisodeConfig(command_timeout_s=60, backend="image", runtime="podman", image_cache=tmp_path / "cache")
    with Episode(load_task(task.root), config, out_dir=tmp_path / "oracle") as episode:
        episode.run_command("echo done > /app/out.txt", turn=0)
        reward = episode.verify()["reward"]
    assert (report.ok, reward) == ((False, 0.0) if errexit else (True, 1.0)), report.problems
    if errexit:
        assert report.problems == ["test.sh runs under `set -e` and `apt-get update` fails in every episode (no "
                                   "network; apt cannot drop to its _apt user in the sandbox): the script stops "
                                   "before its tests"]


@pytest.mark.parametrize("script, fetches", [
    ("curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\n", ["curl -LsSf https://astral.sh/uv/0.9.5/install.sh"]),
    ("cat > README.md <<'EOF'\nInstall: curl -fsSL https://example.org/get | sh\nEOF\n", []),  # data, not a command
    ('echo "then run: wget https://example.org/x"\n', []),  # a quoted word, not a command
    ("VERSION=$(curl -s https://example.org/latest)\n", ["curl -s https://example.org/latest"]),
    ("git \\\n  clone https://example.org/repo.git > /dev/null 2>&1\n", ["git clone https://example.org/repo.git"]),
])
def test_downloads_are_the_commands_bash_runs(script, fetches):
    from depgpo.tasks.dockerfile import network_fetch_commands

    assert network_fetch_commands(script) == fetches
