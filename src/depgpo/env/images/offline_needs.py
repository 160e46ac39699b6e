"""What a task needs from outside that this machine cannot give it: the prediction behind `depgpo data check`.

Episodes have no network. A task's image is built with the Debian archive (apt) and the local wheel cache (pip)
only, and its verifier gets uv and wheels from that cache (verifier_tools). So a task cannot run here when its
build, its verifier or its oracle downloads something else, asks uv for a Python its image lacks, or installs
packages at test time. Each finding names the step and what it needs.
"""

from __future__ import annotations

import functools
import re
import socket
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from depgpo.env.images import base_images, verifier_tools
from depgpo.tasks.dockerfile import external_bases, instructions, network_fetch_commands
from depgpo.tasks.shell_words import fatal_commands, simple_commands
from depgpo.tasks.task import Task

_APT_VALUE_OPTIONS = {"-o", "--option", "-c", "--config-file", "-t", "--target-release"}  # take the next word
_WRAPPERS = {"sudo", "env", "nohup", "command", "exec", "time"}  # run the command that follows them
_SYSTEM_PYTEST = re.compile(r"(?:^|[\s;&|(])(?:python3?(?:\.\d+)?\s+-m\s+pytest|pytest)\b", re.MULTILINE)
_HARMLESS_AT_TEST_TIME = {"curl"}  # test.sh installs curl only to fetch uv's installer, whose effect we supply
# Debian's minbase (Priority: required and apt): in every bootstrapped base, so `apt-get install grep` succeeds offline.
MINBASE_PACKAGES = {"apt", "base-files", "base-passwd", "bash", "bsdutils", "coreutils", "dash", "debconf",
                    "debianutils", "diffutils", "dpkg", "findutils", "gpgv", "grep", "gzip", "hostname",
                    "init-system-helpers", "libc-bin", "login", "mawk", "ncurses-base", "ncurses-bin", "perl-base",
                    "sed", "sysvinit-utils", "tar", "tzdata", "util-linux", "mount", "passwd"}


@functools.cache
def internet_reachable() -> bool:
    """Whether hosts beyond the package registries resolve (github.com): on clusters, downloads at build work."""
    try:
        socket.getaddrinfo("github.com", 443)
        return True
    except OSError:
        return False


@functools.cache
def debian_archive_reachable(mirror: str = base_images.DEBIAN_MIRROR) -> bool:
    try:
        with urllib.request.urlopen(f"{mirror}/dists/stable/Release", timeout=10):
            return True
    except OSError:
        return False


def apt_packages(script: str) -> list[str]:
    """Package names of the `apt-get install` / `apt install` commands of a script, read as bash reads it
    (shell_words.simple_commands: redirections, pipes, lists and continuations are not names); a name the text
    does not fix (`$PKGS`) is left out."""
    names = []
    for words in map(_unwrapped, simple_commands(script)):
        if not words or words[0] not in ("apt-get", "apt"):
            continue
        arguments, skip = [], False
        for word in words[1:]:
            if skip or word is None:
                skip = False
                continue
            skip = word in _APT_VALUE_OPTIONS
            if not word.startswith("-"):
                arguments.append(word)
        if arguments[:1] == ["install"]:
            names += [re.split(r"[=/]", name)[0] for name in arguments[1:]]  # curl=7.88.1-10, jq/bookworm
    return names


def _unwrapped(words: list[str | None]) -> list[str | None]:
    """The command that sudo -E, env A=1, nohup, ... run."""
    while words and (words[0] in _WRAPPERS or (words[0] or "").startswith("-") or "=" in (words[0] or "")):
        words = words[1:]
    return words


def apt_stops(script: str) -> str | None:
    """The first apt-get (apt) command that ends the script under `set -e`: in an episode it always fails (no
    network, and apt cannot switch to its _apt user in the sandbox's one-uid namespace), even for a package the
    image has. None when no such command ends the script."""
    for words in map(_unwrapped, fatal_commands(script)):
        if words and words[0] in ("apt-get", "apt") and set(words[1:]) & {"update", "install", "upgrade"}:
            return " ".join(w if w is not None else "..." for w in words)
    return None


