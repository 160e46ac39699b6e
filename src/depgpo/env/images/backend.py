"""A task's container image as the episode's system root (`agent.environment.backend: image`).

The container runtime only unpacks the image; the episode then runs exactly as on the host backend: the image's
/usr, /etc, /opt and /var become the copy-on-write lower layers (instead of the host's), bubblewrap provides the
namespaces and the host's strace traces the shell from outside the sandbox. So the image needs no strace, no daemon
runs during an episode, and the trace is the same kind as on the host.

    root = system_root_for(task, "image")       # unpacked once per image id into ~/.cache/depgpo/images
    Episode(task, EpisodeConfig(backend="image"))  # does the same itself

Runtimes: podman or docker (`create` + `export` of the image; a task with only a Dockerfile is built first),
apptainer or singularity (`build --sandbox` from `docker://IMAGE`). Pulling needs the registry; offline, the image
must already be in the runtime's local store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.images import base_images
from depgpo.env.images.cache_locks import base_lock, locked, replace_text, wheels_lock
from depgpo.env.images.offline_needs import build_problems
from depgpo.tasks.dockerfile import external_bases
from depgpo.trajectory.schema import EnvironmentRef

BACKENDS = ("auto", "host", "image")  # agent.environment.backend
RUNTIMES = ("podman", "docker", "apptainer", "singularity")
OCI_RUNTIMES = ("podman", "docker")
# Top-level directories an image may have as symlinks into /usr (merged /usr) or as directories of their own.
TOP_LEVEL_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "depgpo"
DEFAULT_CACHE = CACHE_ROOT / "images"
DEFAULT_WHEELS = CACHE_ROOT / "wheels"  # agent.environment.wheel_cache (depgpo data prefetch fills it)
WHEELS_IN_BUILD = "/var/cache/depgpo/wheels"  # where a build's RUN pip install finds the local wheel cache
BUILD_TIMEOUT_S = 1800


class ImageError(RuntimeError):
    """An image that cannot be used, with what to do about it."""


@dataclass(frozen=True)
class SystemRoot:
    """Where an episode's system directories come from: the host's `/`, or an unpacked image."""

    path: Path = Path("/")
    image: str | None = None                             # None: the host
    env: dict[str, str] = field(default_factory=dict)    # the image's ENV
    workdir: str | None = None                           # the image's WORKDIR
    source: str = "host"                                 # host | local | pulled | built
    notes: tuple[str, ...] = ()                          # how the environment differs from the task's own image

    @property
    def is_host(self) -> bool:
        return self.image is None

    def as_record(self) -> EnvironmentRef:
        """The trajectory's `environment` section."""
        return {"backend": "host" if self.is_host else "image", "image": self.image, "source": self.source,
                "notes": list(self.notes)}


HOST = SystemRoot()


@dataclass(frozen=True)
class TaskImage:
    """The image an episode of a task runs in, and where it came from."""

    reference: str
    source: str                  # local | pulled | built
    notes: tuple[str, ...] = ()  # the bases it was built on, and how they differ from the real ones


@functools.cache  # read on every episode start (backend auto); it does not change while we run
def host_release() -> str | None:
    """This machine's Debian release (bookworm), from /etc/os-release; None when it is not Debian."""
    try:
        fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    except OSError:
        return None
    return fields.get("VERSION_CODENAME", "").strip('"') if fields.get("ID", "").strip('"') == "debian" else None


def host_mismatch(task) -> list[str]:
    """Why the host backend cannot stand for the task's image; empty when it can: the Dockerfile builds on this
    host's own Debian release (debian:12, python:3.11-slim on Debian 12) and does nothing but COPY, ENV and WORKDIR.
    RUN steps are the image builder's job: they are never replayed on the host."""
    if task.docker_image and task.dockerfile is None:
        return [f"the environment is the prebuilt image {task.docker_image}"]
    reasons = [f"RUN {' '.join(c.split())[:100]}: build steps need the image backend" for c in task.setup_commands]
    reasons += task.unreplayable
    for base in external_bases(task.dockerfile.read_text(errors="replace")) if task.dockerfile else []:
        recipe, release = base_images.recipe_for(base), host_release()
        if recipe is None or recipe.approximated or recipe.release != release:
            reasons.append(f"FROM {base}: not this host's Debian {release or '(none)'}")
        elif recipe.python_source:  # python:3.13-slim-bookworm on a bookworm host, whose python3 is 3.11
            reasons.append(f"FROM {base}: its Python is not this host's")
    return list(dict.fromkeys(reasons))


