"""One sandboxed, traced episode of a task: commands in, `trajectory.json` out (docs/trajectory-schema.md).

    with Episode(task, EpisodeConfig(), out_dir) as ep:
        ep.run_command("echo 63841 > /app/answer.txt", turn=0)
        ep.verify()
    # out_dir/trajectory.json is rewritten after every command, so nothing computed is lost on a crash.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from depgpo.env.images import DEFAULT_CACHE, image_dir, system_root_for
from depgpo.env.filestate import MISSING, FileVersion, StatWalk, lines_written, read_text, read_version
from depgpo.env.sandbox import (SANDBOX_PATH, EpisodeCgroups, SandboxLayout, SandboxLimits, UidLease,
                                launcher_argv, reap_uid, remove_layout, under)
from depgpo.env.shell import ShellSession, truncate_observation
from depgpo.env.trace_parser import TraceParser
from depgpo.env.verifier import compute_reward, inspection_set, static_inspection_set
from depgpo.tasks import Task, offline_test_command

SCHEMA_VERSION = 1
# Locations whose files are never records (spec section 2: system and package locations, caches).
UNTRACKED_PREFIXES = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/opt", "/proc", "/sys", "/dev", "/run",
                      "/var/lib", "/var/cache", "/var/log", "/.depgpo", "/.depgpo_mark", "/logs")
PARSER_SKIPPED_PREFIXES = ("/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/proc/sys/", "/sys/")
UNTRACKED_PARTS = ("/__pycache__/", "/.cache/", "/site-packages/", "/dist-packages/", "/.npm/")


def keep_path(path: str, workdir: str | None = None) -> bool:
    """Cheap filter applied by the trace parser to every path. The workdir is tracked even where it lies under an
    untracked prefix (an image's WORKDIR /usr/src/app); caches are not, wherever they lie."""
    if under(path, UNTRACKED_PREFIXES) and not (workdir and under(path, (workdir,))):
        return False
    return not any(part in path for part in UNTRACKED_PARTS) and not path.endswith(".pyc")


@dataclass
class EpisodeConfig:
    command_timeout_s: float = 60.0
    verifier_timeout_s: float | None = None   # None: the task's own
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    work_root: Path = Path(tempfile.gettempdir()) / "depgpo-episodes"
    keep_sandbox: bool = False                 # keep the host directories after close (debugging)
    setup_timeout_s: float = 600.0
    backend: str = "host"                      # system directories: host | image (the task's container image)
    runtime: str = "auto"                      # image backend: auto | podman | docker | apptainer | singularity
    image_cache: Path = DEFAULT_CACHE          # image backend: unpacked images, one directory per image id


class Episode:
    def __init__(self, task: Task, config: EpisodeConfig | None = None, out_dir: Path | None = None):
        self.task, self.config = task, config or EpisodeConfig()
        self.out_dir = Path(out_dir) if out_dir else None
        self.commands: list[dict] = []
        self.errors: list[str] = []
        self.verifier: dict | None = None
        self.final: dict | None = None
        self.timings = {"setup_s": 0.0, "commands_s": 0.0, "verifier_s": 0.0, "parse_s": 0.0}
        self._cache: dict[str, FileVersion] = {}   # last known version of every tracked file
        self._agent_written: set[str] = set()
        self._process_names: dict[int, str] = {}
        self.shell: ShellSession | None = None
        self._shell_starts = 0
        self._parser_of: dict[int, TraceParser] = {}  # command index -> the parser of the shell that ran it

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Episode":
        try:
            self.start()
        except BaseException as e:  # release the uid, cgroups and directories; the record says why
            self.errors.append("episode failed to start: " + "".join(traceback.format_exception_only(e)).strip())
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            self.errors.append("episode aborted: " + "".join(traceback.format_exception_only(exc[0], exc[1])).strip())
        self.close()

    def start(self) -> None:
        t0 = time.monotonic()
        self.config.work_root.mkdir(parents=True, exist_ok=True)
        self.system = system_root_for(self.task, self.config.backend, self.config.runtime, self.config.image_cache)
        self._lease = UidLease()
        root = Path(tempfile.mkdtemp(prefix=f"{self.task.id[:40]}-", dir=self.config.work_root))
        self.layout = SandboxLayout(root=root, workdir=self.system.workdir or self.task.workdir,  # the image's wins
                                    uid=self._lease.uid, system_root=self.system.path,
                                    env={**self.system.env, **self.task.env})
        if not self.system.is_host:  # the host's secrets are not in an image; masking them there would add files
            self.layout.masked_files, self.layout.masked_dirs = (), ()
        self.layout.prepare()
        self._seed_workdir()
        self._cgroups = EpisodeCgroups(root.name, self.config.limits)
        if self.task.setup_commands and self.system.is_host:  # an image has run its Dockerfile already
            self._replay_setup()
        self._start_shell()
        self._walk = StatWalk(self.layout)
        self._walk.changes()
        self._snapshot_initial_files()
        self.timings["setup_s"] = time.monotonic() - t0
        self._save()

    def _keep_path(self, path: str) -> bool:
        return keep_path(path, self.layout.workdir)

    def _preexec(self) -> None:
        self._cgroups.enter()
        if self.config.limits.cpu is not None:
            os.sched_setaffinity(0, {self.config.limits.cpu})

    def _start_shell(self) -> None:
        """Start (or, after the agent killed its shell, restart) the traced shell; files persist, processes not."""
        if self.shell is not None:
            self.shell.close()
            self._feed_trace()
        # /etc stays parsed: commands can write there (copy-on-write) and verifiers read configs from it.
        # A workdir under /usr or /opt (an image's WORKDIR /usr/src/app) is tracked like /app: its prefix stays parsed.
        skipped = tuple(p for p in PARSER_SKIPPED_PREFIXES if not (self.layout.workdir + "/").startswith(p))
        self.parser = TraceParser(keep_path=self._keep_path, untracked_prefixes=skipped)
        self._shell_starts += 1
        self.layout.trace_name = f"trace-{self._shell_starts}.log"
        self._trace_offset = 0
        self.shell = ShellSession(launcher_argv(self.layout, self.config.limits), preexec=self._preexec,
                                  first_command=len(self.commands))
        self._feed_trace()

    def _seed_workdir(self) -> None:
        """Copy the task's files into the episode, owned by the episode uid: the Dockerfile's COPY/ADD on the host
        backend; the image's own workdir, /root and /home on the image backend (there they are the image's)."""
        image_dirs = [] if self.system.is_host else [
            (image_dir(self.system, sandbox_dir), host_dir) for sandbox_dir, host_dir in self.layout.writable.items()
            if sandbox_dir not in ("/logs", "/tmp")]
        for source, host_dir in image_dirs:
            if source is not None:
                shutil.copytree(source, host_dir, dirs_exist_ok=True, symlinks=True)
        for host_path, sandbox_path in (self.task.app_files if self.system.is_host else []):
            target = self.layout.host_path(sandbox_path)
            if target is None:
                self.errors.append(f"cannot seed {sandbox_path}: outside the writable locations of the sandbox")
                continue
            if Path(host_path).is_dir():
                shutil.copytree(host_path, target, dirs_exist_ok=True, symlinks=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(host_path, target, follow_symlinks=False)
        for sandbox_dir, host_dir in self.layout.writable.items():
            for dirpath, dirnames, filenames in os.walk(host_dir):
                for name in [dirpath, *(os.path.join(dirpath, f) for f in dirnames + filenames)]:
                    os.lchown(name, self.layout.uid, self.layout.uid)

    def _replay_setup(self) -> None:
        """Dockerfile RUN steps, in a first sandbox over the same layout: their effects persist, their trace not."""
        shell = ShellSession(launcher_argv(self.layout, self.config.limits), preexec=self._preexec)
        try:  # the task's ENV is the sandbox's own (SandboxLayout.env)
            for command in self.task.setup_commands:
                # Each RUN step in its own sh, as Docker does: its exit, cd or exports cannot leak into the next.
                out = shell.run_marked(f"sh -c {shlex.quote(command)}", timeout_s=self.config.setup_timeout_s)
                if out.exit_code != 0:
                    self.errors.append(f"setup step failed (exit {out.exit_code}): {command!r}: "
                                       f"{truncate_observation(out.output, 2000)}")
        finally:
            shell.close()
        self.layout.trace_log.unlink(missing_ok=True)

    def _snapshot_initial_files(self) -> None:
        for path in self._walk.seen:
            version = read_version(self.layout, path)
            if version is not None:
                self._cache[path] = version

    def close(self) -> None:
        if self.shell is not None:
            self.shell.close()
            self._feed_trace()
        self._save()
        if hasattr(self, "layout"):
            survivors = reap_uid(self.layout.uid)
            if survivors:
                self.errors.append(f"{survivors} processes of the episode outlived its sandbox; killed")
        if hasattr(self, "_cgroups"):
            self._cgroups.remove()
        if hasattr(self, "_lease"):
            self._lease.release()
        if hasattr(self, "layout") and not self.config.keep_sandbox:
            remove_layout(self.layout)

    # ---------------------------------------------------------------- commands
    def _feed_trace(self) -> None:
        t0 = time.monotonic()
        try:
            with open(self.layout.trace_log, "rb") as fh:
                fh.seek(self._trace_offset)
                data = fh.read()
        except FileNotFoundError:
            return
        # Whole lines only: strace may be mid-line, and a half-written UTF-8 sequence must not be decoded early.
        data = data[:data.rfind(b"\n") + 1]
        self._trace_offset += len(data)
        self.parser.feed(data.decode("utf-8", "replace"))
        self.timings["parse_s"] += time.monotonic() - t0

    def run_command(self, text: str, turn: int | None = None, timeout_s: float | None = None) -> dict:
        """Run one command (a keystroke batch or one bash tool call) and record its effects."""
        index = len(self.commands)
        if not self.shell.alive():
            self.errors.append(f"the shell had exited; restarted before command {index} (background processes lost)")
            self._start_shell()
        result = self.shell.run_marked(text, timeout_s=timeout_s or self.config.command_timeout_s)
        self.timings["commands_s"] += result.duration_s
        self._feed_trace()
        effects = self.parser.summary(index)
        self._parser_of[index] = self.parser
        record = {
            "index": index, "turn": index if turn is None else turn, "text": text,
            "observation": truncate_observation(result.output), "exit_code": result.exit_code,
            "timed_out": result.timed_out, "duration_s": round(result.duration_s, 4),
            **self._effects_record(effects),
        }
        if result.recovery:
            record["recovery"] = result.recovery
        if not self.shell.alive():
            self.errors.append(f"the shell exited during command {index} ({text[:80]!r})")
        self.commands.append(record)
        self._save()
        return record

    def _effects_record(self, fx) -> dict:
        renamed_to = {dst for _, dst in fx.renamed}
        traced_writes = fx.opened_for_write | fx.created | renamed_to
        untraced = {p for p in self._walk.changes() if self._keep_path(p)} - traced_writes - fx.deleted \
            - {src for src, _ in fx.renamed}
        writes, deletions = [], set(fx.deleted) | {src for src, _ in fx.renamed}
        for path in sorted(traced_writes | untraced):
            before = self._cache.get(path, MISSING)
            after = read_version(self.layout, path)
            if after is None:
                continue  # lives where the harness cannot read (untracked); the trace still has the read side
            if not after.exists:
                if before.exists:
                    deletions.add(path)
                self._cache[path] = after
                continue
            changed = after.hash != before.hash or not before.exists
            truncated = path in fx.truncated
            if not (changed or truncated) or after.hash == "dir":
                self._cache[path] = after
                continue
            writes.append({"path": path, "created": not before.exists, "text": after.lines is not None,
                           "lines_written": lines_written(before, after, full_rewrite=truncated),
                           "content_after": after.lines, "hash_after": after.hash})
            self._cache[path] = after
            self._agent_written.add(path)
        for path in deletions:
            self._cache[path] = MISSING
            self._agent_written.add(path)
        # A background job may exec its program after the marker: names are refreshed from the parser later.
        for proc in [*fx.spawned, *fx.killed, *fx.probed, *self.parser.alive_processes()]:
            self._process_names[proc.pid] = proc.name
        probed = [p for p in fx.probed if p.owner != len(self.commands)]  # `ps` seeing its own pipeline: no probe
        def relevant(path: str) -> bool:
            # Every program reads /etc (ld.so.cache, nsswitch.conf, ...): such a read matters only for a file
            # that an agent command wrote (copy-on-write), since only then can it carry a dependency.
            return not path.startswith("/etc/") or path in self._agent_written

        return {
            "reads": sorted(filter(relevant, fx.reads | fx.executed)),
            "stats": sorted(filter(relevant, fx.stats | fx.missing | fx.listed)),
            "writes": writes, "deletions": sorted(deletions),
            "ports_bound": sorted(fx.ports_bound), "ports_connected": sorted(fx.ports_connected),
            "processes_started": [{"pid": p.pid, "name": p.name, "alive_after": True} for p in fx.spawned],
            "processes_killed": [{"pid": p.pid, "name": p.name, "owner": p.owner} for p in fx.killed],
            "processes_probed": [{"pid": p.pid, "name": p.name, "owner": p.owner} for p in probed],
            "untraced_changes": sorted(untraced),
        }

    # ---------------------------------------------------------------- verifier
    def verify(self) -> dict:
        """Run the task's verifier in the same traced sandbox; record E, reward and the final state."""
        t0 = time.monotonic()
        self.final = self._final_files()
        error = None
        output, exit_code = "", None
        effects = None
        if not self.shell.alive():
            self.errors.append("the shell had exited; the verifier ran in a restarted one (agent processes gone)")
            self._start_shell()
        try:
            self._install_verifier_files()
            self._feed_trace()  # what background processes did until now belongs to the agent's segments
            self.parser.begin_verifier()
            timeout = self.config.verifier_timeout_s or self.task.verifier_timeout_s
            result = self.shell.run_marked(_verifier_command(self.task, self.layout), timeout_s=timeout)
            output, exit_code = result.output, result.exit_code
            if result.timed_out:
                error = f"verifier timed out after {timeout}s"
            self._feed_trace()
            effects = self.parser.summary("verifier")
        except Exception as e:  # a crashing harness step must still leave a trajectory behind
            error = f"verifier failed to run: {type(e).__name__}: {e}"
        E_detail, E_source = [], "none"
        if effects is not None:
            E_detail = inspection_set(effects, self._agent_written, self._process_names, self.layout.workdir)
            E_source = "trace" if E_detail else "none"
        if not E_detail:
            E_detail = static_inspection_set([host for host, _ in self.task.verifier_files])
            E_source = "static" if E_detail else "none"
        self._add_E_files_to_final(E_detail)
        self._final_processes()
        logs = lambda name: read_text(self.layout, f"/logs/verifier/{name}")  # noqa: E731
        reward = compute_reward(logs("reward.json"), logs("reward.txt"), output, exit_code, self.task.test_weights,
                                logs("junit.xml"))
        self.verifier = {
            "E": [d["record"] for d in E_detail], "E_detail": E_detail, "E_source": E_source,
            "reward": reward.value, "reward_source": reward.source, "tests": reward.tests,
            "exit_code": exit_code, "output": truncate_observation(output),
            "duration_s": round(time.monotonic() - t0, 4), "error": error or reward.error,
        }
        self.timings["verifier_s"] = time.monotonic() - t0
        self._save()
        return self.verifier

    def _install_verifier_files(self) -> None:
        """Copy the verifier's files under /tests (a read-only mount that stays empty while the agent works)."""
        for host_path, sandbox_path in self.task.verifier_files:
            target = self.layout.tests_dir / os.path.relpath(sandbox_path, "/tests")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(host_path, target)

    def _final_files(self) -> dict:
        """Tracked files as the verifier found them (taken before it runs: it may write files itself)."""
        files = {}
        for path in sorted(self._agent_written):
            v = self._cache.get(path, MISSING)
            files[path] = {"exists": v.exists, "hash": v.hash, "lines": v.lines}
        return {"files": files}

    def _final_processes(self) -> None:
        """Agent processes alive and ports listening at verification. Read once the verifier has run, so that a
        server started by the last command (which binds after its command returned) is seen as the verifier
        saw it; agent processes owned by the verifier segment do not exist."""
        alive = [p for p in self.parser.alive_processes() if isinstance(p.owner, int)]
        for proc in alive:
            self._process_names.setdefault(proc.pid, proc.name)
        self.final["alive_processes"] = [{"pid": p.pid, "name": p.name, "owner": p.owner} for p in alive]
        self.final["listening_ports"] = [{"port": port, "owner": owner}
                                         for port, owner in self.parser.listening_ports() if isinstance(owner, int)]

    def _add_E_files_to_final(self, E_detail: list[dict]) -> None:
        for d in E_detail:
            path = d["record"]
            if path.startswith("/") and path not in self.final["files"]:
                v = self._cache.get(path) or read_version(self.layout, path) or MISSING
                self.final["files"][path] = {"exists": v.exists, "hash": v.hash, "lines": v.lines}

    # ---------------------------------------------------------------- output
    def _refresh_background_effects(self) -> None:
        """A background server binds its port and execs its program after its command's marker: update them."""
        for command in self.commands:
            if command["processes_started"]:
                parser = self._parser_of[command["index"]]
                command["ports_bound"] = sorted(parser.summary(command["index"]).ports_bound)
            for proc in command["processes_started"]:
                proc["name"] = self._process_names.get(proc["pid"], proc["name"])

    def trajectory(self) -> dict:
        E = self.verifier["E"] if self.verifier else []
        e_dirs = sorted({os.path.dirname(r) for r in E if r.startswith("/")})
        workdir = self.layout.workdir if hasattr(self, "layout") else self.task.workdir  # an image's WORKDIR wins
        tracked = [workdir] + [d for d in e_dirs if not d.startswith(workdir.rstrip("/") + "/") and d != workdir]
        timings = {k: round(v, 4) for k, v in self.timings.items()}
        timings["total_s"] = round(sum(v for k, v in self.timings.items() if k != "parse_s"), 4)
        return {
            "schema_version": SCHEMA_VERSION,
            "task": {"id": self.task.id, "path": str(self.task.root), "format": self.task.format},
            "instruction": self.task.instruction, "workdir": workdir, "tracked_roots": tracked,
            "source": "traced", "commands": self.commands, "verifier": self.verifier, "final": self.final,
            "timings": timings, "errors": self.errors,
        }

    def _save(self) -> None:
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._refresh_background_effects()
        tmp = self.out_dir / "trajectory.json.tmp"
        tmp.write_text(json.dumps(self.trajectory(), indent=1))
        tmp.replace(self.out_dir / "trajectory.json")


def _verifier_command(task: Task, layout: SandboxLayout) -> str:
    """The verifier runs from a clean environment (not the agent's shell variables, aliases or cwd)."""
    env = {"PATH": SANDBOX_PATH, "HOME": "/root", "LANG": "C.UTF-8", **layout.env, **task.verifier_env}
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    script = f"cd {shlex.quote(layout.workdir)} && {offline_test_command(task, layout.workdir)}"
    # /bin/bash: there in merged-/usr images and in those that keep /bin (Debian 11); /usr/bin/env in both.
    return (f"\\unalias -a 2>/dev/null; /usr/bin/env -i {assignments} /bin/bash --norc --noprofile "
            f"-c {shlex.quote(script)} </dev/null")