def image_python(task: Task, build_script: str) -> str | None:
    """The Python the built image will have: its base's, or the release's python3 when the build installs it."""
    for base in reversed(_bases(task)):
        recipe = base_images.recipe_for(base)
        if recipe is None:
            return None
        if recipe.python_image:
            return dict(recipe.env)["PYTHON_VERSION"]
        if {"python3", "python3-pip", "python3-venv"} & set(apt_packages(build_script)):
            return base_images.DEBIAN_PYTHON[recipe.release]
    return None


def _bases(task: Task) -> list[str]:
    return external_bases(task.dockerfile.read_text(errors="replace")) if task.dockerfile else []


def build_script(task: Task) -> str:
    """The shell text the build runs: every RUN, and the context's scripts those RUN steps name."""
    if task.dockerfile is None:
        return ""
    runs = [rest for _, keyword, rest, heredoc in instructions(task.dockerfile.read_text(errors="replace"))
            if keyword == "RUN" for rest in [rest + "\n" + "\n".join(heredoc)]]
    text = verifier_tools.joined_lines("\n".join(runs))
    for script in task.build_context.rglob("*.sh"):
        if script.name in text:
            text += "\n" + script.read_text(errors="replace")
    return text


def wheel_in_cache(requirement: str, python: str | None, wheels: Path) -> bool:
    """Whether the cache has a wheel for `requirement` (name, or name==version) that installs on `python`."""
    match = re.fullmatch(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?(?:==([A-Za-z0-9.+!_-]+))?", requirement)
    name = match[1] if match else re.split(r"[\[=<>!~ ;]", requirement, maxsplit=1)[0]
    version = match[2] if match else None  # a range: any wheel of it (prefetch resolved it)
    tags = ("py3-none", "py2.py3-none", "abi3") + ((f"cp{python.replace('.', '')}-",) if python else ())
    for wheel in wheels.glob("*.whl") if wheels.is_dir() else []:
        wheel_name, wheel_version = wheel.name.split("-")[:2]
        if _normal(wheel_name) == _normal(name) and version in (None, wheel_version) and \
                any(tag in wheel.name for tag in tags):
            return True
    return False


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def build_problems(task: Task, wheels: Path) -> list[str]:
    """What the task's image build needs that it cannot get here; empty when it should build."""
    problems = []
    script = build_script(task)
    if not internet_reachable():
        problems += [f"the build downloads: {c}" for c in network_fetch_commands(script)]
        dockerfile = task.dockerfile.read_text(errors="replace") if task.dockerfile else ""
        for _, keyword, rest, _ in instructions(dockerfile):
            if keyword == "ADD" and re.search(r"https?://", rest):
                problems.append(f"the build downloads: ADD {rest}")
            if keyword == "COPY" and "--from=" in rest and "/" in rest.split("--from=")[1].split()[0]:
                problems.append(f"the build copies from another image: COPY {rest}")
    if apt_packages(script) and not debian_archive_reachable():
        problems.append(f"the build installs Debian packages ({' '.join(apt_packages(script))}) and the Debian "
                        f"archive {base_images.DEBIAN_MIRROR} is unreachable")
    python = image_python(task, script)
    for match in verifier_tools.PIP_INSTALL.finditer(script):
        problems += [f"the build pip-installs {r}, which the wheel cache {wheels} lacks (run `depgpo data prefetch`)"
                     for r in verifier_tools.requirements_in(match["args"]) if not wheel_in_cache(r, python, wheels)]
    return problems


@dataclass
class ImageContents:
    """What a built image has that a verifier or an oracle may look for."""

    pythons: set[str]     # versions of python3.X on its PATH directories
    packages: set[str]    # installed Debian packages
    has_pytest: bool      # pytest importable by the image's own Python


def image_contents(rootfs: Path) -> ImageContents:
    pythons = {m[1] for d in ("usr/bin", "usr/local/bin") for f in (rootfs / d).glob("python3.*")
               if (m := re.fullmatch(r"python(3\.\d+)", f.name))}
    status = rootfs / "var/lib/dpkg/status"
    text = status.read_text(errors="replace") if status.is_file() else ""
    packages = {m[1] for m in re.finditer(r"^Package: (\S+)\n(?:(?!\n\n).)*?^Status: install ok installed", text,
                                          re.MULTILINE | re.DOTALL)}
    has_pytest = any(rootfs.glob("usr/lib/python3*/*-packages/pytest")) or \
        any(rootfs.glob("usr/local/lib/python3*/*-packages/pytest"))
    return ImageContents(pythons, packages, has_pytest)


def run_problems(task: Task, wheels: Path, image: ImageContents | None = None) -> list[str]:
    """Why the task's verifier or oracle cannot run here. `image`: the built image's contents (else predicted
    from the Dockerfile: the base's Python, the packages the build installs)."""
    problems = []
    script = build_script(task)
    python = image_python(task, script)
    pythons = image.pythons if image is not None else ({python} if python else set())
    in_image = image.packages if image is not None else set(apt_packages(script)) | MINBASE_PACKAGES
    test_script = task.verifier_script.read_text(errors="replace") if task.format == "harbor" else ""
    needs = verifier_tools.verifier_needs(test_script)
    name = task.verifier_script.name
    if needs.uv_version is not None and verifier_tools.uv_wheel(wheels, needs.uv_version) is None:
        problems.append(f"{name} installs uv {needs.uv_version or '(latest)'}, which the wheel cache lacks "
                        "(run `depgpo data prefetch`)")
    for wanted in needs.pythons:
        if not any(have == wanted or have.startswith(wanted + ".") for have in pythons):
            problems.append(f"{name} asks uv for Python {wanted}; the image has {', '.join(sorted(pythons)) or 'none'}"
                            ", and uv would download one (no network in episodes)")
    problems += [f"{name} installs {r}, which the wheel cache lacks (run `depgpo data prefetch`)"
                 for install_python, group in needs.installs for r in group
                 if not wheel_in_cache(r, install_python or python, wheels)]
    missing = [p for p in apt_packages(test_script) if p not in in_image and p not in _HARMLESS_AT_TEST_TIME]
    if missing:
        problems.append(f"{name} apt-installs {' '.join(missing)} at test time, which the image lacks (episodes "
                        "have no network)")
    stop = apt_stops(test_script)
    if stop:
        problems.append(f"{name} runs under `set -e` and `{stop}` fails in every episode (no network; apt cannot "
                        "drop to its _apt user in the sandbox): the script stops before its tests")
    problems += [f"{name} downloads: {c}" for c in network_fetch_commands(test_script) if "astral.sh/uv" not in c]
    installs_pytest = any("pytest" in r for r in needs.requirements)
    if image is not None and not image.has_pytest and not installs_pytest and _SYSTEM_PYTEST.search(test_script):
        problems.append(f"{name} runs the image's own pytest, which the image lacks")
    if task.solution_script is not None:
        solve = verifier_tools.joined_lines(task.solution_script.read_text(errors="replace"))
        problems += [f"the oracle ({task.solution_script.name}) downloads: {c}" for c in network_fetch_commands(solve)]
        for match in verifier_tools.PIP_INSTALL.finditer(solve):
            problems += [f"the oracle pip-installs {r} (no network in episodes)"
                         for r in verifier_tools.requirements_in(match["args"])]
        missing = [p for p in apt_packages(solve) if p not in in_image]
        if missing:
            problems.append(f"the oracle apt-installs {' '.join(missing)}, which the image lacks (no network in "
                            "episodes)")
    return list(dict.fromkeys(problems))
