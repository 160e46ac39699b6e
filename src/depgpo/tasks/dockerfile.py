"""Read a task's Dockerfile as a plan: its bases, the files it copies, its ENV and WORKDIR, and its RUN steps.

The image builder (podman) runs the Dockerfile itself; this reading is for what the harness must know without a
build: whether this host's root can stand for the image (only COPY, ENV and WORKDIR on the host's own release:
env.images.host_mismatch), the files the host backend copies in, what the build installs and downloads
(`depgpo data check`, `depgpo data prefetch`), and what a plan could not reproduce without the builder
(`unreplayable`). RUN steps are kept as self-contained `/bin/sh -c` strings, as Docker would run them.

The parser handles line continuations, comments, BuildKit heredocs, JSON-array (exec) and shell forms, ARG and ENV
substitution (`$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR:+alt}`), WORKDIR relative to the previous WORKDIR, SHELL,
and multi-stage builds (the plan describes the last stage; a stage built FROM an earlier one inherits it).
"""

from __future__ import annotations

import copy
import json
import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.tasks.shell_words import simple_command_texts

# Base images whose userland matches this host closely enough: Debian, the Debian-based official python images,
# and Terminal-Bench-1's python base images (ghcr.io/laude-institute/t-bench/python-3-13).
_REPLAYABLE_BASE = re.compile(r"(debian|python)(-[\d-]+)?")
_NON_DEBIAN_TAG = re.compile(r"alpine|windows|nanoserver")
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_DEFAULT_SHELL = ["/bin/sh", "-c"]
_ROOT_USERS = {"root", "0", "root:root", "0:0"}
_IMAGE_DIRS = {"/", "/bin", "/etc", "/home", "/opt", "/root", "/srv", "/tmp", "/usr", "/usr/bin", "/usr/lib",
               "/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/local/share", "/usr/share", "/var",
               "/var/lib", "/var/tmp"}
