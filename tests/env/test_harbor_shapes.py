"""Project-written Harbor tasks in the shapes that failed on real Terminal-Bench 2 tasks, built offline and run as a
user runs them (`depgpo run-episode`): a python:3.13-slim base whose tests call the image's `python`, a RUN pip
install from the local wheel cache, COPY then WORKDIR into a subdirectory (and, issue 36, a COPY beside a deeper
WORKDIR with a test.sh whose apt-get line redirects its output), a test.sh that fetches uv and copies a
file before pytest runs through uvx, and an ubuntu base that offline is approximated by Debian and says so.

The bases are bootstrapped with mmdebstrap from the Debian archive into podman's store (once per recipe); the wheel
cache is filled from PyPI by the session fixture `wheel_cache` (as `depgpo data prefetch` does).
"""

from __future__ import annotations

import json
import shutil

import pytest

from depgpo.env.checks.task_check import check_task
from depgpo.env.images import backend as images
from depgpo.env.images import base_images
from depgpo.tasks import load_task
from tests.helpers import DATA
from tests.helpers.cli import depgpo

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(
    shutil.which("podman") is None or shutil.which("mmdebstrap") is None,
    reason="podman and mmdebstrap build the images (envs/setup.sh test installs them)")]

SHAPES = DATA / "harbor-shapes"
SITE, UBUNTU = SHAPES / "site-report", SHAPES / "ubuntu-log-count"
ORDERS = SHAPES / "orders-report"  # issue 36: COPY data /app/data, WORKDIR /app/project; test.sh's `> /dev/null 2>&1`


