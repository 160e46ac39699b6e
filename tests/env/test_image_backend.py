"""Episodes in a task's container image (`agent.environment.backend: image`): the image's files, traced as on the host.

The image is built here from a few host binaries and their libraries (no registry is reachable), imported into a
private podman/docker store, and referred to by the task's task.toml, as a Terminal-Bench task names its image.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.images import backend as images
from depgpo.tasks import load_task

pytestmark = pytest.mark.sandbox

OCI = next((name for name in images.OCI_RUNTIMES if shutil.which(name)), None)
needs_oci = pytest.mark.skipif(OCI is None, reason="neither podman nor docker is installed (envs/setup.sh test "
                                                   "installs podman)")
IMAGE = "localhost/depgpo-test-mini:1"
SPLIT_IMAGE = "localhost/depgpo-test-split:1"
LINKED_IMAGE = "localhost/depgpo-test-linked:1"
BINARIES = ("bash", "cat", "ls", "env", "rm", "mkdir")
LISTED = sorted([*BINARIES, "suid-cat"])
VERIFIER = textwrap.dedent("""\
    #!/bin/bash
    if [ "$(cat /app/answer.txt)" = "$EXPECTED" ]; then echo 1 > /logs/verifier/reward.txt
    else echo 0 > /logs/verifier/reward.txt; fi
    """)


def _mini_rootfs(root: Path, merged_usr: bool = True) -> None:
    """bash and a few tools with their shared libraries, and files only this image has. merged_usr: /bin -> usr/bin
    (Debian 12); else /bin and /lib are directories of their own and /opt, /var are missing (Debian 11, scratch)."""
    bin_dir = root / ("usr/bin" if merged_usr else "bin")
    for name in ("usr/bin", "usr/sbin", "etc", "app", "root"):
        (root / name).mkdir(parents=True, exist_ok=True)
    if merged_usr:
        for name in ("usr/lib", "usr/lib64", "opt", "var"):
            (root / name).mkdir(parents=True)
        for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
            (root / link).symlink_to(target)
    bin_dir.mkdir(exist_ok=True)
    libraries = set()
    for name in BINARIES:
        binary = Path(shutil.which(name)).resolve()
        shutil.copy2(binary, (root / "usr/bin" if name == "env" else bin_dir) / name)  # env is /usr/bin/env in both
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
        libraries |= {word for word in ldd.split() if word.startswith("/")}
    for library in libraries:  # at the path the binaries ask for (/lib is usr/lib when merged, as on the host)
        target = root / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(library).resolve(), target)
    shutil.copy2(bin_dir / "cat", bin_dir / "suid-cat")
    (bin_dir / "suid-cat").chmod(0o4755)  # set-uid root in the image
    (root / "etc/image-release").write_text("depgpo test image\n")
    (root / "app/value.txt").write_text("42\n")
    (root / "root/tool.cfg").write_text("installed in the image's /root\n")


def _import(base: Path, rootfs: Path, image: str, *changes: str) -> None:
    with tarfile.open(base / f"{rootfs.name}.tar", "w") as tar:
        tar.add(rootfs, arcname=".")
        device = tarfile.TarInfo("./etc/host-null")  # a hostile image's device node (1, 3 is /dev/null)
        device.type, device.devmajor, device.devminor, device.mode = tarfile.CHRTYPE, 1, 3, 0o666
        tar.addfile(device)
    argv = [OCI, "import"]
    for change in changes:
        argv += ["--change", change]
    subprocess.run([*argv, str(base / f"{rootfs.name}.tar"), image], check=True, capture_output=True)


@pytest.fixture(scope="module")
def oci_store(tmp_path_factory):
    """A private image store with the mini image (podman: vfs storage under tmp; docker: its daemon's store)."""
    base = tmp_path_factory.mktemp("oci")
    saved = os.environ.get("CONTAINERS_STORAGE_CONF")
    if OCI == "podman":
        conf = base / "storage.conf"
        conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{base}/graph"\nrunroot = "{base}/run"\n')
        os.environ["CONTAINERS_STORAGE_CONF"] = str(conf)
    _mini_rootfs(base / "rootfs")
    _import(base, base / "rootfs", IMAGE, "ENV EXPECTED=42")
    _mini_rootfs(base / "split", merged_usr=False)
    _import(base, base / "split", SPLIT_IMAGE, "ENV EXPECTED=42", "WORKDIR /srv/work")
    linked = base / "linked"
    _mini_rootfs(linked)
    shutil.rmtree(linked / "app")
    (linked / "app").symlink_to("/root")  # resolved on the host, this would be host root's home
    _import(base, linked, LINKED_IMAGE)
    yield base
    subprocess.run([OCI, "rmi", "-f", IMAGE, SPLIT_IMAGE, LINKED_IMAGE], capture_output=True)
    if saved is None:
        os.environ.pop("CONTAINERS_STORAGE_CONF", None)
    else:
        os.environ["CONTAINERS_STORAGE_CONF"] = saved


def _image_task(root: Path, image: str | None, dockerfile: str | None = None) -> Path:
    task = root / "image-task"
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "instruction.md").write_text("Copy the value in /app/value.txt to /app/answer.txt.")
    environment = f'docker_image = "{image}"\n' if image else ""
    (task / "task.toml").write_text(f'version = "1.0"\n[verifier]\ntimeout_sec = 30\n[environment]\n{environment}')
    if dockerfile:
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "tests" / "test.sh").write_text(VERIFIER)
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("cat /app/value.txt > /app/answer.txt\n")
    return task


