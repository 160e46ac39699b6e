"""What a task's verifier script downloads, served offline by the real tools: uv, and the wheels it installs.

Harbor's usual tests/test.sh fetches uv with `curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh`, then runs
`uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest ... /tests/test_outputs.py`. An episode has no
network, and the script runs unmodified, so we give it what those downloads would have given:

- uv itself, at the version the installer URL names, from PyPI's `uv` wheel (the same binary the installer fetches),
  with the installer's `$HOME/.local/bin/env`, mounted at `$HOME/.local/bin` in the verifier's mount namespace only:
  the agent never sees it and cannot plant an `env` of its own there for the verifier to source. The `curl | sh`
  step still runs, and fails for want of network; that is the one step whose effect we supply.
- the wheels uvx and pip install (`-w pytest==8.4.1`, `pip install numpy==2.3.1` in test.sh), served from the local
  wheel cache: `UV_OFFLINE=1` with `UV_FIND_LINKS`, and `PIP_NO_INDEX=1` with `PIP_FIND_LINKS`.
- uv may not download Python (`UV_PYTHON_DOWNLOADS=never`): `-p 3.13` must be an interpreter the image has.

The cache is filled beforehand from the package registry (`depgpo data prefetch`, `prefetch` here): the uv wheel
and every requirement the tasks' Dockerfiles and verifier scripts pin, for the Python of each task's image.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.images.cache_locks import locked, wheels_lock

TOOLS_IN_SANDBOX = "/.depgpo_tools"        # harness-only: mounted for the verifier alone (trajectory.scope)
WHEELS_IN_SANDBOX = f"{TOOLS_IN_SANDBOX}/wheels"
_UV_INSTALLER = re.compile(r"astral\.sh/uv/(?:(?P<version>\d+\.\d+\.\d+)/)?install\.sh")
_UVX = re.compile(r"(?:^|[\s;&|(])(?:uvx|uv\s+tool\s+run)\s+(?P<args>[^\n;&|]*)")
PIP_INSTALL = re.compile(r"(?:^|[\s;&|(])(?:python3?\s+-m\s+pip|pip3?|uv\s+pip)\s+install\s+(?P<args>[^\n;&|]*)")
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._-]+\])?(?:[=<>!~]=?[A-Za-z0-9.*+!_-]+"
                          r"(?:,[=<>!~]=?[A-Za-z0-9.*+!_-]+)*)?")
# The installer's env script: put ~/.local/bin first on PATH unless it is there (written here, same effect).
ENV_SCRIPT = """#!/bin/sh
# uv's installer leaves this file; test scripts `source $HOME/.local/bin/env`.
case ":${PATH}:" in
    *:"$HOME/.local/bin":*) ;;
    *) export PATH="$HOME/.local/bin:$PATH" ;;