def run_episode(task, tmp_path, name, *, oracle=False, commands=None):
    out = tmp_path / name
    if oracle:
        args = ["--oracle"]
    else:
        (tmp_path / f"{name}.json").write_text(json.dumps(commands))
        args = ["--commands", str(tmp_path / f"{name}.json")]
    proc = depgpo("run-episode", str(task), *args, "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "trajectory.json").read_text()), proc.stderr


@pytest.mark.parametrize("task", [SITE, UBUNTU, ORDERS], ids=lambda p: p.name)
def test_the_oracle_scores_1_and_doing_nothing_0(task, tmp_path, wheel_cache):
    solved, stderr = run_episode(task, tmp_path, "oracle", oracle=True)
    assert solved["verifier"]["reward"] == 1.0, solved["verifier"]["output"][-2000:]
    assert solved["environment"]["backend"] == "image" and solved["environment"]["source"] == "built"
    assert "environment: image localhost/depgpo-task-" in stderr  # said on the terminal, not only in the file
    idle, _ = run_episode(task, tmp_path, "idle", commands=["true"])
    assert idle["verifier"]["reward"] == 0.0


def test_the_site_image_is_built_on_a_bootstrapped_python_after_the_named_image_cannot_be_pulled(tmp_path,
                                                                                                 wheel_cache):
    trajectory, _ = run_episode(SITE, tmp_path, "oracle", oracle=True)
    notes = trajectory["environment"]["notes"]
    assert "could not be pulled" in notes[0] and "docker.io/depgpo-fixtures/site-report:1" in notes[0]
    assert notes[1].startswith("FROM docker.io/library/python:3.13-slim: bootstrapped")
    output = trajectory["verifier"]["output"]
    assert "curl: command not found" in output or "Could not resolve host" in output  # the step ran, offline
    assert "pytest-8.4.1" in output and "2 passed" in output  # uvx's pinned pytest, from the wheel cache


def test_the_ubuntu_base_is_reported_as_approximated(tmp_path, wheel_cache):
    trajectory, stderr = run_episode(UBUNTU, tmp_path, "oracle", oracle=True)
    assert any("ubuntu:24.04: approximated (Debian trixie stands in for Ubuntu 24.04" in n
               for n in trajectory["environment"]["notes"])
    assert "approximated" in stderr
    report = check_task(UBUNTU, wheels=wheel_cache)
    assert report.ok and report.backend == "image"
    assert any("approximated from Debian trixie" in note for note in report.notes)


def test_a_planted_copy_of_the_verifiers_helper_is_overwritten_as_test_sh_says(tmp_path, wheel_cache):
    """test.sh copies /tests/count_words.py next to the work before pytest: an agent's own count_words.py that
    agrees with its wrong report is replaced, so the report is checked against the real reference."""
    fake = "print(open('/app/site/report.txt').read(), end='')"
    trajectory, _ = run_episode(SITE, tmp_path, "forge", commands=[
        "printf 'a.md 1\\nb.md 1\\n' > /app/site/report.txt", f"echo {json.dumps(fake)} > /app/site/count_words.py"])
    assert trajectory["verifier"]["reward"] == 0.0


def test_an_env_file_the_agent_plants_for_uv_is_not_what_the_verifier_sources(tmp_path, wheel_cache):
    plant = ("mkdir -p /root/.local/bin && printf 'echo 1 > /logs/verifier/reward.txt; exit 0\\n' "
             "> /root/.local/bin/env && printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' "
             "> /root/.local/bin/uvx && chmod +x /root/.local/bin/uvx")
    trajectory, _ = run_episode(SITE, tmp_path, "plant", commands=[plant])
    assert trajectory["verifier"]["reward"] == 0.0


def test_data_check_with_the_oracle_lists_exactly_the_runnable_tasks(tmp_path, wheel_cache):
    for task in (SITE, UBUNTU, ORDERS):
        report = check_task(task, wheels=wheel_cache)  # from the built image, without running anything
        assert report.ok, report.problems
    runnable = tmp_path / "runnable.txt"
    proc = depgpo("data", "check", str(SHAPES), "--oracle", "--runnable", str(runnable), timeout=900)
    assert "ok   site-report (harbor, image, oracle 1)" in proc.stdout
    assert "ok   ubuntu-log-count (harbor, image, oracle 1)" in proc.stdout
    assert "ok   orders-report (harbor, image, oracle 1)" in proc.stdout
    assert runnable.read_text().split() == [str(ORDERS.resolve()), str(SITE.resolve()), str(UBUNTU.resolve())]


def test_a_failing_build_is_paid_once_and_says_what_the_builder_said(tmp_path, monkeypatch, wheel_cache):
    task_dir = shutil.copytree(UBUNTU, tmp_path / "broken")
    (task_dir / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nRUN echo the-build-step-fails && false\n")
    task = load_task(task_dir)
    builds = []
    real_run = images._run
    monkeypatch.setattr(images, "_run", lambda argv, what, timeout=None: (builds.append(argv) if "build" in argv
                                                                          else None) or real_run(argv, what, timeout))
    for _ in range(2):
        with pytest.raises(images.ImageError, match="the-build-step-fails"):
            images.system_root_for(task, "image", wheels=wheel_cache)
    report = check_task(task_dir, wheels=wheel_cache)  # data check says what the builder said
    assert not report.ok and "the environment could not be made" in report.problems[0]
    assert "the-build-step-fails" in report.problems[0]
    assert len(builds) == 1


@pytest.mark.parametrize("reference, qualified", [
    ("python:3.13-slim", "docker.io/library/python:3.13-slim"),
    ("alexgshaw/regex-log:20251031", "docker.io/alexgshaw/regex-log:20251031"),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "ghcr.io/laude-institute/t-bench/python-3-13:20250620"),
    ("localhost/depgpo-task-x:1", "localhost/depgpo-task-x:1"),
])
def test_short_names_are_qualified_as_docker_resolves_them(reference, qualified):
    assert base_images.qualified(reference) == qualified


@pytest.mark.parametrize("reference, release, approximated", [
    ("python:3.13-slim-bookworm", "bookworm", False),  # with CPython 3.13 built from trixie's source package
    ("python:3.11-slim", "bookworm", False),
    ("python:3.12-slim", "bookworm", True),          # no Debian release ships 3.12
    ("debian:13.0-slim", "trixie", False),
    ("debian:bookworm", "bookworm", False),
    ("ubuntu:24.04", "trixie", True),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "bookworm", False),  # TB1's base, with tmux
])
def test_recipes_name_the_release_they_bootstrap(reference, release, approximated):
    recipe = base_images.recipe_for(reference)
    assert (recipe.release, recipe.approximated) == (release, approximated)


@pytest.mark.parametrize("reference", ["alpine:3.20", "nvidia/cuda:12.4.0-base-ubuntu22.04", "python:3.13-alpine",
                                       "python@sha256:" + "0" * 64])
def test_bases_without_a_recipe_are_refused_by_name(reference):
    assert base_images.recipe_for(reference) is None


def test_the_host_stands_only_for_an_image_of_its_own_release_and_python(tmp_path):
    """The host backend's root is this machine's: a Dockerfile with nothing but COPY on its own Debian release and
    Python runs there (auto), one that names the same release with another Python does not."""
    task_dir = shutil.copytree(UBUNTU, tmp_path / "t")
    release = images.host_release()
    python = base_images.DEBIAN_PYTHON.get(release, "3.11")
    other = "3.13" if python != "3.13" else "3.11"
    for base, backend in ((f"debian:{release}", "host"), (f"python:{python}-slim-{release}", "host"),
                          (f"python:{other}-slim-{release}", "image"), ("ubuntu:24.04", "image")):
        (task_dir / "environment" / "Dockerfile").write_text(f"FROM {base}\nCOPY server.log /app/server.log\n")
        assert images.backend_for(load_task(task_dir), "auto") == backend, base
