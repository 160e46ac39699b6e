"""The shared caches under concurrency (issue 36): prefetches that rename whole wheels into the cache under its
lock, image builds that read the cache and run on a base under shared locks, base checks under the base's lock.
Everything is real: pip downloads from PyPI into a cache of the test's own (never the user's), podman builds on
the bootstrapped python:3.11-slim base, several processes at once."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import textwrap
import uuid
import zipfile
from pathlib import Path

import pytest

from depgpo.env.images import backend as images
from depgpo.tasks import load_task
from tests.helpers import REPO

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(
    shutil.which("podman") is None or shutil.which("mmdebstrap") is None,
    reason="podman and mmdebstrap build the images (envs/setup.sh test installs them)")]


def _pypi_reachable() -> bool:
    try:
        socket.getaddrinfo("pypi.org", 443)
        return True
    except OSError:
        return False


needs_pypi = pytest.mark.skipif(not _pypi_reachable(), reason="prefetch downloads from PyPI")

PREFETCH = "from depgpo.env.images.verifier_tools import prefetch; import sys; print(prefetch(sys.argv[2:], '{py}', " \
           "__import__('pathlib').Path(sys.argv[1])) or 'ok')"
BUILD = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from depgpo.env.images import backend as images
    from depgpo.tasks import load_task
    try:
        print(images.image_of(load_task(Path(sys.argv[1])), "podman", Path(sys.argv[2])).reference)
    except images.ImageError as e:
        print("FAILED", e)
    """)


def _spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _task(root: Path, name: str, requirement: str) -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Nothing.")
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "environment" / "Dockerfile").write_text(
        f"FROM python:3.11-slim\nWORKDIR /app\n"  # a new image each run (a nonce): the build really runs
        f"RUN echo {name} {uuid.uuid4().hex} > /app/name && pip install --no-cache-dir {requirement}\n")
    return task


def _whole_wheels(wheels: Path, thorough: bool = False) -> list[str]:
    """Every wheel in the cache now; fails on one that is not a complete zip (a half-written file lacks the central
    directory at its end). `thorough` also checks every member's CRC (too slow to poll with)."""
    names = []
    for wheel in wheels.glob("*.whl"):
        try:
            with zipfile.ZipFile(wheel) as archive:
                assert not thorough or archive.testzip() is None, wheel
        except FileNotFoundError:
            continue
        names.append(wheel.name)
    return names


@needs_pypi
def test_concurrent_prefetches_builds_and_base_checks_never_see_a_half_written_cache(tmp_path):
    wheels = tmp_path / "wheels"
    first = _spawn(PREFETCH.format(py="3.11"), str(wheels), "six==1.17.0")
    assert first.communicate(timeout=300)[0].strip() == "ok"
    tasks = [_task(tmp_path, f"build-{i}", "six==1.17.0") for i in range(3)]
    workers = [_spawn(PREFETCH.format(py=py), str(wheels), *reqs) for py, reqs in
               (("3.13", ["numpy==2.2.6"]), ("3.11", ["pyyaml==6.0.2", "iniconfig==2.1.0"]),
                ("3.13", ["pyyaml==6.0.2", "six==1.17.0"]))]  # numpy: a 16 MB wheel, long enough to be seen half-written
    workers += [_spawn(BUILD, str(task), str(wheels)) for task in tasks]
    workers.append(_spawn("from depgpo.env.images import base_images; print(base_images.ensure_base('python:3.11-slim', "
                          "'podman').source)"))
    polls = 0
    while any(w.poll() is None for w in workers):
        _whole_wheels(wheels)  # a reader's view, again and again while they write (pip copying in place into
        polls += 1            # the cache was seen half-written dozens of times per numpy prefetch)
    outputs = [w.communicate()[0].strip().splitlines()[-1] for w in workers]
    assert outputs[:3] == ["ok"] * 3, outputs
    assert all(o.startswith("localhost/depgpo-task-build-") for o in outputs[3:6]), outputs
    subprocess.run(["podman", "rmi", "-f", *outputs[3:6]], capture_output=True)
    assert outputs[6] in ("bootstrapped", "local", "pulled"), outputs
    names = _whole_wheels(wheels, thorough=True)
    assert {"six-1.17.0-py2.py3-none-any.whl", "iniconfig-2.1.0-py3-none-any.whl"} <= set(names)
    assert any(n.startswith("PyYAML-6.0.2-cp313") for n in names) and any(n.startswith("PyYAML-6.0.2-cp311")
                                                                           for n in names)
    assert any(n.startswith("numpy-2.2.6-cp313") for n in names)
    assert not [p.name for p in tmp_path.iterdir() if "staging" in p.name]  # every staging directory was removed
    assert polls > 0


def test_a_build_that_needs_a_wheel_the_cache_lacks_names_it_and_the_prefetch_command(tmp_path):
    task_dir = _task(tmp_path, "needs-a-wheel", "six==1.17.0")
    (tmp_path / "empty-wheels").mkdir()
    with pytest.raises(images.ImageError) as failure:
        images.image_of(load_task(task_dir), "podman", tmp_path / "empty-wheels")
    message = str(failure.value)
    assert "No matching distribution found for six==1.17.0" in message  # the builder's own words
    assert (f"the build pip-installs six==1.17.0, which the wheel cache {tmp_path / 'empty-wheels'} lacks: run "
            f"`depgpo data prefetch {task_dir} --wheels {tmp_path / 'empty-wheels'}`") in message