# The PATH every image starts with (Docker's default); `ENV PATH=/x:$PATH` extends it.
_IMAGE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
_CONTINUATION = re.compile(r"\\[ \t]*$")
_HEREDOC = re.compile(r"(?<!<)<<(-?)[ \t]*([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_ONLY_HEREDOC = re.compile(r"<<-?[ \t]*([\"']?)[A-Za-z_][A-Za-z0-9_]*\1")
_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}"
                       r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
# Instructions that change nothing an episode can observe. CMD is among them because both harnesses replace it:
# Harbor and Terminal-Bench-1 start the container with `sleep infinity` and attach the agent's shell to it.
_IGNORED = {"CMD", "EXPOSE", "LABEL", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK", "VOLUME", "ONBUILD"}
_KNOWN = _IGNORED | {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "ADD", "RUN", "SHELL", "USER", "ENTRYPOINT"}


class DockerfileError(ValueError):
    """A Dockerfile that Docker itself would refuse to build."""

    def __init__(self, line: int, problem: str, fix: str):
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem
        self.fix = fix


@dataclass
class CopyStep:
    """One COPY/ADD: sources relative to the build context, into an absolute sandbox path."""

    line: int
    sources: list[str]
    dest: str
    dest_is_dir: bool  # sources go inside dest: several sources, a glob, dest ending in /, or a known directory


@dataclass
class DockerfilePlan:
    base_image: str | None = None
    workdir: str | None = None  # None: the Dockerfile never sets WORKDIR
    env: dict[str, str] = field(default_factory=dict)
    copies: list[CopyStep] = field(default_factory=list)
    run_commands: list[str] = field(default_factory=list)  # self-contained `/bin/sh -c` strings, in order
    unreplayable: list[str] = field(default_factory=list)


@dataclass
class _Stage:
    plan: DockerfilePlan
    args: dict[str, str]  # ARGs in scope: visible to RUN at build time, never to the running container
    directories: set[str]  # known to exist: COPY onto one of them copies into it, as Docker does
    shell: list[str] = field(default_factory=lambda: list(_DEFAULT_SHELL))


def parse_dockerfile(text: str) -> DockerfilePlan:
    """The replay plan of the last build stage of `text`."""
    global_args: dict[str, str] = {}  # ARGs before the first FROM parameterise FROM lines only
    stages: dict[str, _Stage] = {}
    stage: _Stage | None = None
    for line, keyword, rest, heredoc_lines in instructions(text):
        if keyword not in _KNOWN:
            raise DockerfileError(line, f"unknown instruction {keyword}", "use a Dockerfile instruction")
        if keyword == "ARG" and stage is None:
            global_args.update(_parse_args(rest, global_args, global_args))
        elif keyword == "FROM":
            stage = _start_stage(line, rest, global_args, stages)
        elif stage is None:
            raise DockerfileError(line, f"{keyword} before the first FROM", "start the Dockerfile with FROM <image>")
        elif keyword not in _IGNORED:
            _apply(stage, line, keyword, rest, heredoc_lines, global_args)
    if stage is None:
        raise DockerfileError(1, "no FROM instruction", "start the Dockerfile with FROM <image>")
    return stage.plan


def external_bases(text: str) -> list[str]:
    """The images a Dockerfile builds on: each FROM that names no earlier stage, with the ARGs before it."""
    global_args: dict[str, str] = {}
    stages: set[str] = set()
    bases: list[str] = []
    for _, keyword, rest, _ in instructions(text):
        if keyword == "ARG" and not stages and not bases:
            global_args.update(_parse_args(rest, global_args, global_args))
        elif keyword == "FROM":
            words = [w for w in _expand_words(rest, global_args) if not w.startswith("--platform")]
            if words and words[0].lower() not in stages and words[0].lower() != "scratch" and words[0] not in bases:
                bases.append(words[0])
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
    return bases


def resolve_copies(plan: DockerfilePlan, context: Path) -> list[tuple[Path, str]]:
    """(host path, sandbox path) for every COPY/ADD source found in the build context.

    A host directory stands for its contents, copied into the sandbox path (Docker copies a directory's contents,
    not the directory itself).
    """
    context = context.resolve()
    files: list[tuple[Path, str]] = []
    for step in plan.copies:
        for source in step.sources:
            relative = source.lstrip("/").removeprefix("./") or "."
            if any(c in relative for c in "*?["):
                matches = sorted(context.glob(relative))
            else:
                matches = [context / relative] if (context / relative).exists() else []
            if not matches:
                raise DockerfileError(step.line, f"COPY source {source} is not in the build context {context}",
                                      "add the file to the build context or fix the path")
            for host in matches:
                host = Path(os.path.normpath(host))
                if not host.resolve().is_relative_to(context):
                    raise DockerfileError(step.line, f"COPY source {source} lies outside the build context",
                                          "copy only files inside the build context")
                into = step.dest_is_dir and not host.is_dir()
                files.append((host, posixpath.join(step.dest, host.name) if into else step.dest))
    return files


def network_fetch_commands(script: str) -> list[str]:
    """Simple commands of a shell script that download from the network directly (curl, wget, git clone)."""
    return [c for c in _simple_commands(script) if _fetches(c)]


def package_install_commands(script: str) -> list[str]:
    """Simple commands of a shell script that install packages through a package manager (apt, pip, uv, npm...)."""
    return [c for c in _simple_commands(script) if _installs(c)]


# --- instructions ---------------------------------------------------------------------------------------------


def instructions(text: str):
    """(line number, KEYWORD, arguments, heredoc lines) per instruction, continuations joined, comments dropped."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, joined = i + 1, lines[i]
        i += 1
        if not joined.strip() or joined.lstrip().startswith("#"):
            continue
        while _CONTINUATION.search(joined) and i < len(lines):
            following = lines[i]
            i += 1
            # Docker drops comment and blank lines inside a continued instruction.
            if following.strip() and not following.lstrip().startswith("#"):
                joined = _CONTINUATION.sub("", joined) + following
        keyword, rest = (re.split(r"\s+", _CONTINUATION.sub("", joined).strip(), maxsplit=1) + [""])[:2]
        keyword = keyword.upper()
        heredoc_lines: list[str] = []
        if keyword in ("RUN", "COPY", "ADD"):
            for strip_tabs, _, terminator in _HEREDOC.findall(rest):
                while i < len(lines):
                    heredoc_lines.append(lines[i])
                    i += 1
                    if (lines[i - 1].lstrip("\t") if strip_tabs else lines[i - 1]) == terminator:
                        break
        yield start, keyword, rest, heredoc_lines


def _start_stage(line: int, rest: str, global_args: dict[str, str], stages: dict[str, _Stage]) -> _Stage:
    words = [w for w in _expand_words(rest, global_args) if not w.startswith("--platform")]
    if not words:
        raise DockerfileError(line, "FROM names no image", "write FROM <image>")
    image = words[0]
    if image.lower() in stages:  # built on an earlier stage: its files, ENV and SHELL carry over; ARGs do not
        stage = copy.deepcopy(stages[image.lower()])
        stage.args = {}
    else:
        stage = _Stage(DockerfilePlan(base_image=image), {}, set(_IMAGE_DIRS))
        if not _replayable_base(image):
            stage.plan.unreplayable.append(
                f"FROM {image}: episodes run on this host's Debian root, not on this image")
    if len(words) >= 3 and words[1].lower() == "as":
        stages[words[2].lower()] = stage
    return stage


def _replayable_base(image: str) -> bool:
    name, _, tag = image.rpartition("/")[2].partition(":")
    return bool(_REPLAYABLE_BASE.fullmatch(name)) and not _NON_DEBIAN_TAG.search(tag)


def _apply(stage: _Stage, line: int, keyword: str, rest: str, heredoc_lines: list[str],
           global_args: dict[str, str]) -> None:
    plan = stage.plan
    variables = {**_IMAGE_ENV, **stage.args, **plan.env}  # ENV wins over an ARG of the same name
    if keyword == "ARG":
        stage.args.update(_parse_args(rest, global_args, variables))
    elif keyword == "ENV":
        plan.env.update(_parse_env(line, rest, variables))
    elif keyword == "WORKDIR":
        path = " ".join(_expand_words(rest, variables))
        if not path:
            raise DockerfileError(line, "WORKDIR names no directory", "write WORKDIR /app")
        plan.workdir = posixpath.normpath(posixpath.join(plan.workdir or "/", path))
        stage.directories.add(plan.workdir)
    elif keyword in ("COPY", "ADD"):
        _apply_copy(stage, line, keyword, rest, heredoc_lines, variables)
    elif keyword == "RUN":
        _apply_run(stage, line, rest, heredoc_lines)
    elif keyword == "SHELL":
        shell = _exec_form(rest)
        if not shell:
            raise DockerfileError(line, "SHELL needs a JSON array", 'write SHELL ["/bin/bash", "-c"]')
        stage.shell = shell
    elif keyword == "USER":
        user = " ".join(_expand_words(rest, variables))
        if user not in _ROOT_USERS:
            plan.unreplayable.append(f"USER {user}: episodes run as root")
    elif keyword == "ENTRYPOINT":
        plan.unreplayable.append(f"ENTRYPOINT {rest}: nothing starts it before the agent's shell")


def _parse_args(rest: str, scope: dict[str, str], variables: dict[str, str]) -> dict[str, str]:
    """ARG NAME[=default] ...; a bare NAME takes the value of the global ARG of that name, else empty."""
    declared = {}
    for word in _expand_words(rest, variables):
        name, has_default, default = word.partition("=")
        declared[name] = default if has_default else scope.get(name, "")
    return declared


def _parse_env(line: int, rest: str, variables: dict[str, str]) -> dict[str, str]:
    words = _expand_words(rest, variables)  # every value sees the variables as they were before this line
    if not words:
        raise DockerfileError(line, "ENV sets nothing", "write ENV NAME=value")
    if "=" not in words[0]:  # legacy form: ENV NAME value with spaces
        if len(words) < 2:
            raise DockerfileError(line, f"ENV {words[0]} has no value", f"write ENV {words[0]}=value")
        return {words[0]: " ".join(words[1:])}
    pairs = {}
    for word in words:
        name, has_value, value = word.partition("=")
        if not has_value or not name:
            raise DockerfileError(line, f"ENV expects NAME=value, got {word!r}", "write ENV NAME=value ...")
        pairs[name] = value
    return pairs


def _apply_copy(stage: _Stage, line: int, keyword: str, rest: str, heredoc_lines: list[str],
                variables: dict[str, str]) -> None:
    plan = stage.plan
    if heredoc_lines:
        plan.unreplayable.append(f"{keyword} {rest}: files written from a heredoc are not replayed")
        return
    words = _exec_form(rest) or _expand_words(rest, variables)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if len(paths) < 2:
        raise DockerfileError(line, f"{keyword} needs a source and a destination", f"write {keyword} <src> <dest>")
    sources, dest = paths[:-1], paths[-1]
    for flag in flags:
        if flag.startswith("--from"):
            plan.unreplayable.append(f"{keyword} {rest}: copies from another image or build stage")
            return
        if flag.startswith("--chmod"):
            plan.unreplayable.append(f"{keyword} {rest}: the file modes it sets are not applied")
            return
    if keyword == "ADD":
        for source in sources:
            if re.match(r"[a-z][a-z0-9+.-]*://|git@", source):
                plan.unreplayable.append(f"ADD {rest}: downloads {source}")
                return
            if source.endswith(_ARCHIVE_SUFFIXES):
                plan.unreplayable.append(f"ADD {rest}: Docker unpacks the archive {source}")
                return
    written_as_dir = dest.endswith("/") or len(sources) > 1 or any(c in s for s in sources for c in "*?[")
    dest = posixpath.normpath(posixpath.join(plan.workdir or "/", dest))
    dest_is_dir = written_as_dir or dest in stage.directories
    if dest_is_dir:
        stage.directories.add(dest)
    plan.copies.append(CopyStep(line, sources, dest, dest_is_dir))


def _apply_run(stage: _Stage, line: int, rest: str, heredoc_lines: list[str]) -> None:
    plan = stage.plan
    flags = re.match(r"(?:--\S+\s+)*", rest)  # BuildKit flags: --mount=..., --network=...
    for flag in flags.group().split():
        if flag.startswith("--mount") and "type=cache" not in flag:
            plan.unreplayable.append(f"RUN {_short(rest)}: needs the build mount {flag}")
            return
    command = rest[flags.end():]
    exec_form = _exec_form(command)
    if exec_form:
        command = shlex.join(exec_form)
    elif heredoc_lines and _ONLY_HEREDOC.fullmatch(command):  # RUN <<EOF: the heredoc is the script
        command = "\n".join(heredoc_lines[:-1])
    elif heredoc_lines:
        command = "\n".join([command, *heredoc_lines])
    if not command.strip():
        raise DockerfileError(line, "RUN has no command", "write RUN <command>")
    fetches = network_fetch_commands(command)
    if fetches:
        plan.unreplayable.append(f"RUN {_short(command)}: downloads from the network")
        return
    plan.run_commands.append(_replayable(stage, command))


def _replayable(stage: _Stage, command: str) -> str:
    """`command` as a `/bin/sh -c` string that runs where and how Docker would have run it.

    Docker runs RUN in the current WORKDIR (creating it), with the ARGs in scope in its environment, under SHELL.
    The `; ` after `|| exit 1` keeps the prefix a separate list, so `&`, `||` and `;` in `command` keep their
    meaning.
    """
    workdir = shlex.quote(stage.plan.workdir or "/")
    prefix = f"mkdir -p {workdir} && cd {workdir} || exit 1; "
    for name, value in stage.args.items():
        if name not in stage.plan.env and re.search(rf"\$\{{?{name}\b", command):
            prefix += f"export {name}={shlex.quote(value)}; "
    if stage.shell == _DEFAULT_SHELL:
        return prefix + command
    return shlex.join([*stage.shell, prefix + command])


def _short(command: str, limit: int = 100) -> str:
    """A command on one line, cut to `limit` characters, for messages."""
    flat = " ".join(command.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _exec_form(text: str) -> list[str] | None:
    """The JSON-array form of an instruction, or None (Docker then treats the text as shell form)."""
    if not text.startswith("["):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


def _expand_words(text: str, variables: dict[str, str]) -> list[str]:
    """Docker's word splitting for ENV, ARG, COPY, WORKDIR...: quotes group, backslash escapes, `$` expands
    outside single quotes."""
    words: list[str] = []
    word: list[str] = []
    started = False
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote != "'" and c == "$":
            match = _VARIABLE.match(text, i)
            if match:
                word.append(_substitute(match, variables))
                started, i = True, match.end()
                continue
        if c == "\\" and quote != "'" and i + 1 < len(text):
            word.append(text[i + 1])
            started, i = True, i + 2
            continue
        if c in "'\"" and quote in (None, c):
            quote = None if quote else c
            started = True
        elif c.isspace() and quote is None:
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(c)
            started = True
        i += 1
    if started:
        words.append("".join(word))
    return words


def _substitute(match: re.Match, variables: dict[str, str]) -> str:
    name = match["braced"] or match["plain"]
    value = variables.get(name, "")
    if match["op"] == "-":
        return value or "".join(_expand_words(match["word"], variables))
    if match["op"] == "+":
        return "".join(_expand_words(match["word"], variables)) if value else ""
    return value


# --- shell commands -------------------------------------------------------------------------------------------


def _simple_commands(script: str) -> list[str]:
    """The simple commands of a script as bash reads it (shell_words: redirections, quotes, heredoc bodies, pipes
    and lists), without the wrappers that run them (sudo, env, nohup, ...)."""
    commands = []
    for text in simple_command_texts(script):
        words = text.split()
        while words and (re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]) or words[0] in (
                "sudo", "env", "exec", "time", "nohup", "!")):
            words.pop(0)
        if words:
            commands.append(" ".join(words))
    return commands


def _fetches(command: str) -> bool:
    name, *args = command.split()
    name = posixpath.basename(name)
    return name in ("curl", "wget") or (
        name == "git" and bool(args) and args[0] in ("clone", "fetch", "pull", "submodule", "ls-remote"))


def _installs(command: str) -> bool:
    name, *args = command.split()
    name = posixpath.basename(name)
    verbs = [a for a in args if not a.startswith("-")]
    if re.fullmatch(r"python[\d.]*", name) and args[:2] == ["-m", "pip"]:
        name, verbs = "pip", [a for a in args[2:] if not a.startswith("-")]
    first = verbs[0] if verbs else ""
    if name in ("apt-get", "apt", "aptitude"):
        return first in ("install", "update", "upgrade", "dist-upgrade", "build-dep")
    if re.fullmatch(r"pip[\d.]*|pipx|gem|conda|mamba|micromamba", name):
        return first in ("install", "create", "download")
    if name == "uv":
        return first in ("pip", "sync", "add", "tool", "python", "run", "venv")
    if name in ("npm", "pnpm", "yarn"):
        return first in ("install", "i", "ci", "add")
    if name in ("cargo", "go"):
        return first in ("install", "fetch", "get", "build", "mod")
    return name in ("uvx", "npx", "apk")