def backend_for(task, backend: str) -> str:
    """`auto` is the host backend where it stands for the task's image exactly (host_mismatch), else the image's."""
    if backend not in BACKENDS:
        raise ImageError(f"agent.environment.backend={backend!r} is not a backend; use auto, host or image")
    if backend != "auto":
        return backend
    return "image" if host_mismatch(task) else "host"


_resolved: dict[tuple, SystemRoot] = {}
_failed: dict[tuple, ImageError] = {}  # a failed build or pull is paid once per process, not once per episode


def system_root_for(task, backend: str, runtime: str = "auto", cache_dir: Path = DEFAULT_CACHE,
                    wheels: Path | None = None) -> SystemRoot:
    """The system root of `task`'s episodes under `backend` (auto | host | image), resolved once per process and
    task. The host backend refuses a task it cannot stand for (host_mismatch): it replays no build step."""
    backend = backend_for(task, backend)
    if backend == "host":
        mismatch = host_mismatch(task)
        if mismatch:
            raise ImageError(f"{task.root}: agent.environment.backend=host cannot run this task ({'; '.join(mismatch)}"
                             "); use backend image or auto")
        return HOST
    key = (str(task.root), task.docker_image, runtime, str(cache_dir))
    if key in _failed:
        raise _failed[key]
    if key not in _resolved:
        try:
            name = find_runtime(runtime)
            image = image_of(task, name, wheels or cache_dir.parent / "wheels")
            root = materialize(image.reference, name, cache_dir)
        except ImageError as e:
            _failed[key] = e
            raise
        _resolved[key] = dataclasses.replace(root, source=image.source, notes=image.notes)
    return _resolved[key]


def find_runtime(preferred: str = "auto") -> str:
    """The container runtime to use: `preferred`, or with "auto" the first of RUNTIMES on PATH."""
    if preferred != "auto":
        if preferred not in RUNTIMES:
            raise ImageError(f"agent.environment.runtime={preferred!r} is not a known runtime; "
                             f"use one of: auto, {', '.join(RUNTIMES)}")
        if shutil.which(preferred) is None:
            raise ImageError(f"agent.environment.runtime={preferred} but `{preferred}` is not on PATH; install it "
                             "or set agent.environment.runtime=auto")
        return preferred
    for name in RUNTIMES:
        if shutil.which(name):
            return name
    raise ImageError(f"agent.environment.backend=image needs a container runtime ({', '.join(RUNTIMES)}) and none "
                     "is on PATH; install one (Debian: apt-get install podman) or use agent.environment.backend=host")


def _run(argv: list[str], what: str, timeout: float | None = None) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{what} did not finish within {timeout:.0f} s: `{' '.join(argv)}`") from None
    if result.returncode != 0:
        raise ImageError(f"{what} failed: `{' '.join(argv)}` exited {result.returncode}: "
                         f"{(result.stderr or result.stdout).strip()[-1500:]}")
    return result.stdout