def _run(task_dir: Path, commands: list[str], out: Path, cache: Path, runtime: str = "auto") -> dict:
    config = EpisodeConfig(command_timeout_s=20, backend="image", runtime=runtime, image_cache=cache)
    with Episode(load_task(task_dir), config, out_dir=out) as episode:
        for turn, command in enumerate(commands):
            episode.run_command(command, turn=turn)
        episode.verify()
    return json.loads((out / "trajectory.json").read_text())


@needs_oci
def test_episode_runs_in_the_tasks_image_traced_like_the_host(oci_store, tmp_path):
    cache = tmp_path / "cache"
    traj = _run(_image_task(tmp_path, IMAGE), [
        "cat /etc/image-release", "ls /usr/bin", "echo $EXPECTED", "cat /app/value.txt > /app/answer.txt",
        "echo changed > /etc/image-release",
    ], tmp_path / "out", cache)
    release, listing, env, copy, etc_write = traj["commands"]
    assert release["observation"].strip() == "depgpo test image"   # the image's /etc, not the host's
    assert sorted(listing["observation"].split()) == LISTED       # the image's /usr: no python3, no strace
    assert env["observation"].strip() == "42"                      # the image's ENV
    assert "/app/value.txt" in copy["reads"]                       # the image's /app, seeded and traced
    assert [w["path"] for w in copy["writes"]] == ["/app/answer.txt"]
    assert [w["path"] for w in etc_write["writes"]] == ["/etc/image-release"]
    verifier = traj["verifier"]
    assert verifier["reward"] == 1.0 and verifier["E_source"] == "trace"
    assert "/app/answer.txt" in verifier["E"]
    # Copy-on-write over the unpacked image: its cached files are untouched, and the host never had them.
    (rootfs,) = [p for p in cache.iterdir() if p.is_dir()]
    assert (rootfs / "etc/image-release").read_text() == "depgpo test image\n"
    assert not os.path.lexists(rootfs / "etc/host-null")  # device nodes are deleted once unpacked
    assert (rootfs / "usr/bin/suid-cat").stat().st_mode & 0o7777 == 0o755  # set-id bits cleared
    assert (rootfs.stat().st_mode & 0o777) == 0o700
    meta = json.loads(next(cache.glob("*.json")).read_text())
    assert meta["image"] == IMAGE and meta["runtime"] == OCI and meta["env"]["EXPECTED"] == "42"