esac
"""
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "linux_x86_64", "any")


@dataclass
class VerifierNeeds:
    """What a verifier script fetches from the network."""

    uv_version: str | None = None      # the installer URL's version ("" when it names none: the latest)
    # One entry per install it makes (a uvx run, a pip install): (its Python: uvx -p, else None; its requirements).
    # Each resolves on its own, as it does when the script runs: pins may differ between them.
    installs: list[tuple[str | None, list[str]]] = field(default_factory=list)

    @property
    def requirements(self) -> list[str]:
        return list(dict.fromkeys(r for _, group in self.installs for r in group))

    @property
    def pythons(self) -> list[str]:
        return list(dict.fromkeys(python for python, _ in self.installs if python))


def verifier_needs(script: str) -> VerifierNeeds:
    """Read a verifier script (test.sh) for the downloads it makes."""
    script = joined_lines(script)
    needs = VerifierNeeds()
    installer = _UV_INSTALLER.search(script)
    if installer:
        needs.uv_version = installer["version"] or ""
    for match in _UVX.finditer(script):
        words, python, group = _words(match["args"]), None, []
        for i, word in enumerate(words[:-1]):
            if word in ("-w", "--with"):
                group += [r for r in words[i + 1].split(",") if r]
            elif word in ("-p", "--python"):
                python = words[i + 1]
        target = next((w for i, w in enumerate(words) if not w.startswith("-") and
                       (i == 0 or words[i - 1] not in ("-w", "--with", "-p", "--python", "--from"))), None)
        needs.installs.append((python, group + ([target] if target else [])))
    for match in PIP_INSTALL.finditer(script):
        needs.installs.append((None, requirements_in(match["args"])))
    needs.installs = [(python, group) for python, group in needs.installs if group]
    return needs


def joined_lines(script: str) -> str:
    """The script with its backslash-newline continuations joined, as the shell reads it."""
    return re.sub(r"\\[ \t]*\n", " ", script)


def requirements_in(pip_args: str) -> list[str]:
    """The requirement specifiers of a `pip install ARGS` (options, paths and URLs left out)."""
    words, out, skip = _words(pip_args), [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word in ("-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target", "-i",
                    "--index-url", "--extra-index-url", "-f", "--find-links", "--prefix", "--root"):
            skip = True
        elif not word.startswith("-") and "/" not in word and _REQUIREMENT.fullmatch(word):
            out.append(word)
    return out


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def prefetch(requirements: list[str], python: str, wheels: Path) -> str | None:
    """pip-download `requirements` as wheels for CPython `python` (3.13) into `wheels`; the error text or None.
    pip writes its files in place, so it downloads into a staging directory beside the cache, and the wheels are
    renamed in under the cache's exclusive lock (cache_locks): a build or verifier reading the cache meanwhile sees
    each wheel whole or not at all."""
    if not requirements:
        return None
    wheels.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{wheels.name}-staging-", dir=wheels.parent))
    try:
        argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--only-binary=:all:",
                "--python-version", python, *(f"--platform={p}" for p in PLATFORMS), "-d", str(staging),
                *requirements]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            return (result.stderr or result.stdout).strip()[-800:]
        with locked(wheels_lock(wheels)):
            for wheel in staging.iterdir():
                if not (wheels / wheel.name).exists():
                    os.replace(wheel, wheels / wheel.name)
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def uv_wheel(wheels: Path, version: str | None) -> Path | None:
    """The cached uv wheel of `version` (the newest cached one when version is "" or None)."""
    found = sorted(wheels.glob("uv-*-py3-none-*.whl"), key=lambda p: _version_key(p.name.split("-")[1]))
    if version:
        found = [p for p in found if p.name.split("-")[1] == version]
    return found[-1] if found else None


def _version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def uv_bin_dir(wheels: Path, version: str | None, tools: Path) -> Path | None:
    """A directory with uv, uvx and the installer's env script, as the installer leaves $HOME/.local/bin; None when
    the cache has no uv wheel of that version."""
    wheel = uv_wheel(wheels, version)
    if wheel is None:
        return None
    target = tools / f"uv-{wheel.name.split('-')[1]}"
    if not (target / "env").is_file():
        tools.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=tools))  # its own: episodes start at once
        try:
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if re.fullmatch(r"uv-[^/]+\.data/scripts/(uv|uvx)", name):
                        path = staging / Path(name).name
                        path.write_bytes(archive.read(name))
                        path.chmod(0o755)
            (staging / "env").write_text(ENV_SCRIPT)
            (staging / "env").chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
            staging.chmod(0o755)
            try:
                staging.rename(target)
            except OSError:  # another episode put the same files there first
                if not (target / "env").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def shared_tools(wheels: Path, tools: Path) -> Path:
    """`tools` (in the episodes' work root, which the episode uids can pass through) with a copy of the wheel cache
    in tools/wheels: the cache itself may lie under a home directory no episode uid can read. Root-owned and
    read-only to everyone else; files are linked where the file system allows, else copied once."""
    target = tools / "wheels"
    target.mkdir(parents=True, exist_ok=True)
    for directory in (tools, target):
        directory.chmod(0o755)
    for wheel in sorted(wheels.glob("*.whl")) if wheels.is_dir() else []:
        copy = target / wheel.name
        if copy.exists() and copy.stat().st_size == wheel.stat().st_size:
            continue
        partial = target / f".{wheel.name}.{os.getpid()}-{threading.get_ident()}.partial"  # its own: two episodes
        partial.unlink(missing_ok=True)  # that start at once would otherwise rename each other's half-copied file
        try:
            os.link(wheel, partial)
        except OSError:
            shutil.copyfile(wheel, partial)
        partial.chmod(0o644)
        partial.replace(copy)
    return tools


def verifier_env() -> dict[str, str]:
    """Settings that make uv and pip in the verifier use the local wheel cache and never the network."""
    # uv's cache and its managed Pythons live in /logs, the verifier's own directory: a tool environment or a
    # "managed Python" the agent planted under ~/.cache/uv or ~/.local/share/uv would otherwise be reused.
    # UV_NO_CONFIG: an agent-written ~/.config/uv/uv.toml (another index, other settings) must not reach the judge.
    return {"UV_OFFLINE": "1", "UV_NO_CONFIG": "1", "UV_FIND_LINKS": WHEELS_IN_SANDBOX, "UV_PYTHON_DOWNLOADS": "never",
            "UV_CACHE_DIR": "/logs/.uv-cache", "UV_PYTHON_INSTALL_DIR": "/logs/.uv-python",
            "UV_TOOL_DIR": "/logs/.uv-tools", "UV_NO_PROGRESS": "1", "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": WHEELS_IN_SANDBOX, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@dataclass
class VerifierTools:
    """What one episode's verifier gets (for_verifier)."""

    binds: list[tuple[str, str]]   # (host dir, sandbox dir), read-only, in the verifier's mount namespace only
    env: dict[str, str]            # the settings that point uv and pip at them
    errors: list[str]              # what the verifier will miss, to record
    tb1_setup: str = ""            # run before TB1's offline pytest: a venv with pytest from the cache
    tb1_python: str = "python3"    # the interpreter of that run (tasks.offline_test_command)


TB1_VENV = "/logs/.tb1-venv"  # the verifier's own directory: nothing the agent wrote is in it


def for_verifier(task, wheel_cache: Path, tools_root: Path, home: str, on_host: bool) -> VerifierTools:
    """The tools directory for every verifier, uv at ~/.local/bin where a Harbor test.sh runs uv's installer, and
    for TB1 in an image (whose python3 may lack pytest) a venv over the image's Python with pytest from the cache."""
    tools = shared_tools(wheel_cache, tools_root)
    result = VerifierTools([(str(tools), TOOLS_IN_SANDBOX)], verifier_env(), [])
    needs = verifier_needs(task.verifier_script.read_text(errors="replace"))
    if needs.uv_version is not None and task.format == "harbor":  # TB1's script is replaced, never run
        uv = uv_bin_dir(tools / "wheels", needs.uv_version, tools)
        if uv is None:
            result.errors.append(f"{task.verifier_script.name} installs uv {needs.uv_version or '(latest)'}, which "
                                 f"the wheel cache {wheel_cache} lacks: run `depgpo data prefetch {task.root}`")
        else:
            result.binds.append((str(uv), f"{home.rstrip('/')}/.local/bin"))
    if not on_host and task.format != "harbor":  # the host's python3 has Debian's pytest
        uv = uv_bin_dir(tools / "wheels", "", tools)
        if uv is None:
            result.errors.append(f"the TB1 verifier runs pytest through uv, and the wheel cache {wheel_cache} has "
                                 f"no uv wheel: run `depgpo data prefetch {task.root}`")
        else:  # made in /logs, so that uv looks for no project, venv or .python-version where the agent worked
            uv_path = f"{TOOLS_IN_SANDBOX}/{uv.name}/uv"
            result.tb1_setup = (f"(cd /logs && {uv_path} venv -q --system-site-packages -p python3 {TB1_VENV} && "
                                f"{uv_path} pip install -q -p {TB1_VENV}/bin/python pytest); ")
            result.tb1_python = f"{TB1_VENV}/bin/python"
    return result