def image_of(task, runtime: str, wheels: Path | None = None) -> TaskImage:
    """The image an episode of `task` runs in: the task's prebuilt image (by its fully qualified name) where the
    store has it or a registry gives it, else its environment/Dockerfile built by `runtime` on bases that are
    bootstrapped from Debian packages when no registry has them (base_images)."""
    context, has_dockerfile = task.build_context, task.dockerfile is not None
    pull_error = None
    if task.docker_image:
        reference = base_images.qualified(task.docker_image)
        if reference.startswith("-") or not reference.strip():  # would be read as an option of the runtime
            raise ImageError(f"{task.docker_image!r} is not an image reference")
        if runtime not in OCI_RUNTIMES or in_local_store(reference, runtime):
            return TaskImage(reference, "local")
        try:
            _run([runtime, "pull", "-q", reference], f"pulling {reference}")
            return TaskImage(reference, "pulled")
        except ImageError as e:
            if not has_dockerfile:
                raise ImageError(f"{task.root}: {e}; offline, load the image into {runtime}'s store first, or "
                                 "give the task its environment/Dockerfile") from None
            pull_error = str(e).splitlines()[-1][-300:]
    if not has_dockerfile:
        raise ImageError(f"{task.root}: the task names no docker_image and has no environment/Dockerfile; "
                         "run it with agent.environment.backend=host")
    if runtime not in OCI_RUNTIMES:
        raise ImageError(f"{task.root}: {runtime} cannot build environment/Dockerfile; set [environment] "
                         "docker_image in task.toml, or use runtime podman or docker")
    try:
        bases = [base_images.ensure_base(name, runtime) for name in
                 external_bases(task.dockerfile.read_text(errors="replace"))]
    except base_images.BaseImageError as e:
        raise ImageError(f"{task.dockerfile}: {e}") from None
    notes = tuple(f"FROM {b.reference}: {b.source}" + (f" ({'; '.join(b.notes)})" if b.notes else "") for b in bases)
    if pull_error:
        notes = (f"the task's image {task.docker_image} could not be pulled ({pull_error}); built from its "
                 "Dockerfile instead", *notes)
    with contextlib.ExitStack() as held:  # its bases are not re-tagged, nor wheels half-written, while it builds
        for lock in [*(base_lock(b.reference) for b in bases), *([wheels_lock(wheels)] if wheels else [])]:
            held.enter_context(locked(lock, shared=True))
        digest = hashlib.sha256()
        for base in bases:
            digest.update(_run([runtime, "image", "inspect", "--format", "{{.Id}}", base.reference],
                               "inspecting").encode())
        for path in sorted(p for p in context.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
        tag = f"localhost/depgpo-task-{_slug(task.id)}:{digest.hexdigest()[:12]}"
        if not in_local_store(tag, runtime):
            try:
                _run([runtime, "build", *_build_options(runtime, wheels), "-f", str(task.dockerfile), "-t", tag,
                      str(context)], f"building {task.root}/environment", timeout=BUILD_TIMEOUT_S)
            except ImageError as e:
                raise ImageError(f"{e}{_missing_wheels(task, wheels)}") from None
    return TaskImage(tag, "built", notes)


def _missing_wheels(task, wheels: Path | None) -> str:
    """What the build pip-installs that the wheel cache lacks, and the command that fetches it ("" when none)."""
    missing = [p for p in build_problems(task, wheels) if "wheel cache" in p] if wheels else []
    return "".join(f"\n{p.split(' (run ')[0]}: run `depgpo data prefetch {task.root}" +
                   (f" --wheels {wheels}`" if wheels != DEFAULT_WHEELS else "`") for p in missing)


def _build_options(runtime: str, wheels: Path | None) -> list[str]:
    """podman: chroot isolation (an OCI runtime needs cgroups the build host may not delegate), never pulling (the
    bases are in the store by now), and pip pointed at the local wheel cache only, through a pip.conf that exists
    during the build alone (the image keeps no trace of it)."""
    if runtime != "podman":
        return []
    options = ["--isolation=chroot", "--pull=never"]
    if wheels is not None:
        wheels.mkdir(parents=True, exist_ok=True)
        conf = wheels.parent / "pip-build.conf"  # replaced whole: a build running now has it bind-mounted
        replace_text(conf, f"[global]\nno-index = true\nfind-links = {WHEELS_IN_BUILD}\n")
        options += ["-v", f"{wheels}:{WHEELS_IN_BUILD}:ro", "-v", f"{conf}:/etc/pip.conf:ro"]
    return options


def in_local_store(image: str, runtime: str) -> bool:
    return subprocess.run([runtime, "image", "inspect", image], capture_output=True).returncode == 0


def materialize(image: str, runtime: str, cache_dir: Path = DEFAULT_CACHE) -> SystemRoot:
    """Unpack `image` into `cache_dir` (once per image id; concurrent episodes wait for the first) and return it."""
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # holds the images' ENV too; an existing one is kept as is
    if image.startswith("-") or not image.strip():  # would be read as an option of the runtime
        raise ImageError(f"{image!r} is not an image reference")
    config = _image_config(image, runtime)
    key = f"{_slug(image)}-{config['id'][:16]}"
    rootfs, meta = cache_dir / key, cache_dir / f"{key}.json"
    with open(cache_dir / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not meta.is_file():
            shutil.rmtree(rootfs, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_dir))
            try:
                _unpack(image, runtime, staging)
                _make_safe(staging)
                # The sandbox overlays these four, so each must be a directory (scratch images may lack some).
                for name in ("usr", "etc", "opt", "var"):
                    if (staging / name).is_symlink():
                        raise ImageError(f"image {image}: /{name} is a symlink; the sandbox needs a directory there")
                    (staging / name).mkdir(exist_ok=True)
                staging.chmod(0o700)  # only root reads it: sandbox_init mounts it before dropping to the episode uid
                staging.rename(rootfs)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            replace_text(meta, json.dumps({"image": image, "runtime": runtime, **config}, indent=1))
    return SystemRoot(path=rootfs, image=image, env=config["env"], workdir=config["workdir"])


def _image_config(image: str, runtime: str) -> dict:
    """Image id, ENV and WORKDIR; pulls the image first where the runtime's store lacks it."""
    if runtime not in OCI_RUNTIMES:  # apptainer keeps no id for docker:// sources: the reference is the key
        return {"id": hashlib.sha256(image.encode()).hexdigest(), "env": {}, "workdir": None}
    if not in_local_store(image, runtime):
        _run([runtime, "pull", image], f"pulling {image} (offline, load it into {runtime}'s store first)")
    info = json.loads(_run([runtime, "image", "inspect", image], f"inspecting {image}"))[0]
    config = info.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    workdir = config.get("WorkingDir") or None
    if workdir == "/":  # cannot be the sandbox's workdir (it is a mount of its own): the task's (/app) instead
        workdir = None
    return {"id": info["Id"].removeprefix("sha256:"), "env": env, "workdir": workdir}


def _unpack(image: str, runtime: str, target: Path) -> None:
    if runtime in OCI_RUNTIMES:
        container = _run([runtime, "create", image, "/bin/true"], f"creating a container of {image}").strip()
        try:
            tar = target.parent / f"{target.name}.tar"
            _run([runtime, "export", "-o", str(tar), container], f"exporting {image}")
            devices = target.parent / f"{target.name}.devices"
            try:  # device files are never made (an ordinary user cannot, and root would only delete them again)
                devices.write_text("".join(f"{name}\n" for name in _device_members(tar)))
                _run(["tar", "-x", "--numeric-owner", "-p", "-f", str(tar), "-C", str(target), "--no-wildcards",
                      f"--exclude-from={devices}"], f"unpacking {image}")
            finally:
                tar.unlink(missing_ok=True)
                devices.unlink(missing_ok=True)
        finally:
            subprocess.run([runtime, "rm", "-f", container], capture_output=True)
    else:
        target.rmdir()  # `build --sandbox` wants to create the directory itself
        source = image if "://" in image else f"docker://{image}"  # a reference, never a path on this host
        _run([runtime, "build", "--sandbox", str(target), source], f"building a sandbox of {image}")


def _device_members(tar: Path) -> list[str]:
    """Names of the character and block devices in an image's tarball (headers only: data is skipped)."""
    with tarfile.open(tar) as archive:
        return [member.name for member in archive if member.ischr() or member.isblk()]


def _make_safe(root: Path) -> None:
    """Delete the image's device files and clear its setuid/setgid bits, right after unpacking. A device file would
    be a device of this host: the copy-on-write lower layers are mounted without nodev and appear owned by the
    episode's uid, so /usr/disk -> the host's disk would be open to the agent. Set-id root programs would be host
    root's to anyone who can reach the cache (inside the sandbox no_new_privs makes the bits inert anyway)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                os.unlink(path)
            elif stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))


def image_dir(root: SystemRoot, sandbox_dir: str) -> Path | None:
    """The host directory of the image's `sandbox_dir` (its workdir, /root, /home), to seed the episode from; None
    when the image lacks it. Every component must be a real directory: a symlink would resolve on the host (an
    image's /app -> /root would hand the agent a copy of host root's files)."""
    path = root.path
    for part in Path(sandbox_dir).relative_to("/").parts:
        path = path / part
        if path.is_symlink():
            raise ImageError(f"image {root.image}: {sandbox_dir} is (under) a symlink; the episode seeds "
                             f"{sandbox_dir} from the image, so it must be a directory there")
        if not path.is_dir():
            return None
    return path


def image_top_level(root: SystemRoot, harness: set[str]) -> list[Path]:
    """The image's top-level entries the sandbox mounts nothing for (its /data, /srv, /workspace.txt, /mnt, and
    /app of WORKDIR /app/project): everything at the image's `/` but the `harness` entries (system directories, mount
    points, homes: sandbox.harness_entries), which reach the episode through those mounts or are the harness's own."""
    return [entry for entry in sorted(root.path.iterdir()) if entry.name not in harness]


def top_level_links(root: Path) -> list[tuple[str, str, str]]:
    """/bin, /lib, ... of a system root as (name, "symlink", target) where /usr is merged (Debian 12, most images)
    and (name, "dir", host path) where they are directories of their own (Alpine)."""
    out = []
    for name in TOP_LEVEL_SYSTEM_DIRS:
        path = root / name
        if path.is_symlink():
            out.append((name, "symlink", os.readlink(path)))
        elif path.is_dir():
            out.append((name, "dir", str(path)))
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")[:60] or "image"