@needs_oci
def test_a_dockerfile_task_is_built_once_and_its_copy_env_and_workdir_apply(oci_store, tmp_path, monkeypatch):
    # WORKDIR under /usr (as node images have): tracked like /app although /usr is not.
    task = _image_task(tmp_path, None, f"FROM {IMAGE}\nCOPY seed.txt /usr/src/app/seed.txt\nENV EXPECTED=7\n"
                                       "WORKDIR /usr/src/app\n")
    (task / "environment" / "seed.txt").write_text("7\n")
    (task / "tests" / "test.sh").write_text(VERIFIER.replace("/app/answer.txt", "/usr/src/app/answer.txt"))
    traj = _run(task, ["pwd", "cat seed.txt > answer.txt"], tmp_path / "out", tmp_path / "cache", runtime=OCI)
    pwd, copy = traj["commands"]
    assert pwd["observation"].strip() == "/usr/src/app"
    assert "/usr/src/app/seed.txt" in copy["reads"]
    assert [w["path"] for w in copy["writes"]] == ["/usr/src/app/answer.txt"]
    assert traj["verifier"]["reward"] == 1.0 and "/usr/src/app/answer.txt" in traj["verifier"]["E"]
    builds = []
    real_run = images._run
    monkeypatch.setattr(images, "_run", lambda argv, what, timeout=None: builds.append(argv) or real_run(argv, what,
                                                                                                       timeout))
    images._resolved.clear()  # a new process: the same Dockerfile content is found in the store, not rebuilt
    _run(task, ["true"], tmp_path / "out2", tmp_path / "cache", runtime=OCI)
    assert not [argv for argv in builds if argv[1] == "build"]
    (task / "environment" / "seed.txt").write_text("8\n")  # other content: a new image
    images._resolved.clear()
    assert _run(task, ["cat seed.txt"], tmp_path / "out3", tmp_path / "cache", runtime=OCI)["commands"][0][
        "observation"].strip() == "8"
    assert len([argv for argv in builds if argv[1] == "build"]) == 1


@needs_oci
@pytest.mark.skipif(not (shutil.which("apptainer") or shutil.which("singularity")),
                    reason="apptainer/singularity is not installed (Debian 12 does not package it)")
def test_apptainer_builds_the_sandbox_of_an_image(oci_store, tmp_path):
    runtime = "apptainer" if shutil.which("apptainer") else "singularity"
    archive = tmp_path / "mini-archive.tar"  # a local source: docker:// would need a registry
    subprocess.run([OCI, "save", "--format", "docker-archive", "-o", str(archive), IMAGE], check=True)
    root = images.materialize(f"docker-archive://{archive}", runtime, tmp_path / "cache")
    assert (root.path / "etc/image-release").read_text() == "depgpo test image\n"
    assert not os.path.lexists(root.path / "etc/host-null")


@needs_oci
def test_an_image_that_keeps_bin_and_lib_and_names_another_workdir(oci_store, tmp_path):
    task = _image_task(tmp_path, SPLIT_IMAGE)
    (task / "tests" / "test.sh").write_text(VERIFIER.replace("/app/answer.txt", "/srv/work/answer.txt"))
    traj = _run(task, [
        "pwd", "cat /root/tool.cfg", "echo 42 > answer.txt", "echo extra > /bin/added && cat /bin/added",
        "ls /bin /opt /var",
    ], tmp_path / "out", tmp_path / "cache")
    pwd, tool, answer, added, listing = traj["commands"]
    assert pwd["observation"].strip() == "/srv/work" and traj["workdir"] == "/srv/work"  # the image's WORKDIR
    assert tool["observation"].strip() == "installed in the image's /root"               # /root seeded
    assert [w["path"] for w in answer["writes"]] == ["/srv/work/answer.txt"]
    assert added["observation"].strip() == "extra"  # /bin is copy-on-write like /usr (and, like it, not a record)
    assert "suid-cat" in listing["observation"] and listing["exit_code"] == 0  # empty /opt and /var were made
    (rootfs,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert not (rootfs / "bin/added").exists()
    # The verifier ran /bin/bash (there is no /usr/bin/bash in this image) with the image's ENV ($EXPECTED = 42).
    assert traj["verifier"]["reward"] == 1.0 and "/srv/work/answer.txt" in traj["verifier"]["E"]


@needs_oci
def test_a_symlinked_workdir_is_refused_before_any_host_file_is_copied(oci_store, tmp_path):
    # The image's /app -> /root: at root, the host's /root holds a file the harness must not copy. Rootless, the
    # harness cannot read host root's home at all; the refusal must come all the same.
    secret = Path("/root/.depgpo-image-test-secret") if os.geteuid() == 0 else None
    if secret:
        secret.write_text("host root's file\n")
    before = set(EpisodeConfig().work_root.glob("image-task-*"))
    try:
        with pytest.raises(images.ImageError, match="/app is .under. a symlink"):
            _run(_image_task(tmp_path, LINKED_IMAGE), ["ls"], tmp_path / "out", tmp_path / "cache")
    finally:
        if secret:
            secret.unlink()
    record = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert record["commands"] == [] and "episode failed to start" in record["errors"][0]
    assert set(EpisodeConfig().work_root.glob("image-task-*")) == before  # its directories were removed


def test_missing_runtime_and_bad_settings_say_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no runtime on PATH
    with pytest.raises(images.ImageError, match="none is on PATH.*apt-get install podman.*backend=host"):
        images.find_runtime("auto")
    with pytest.raises(images.ImageError, match="`docker` is not on PATH"):
        images.find_runtime("docker")
    with pytest.raises(images.ImageError, match="not a known runtime"):
        images.find_runtime("lxc")
    task = dataclasses.replace(load_task(_image_task(tmp_path, "some/image")), docker_image=None)
    with pytest.raises(images.ImageError, match="no docker_image and has no environment/Dockerfile"):
        images.image_of(task, "podman")
    with pytest.raises(images.ImageError, match="backend=host cannot run this task.*prebuilt image some/image"):
        images.system_root_for(task, "host")  # the host does not stand in for an image it has not got


def test_config_rejects_an_unknown_backend():
    from depgpo.config import compose

    with pytest.raises(ValueError, match="agent.environment.backend='docker'.*host.*image"):
        compose(["agent.environment.backend=docker"])


@needs_oci
def test_data_check_reports_by_backend(oci_store, tmp_path):
    from depgpo.env.checks.task_check import check_task
    from depgpo.env.images.offline_needs import internet_reachable

    present, absent = _image_task(tmp_path / "a", IMAGE), _image_task(tmp_path / "b", "localhost/not-here:1")
    host = check_task(present, "host")  # the host backend cannot stand in for a prebuilt image
    assert not host.ok and any("prebuilt image" in p for p in host.problems)
    found = check_task(present, "auto", OCI, build=False)
    assert found.ok and found.backend == "image" and found.notes == [f"image {IMAGE}: in {OCI}'s store"]
    missing = check_task(absent, "image", OCI, build=False)
    if internet_reachable():
        assert missing.ok and any("pulled by the first episode" in n for n in missing.notes)
    else:  # offline, with no Dockerfile to build instead: it cannot run, and says how to fix it
        assert missing.problems == [f"image localhost/not-here:1 is not in {OCI}'s store and no registry is "
                                    "reachable; load it first, or give the task its environment/Dockerfile"]


@needs_oci
def test_run_episode_cli_with_the_image_backend(oci_store, tmp_path, monkeypatch):
    from tests.helpers.cli import depgpo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the CLI unpacks into $XDG_CACHE_HOME/depgpo/images
    out = depgpo("run-episode", str(_image_task(tmp_path, IMAGE)), "--oracle", "--out", str(tmp_path / "out"),
                 "--backend", "image", "--runtime", OCI)
    assert "reward 1.000" in out.stderr and any((tmp_path / "xdg/depgpo/images").glob("*.json"))
    refused = subprocess.run([sys.executable, "-m", "depgpo", "run-episode", str(_image_task(tmp_path / "x", IMAGE)),
                              "--oracle", "--out", str(tmp_path / "out2"), "--backend", "image", "--runtime", "lxc"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "not a known runtime" in refused.stderr
    assert not (tmp_path / "out2").exists()  # refused before any episode started
