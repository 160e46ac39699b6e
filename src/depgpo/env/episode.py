"""One sandboxed, traced episode of a task: commands in, `trajectory.json` out (docs/trajectory-schema.md).

    with Episode(task, EpisodeConfig(), out_dir) as ep:
        ep.run_command("echo 63841 > /app/answer.txt", turn=0)
        ep.verify()
    # each command's record is appended to out_dir/commands.partial.jsonl as it ends (nothing computed is lost
    # on a crash); trajectory.json is written once, when the episode closes.

No command ends the harness: whatever a command does, run_command returns its record. Should the harness itself
fail on one (a bug, a full host disk), the episode ends there: the error and the command are recorded, the trajectory
is written with reward 0, and HarnessFailure tells the caller (the agent loop records a failed rollout and goes on).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

from depgpo.env.images import verifier_tools
from depgpo.env.images.backend import DEFAULT_CACHE, DEFAULT_WHEELS, system_root_for
from depgpo.env.judging.judge import merged_effects, run_verifier
from depgpo.env.judging.tampering import TAMPERING_POLICIES, Provenance, find_tampering
from depgpo.env.judging.verdict import verdict
from depgpo.env.judging.verifier import compute_reward, inspected_records, install_verifier_files, read_verifier_file
from depgpo.env.judging.verifier_processes import VerifierProcesses
from depgpo.env.sandbox.cpu_slots import Placement
from depgpo.env.sandbox.file_hash import HashBudget, is_unhashed, unhashed_notes
from depgpo.env.sandbox.filestate import StatWalk, lines_written, read_version
from depgpo.env.sandbox.judge_view import agent_visible, checked_view, judge_layout, prepare_view
from depgpo.env.sandbox.layout import (BASE_ENV, LIVE_LOCK, SandboxLayout, SandboxLimits, launcher_argv,
    remove_layout, sweep_leftovers)
from depgpo.env.sandbox.privilege import VERIFIER_CGROUPS, owned_private_dir, resolve
from depgpo.env.sandbox.seed import seed_files
from depgpo.env.sandbox.shell import ShellSession, truncate_observation
from depgpo.env.sandbox.spawn import joined
from depgpo.env.sandbox.tree_walk import skip_notes
from depgpo.env.tracing.trace_log import TraceLog
from depgpo.env.tracing.trace_parser import TraceParser
from depgpo.env.tracing.trace_state import SegmentEffects
from depgpo.env.tracing.trace_syntax import FAST_SKIP_PREFIXES
from depgpo.tasks import Task, offline_test_command
from depgpo.trajectory.schema import (MISSING, CommandEffects, CommandRecord, FileVersion, Trajectory, make_trajectory,
    unverified)
from depgpo.trajectory.scope import is_record_path, tracked_roots


class HarnessFailure(RuntimeError):
    """The harness (not the agent's command) failed; the episode has ended and its trajectory is written."""


_swept: set[Path] = set()  # work roots whose leftovers this process has already swept


@dataclass
class EpisodeConfig:
    command_timeout_s: float = 60.0
    verifier_timeout_s: float | None = None   # None: the task's own
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    work_root: Path | None = None              # None: /tmp/depgpo-episodes (root), /tmp/depgpo-episodes-UID
    privilege: str = "auto"                    # root | rootless | auto (root when the harness is): privilege.py
    keep_sandbox: bool = False                 # keep the host directories after close (debugging)
    backend: str = "auto"                      # system directories: host | image (the task's container image) |
    #                                            auto (the host where it stands for the image exactly: images.py)
    runtime: str = "auto"                      # image backend: auto | podman | docker | apptainer | singularity
    image_cache: Path = DEFAULT_CACHE          # image backend: unpacked images, one directory per image id
    wheel_cache: Path = DEFAULT_WHEELS         # wheels (and uv) that builds and verifiers install offline
    tampering: str = "zero"                    # what a trajectory whose verifier ran agent-planted code earns:
    #                                            zero (reward 0, the reason recorded) | keep (recorded only)
    output_limit_bytes: int = 20 << 20         # verifier output read back (the observation is cut much shorter)
    verifier_view: str = "task"                # what of the agent's work the verifier sees: image (its workdir
    #                                            only) | full (everything) | task (the task's [verifier] view)

    def __post_init__(self) -> None:
        privilege = resolve(self.privilege)  # refused here, before anything is made, where it cannot work
        self.work_root = Path(self.work_root) if self.work_root is not None else privilege.default_work_root()
        if self.tampering not in TAMPERING_POLICIES:
            raise ValueError(f"agent.environment.tampering={self.tampering!r}: choose one of "
                             f"{', '.join(TAMPERING_POLICIES)}")
        if self.verifier_view != "task":
            checked_view(self.verifier_view, "agent.environment.verifier_view")


class Episode:
    def __init__(self, task: Task, config: EpisodeConfig | None = None, out_dir: Path | None = None):
        self.task, self.config = task, config or EpisodeConfig()
        self.out_dir = Path(out_dir) if out_dir else None
        self.commands: list[CommandRecord] = []
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
        self._noted: set[str] = set()                 # directories a walk could not list, already in errors
        self.failed = False                           # a harness failure ended the episode
        self._closed = False
        self.placement = Placement()                  # the CPU its processes run on (cpu_slots.py)

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Episode":
        try:
            self.start()
        except BaseException as e:  # release the uid, cgroups and directories; the record says why
            self.record_failure("episode failed to start", e)
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            self.errors.append("episode aborted: " + "".join(traceback.format_exception_only(exc[0], exc[1])).strip())
        self.close()

    def start(self) -> None:
        t0 = time.monotonic()
        self.privilege = resolve(self.config.privilege)
        work_root = owned_private_dir(self.config.work_root, 0o711)
        self.privilege.check_work_root(work_root)
        if work_root not in _swept:  # episode directories and cgroups of harnesses that were killed
            _swept.add(work_root)
            sweep_leftovers(work_root)
        self.system = system_root_for(self.task, self.config.backend, self.config.runtime, self.config.image_cache,
                                      self.config.wheel_cache)
        self._lease = self.privilege.lease_uid()
        self.placement = Placement.of(self.config.limits.cpu, self.config.limits.pin)  # given back by close()
        root = Path(tempfile.mkdtemp(prefix=f"{self.task.id[:40]}-", dir=work_root))
        self._live_lock = os.open(root / LIVE_LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._live_lock, fcntl.LOCK_EX)  # released by close() or by this process's death
        limits = self.config.limits
        self._namespaces = self.privilege.open_namespaces(root, (limits.disk_bytes, limits.disk_inodes),
                                                          limits.trace_bytes)
        self.layout = SandboxLayout(root=root, workdir=self.system.workdir or self.task.workdir,  # the image's wins
                                    uid=self._lease.uid, system_root=self.system.path,
                                    env={**self.system.env, **self.task.env}, privilege=self.privilege,
                                    namespaces=self._namespaces,
                                    hashing=HashBudget(limits.hash_file_bytes, limits.hash_episode_bytes))
        if not self.system.is_host:  # the host's secrets are not in an image; masking them there would add files
            self.layout.masked_files, self.layout.masked_dirs = (), ()
        self.layout.prepare()
        self.errors += seed_files(self.layout, self.system, self.task)
        self.judge = judge_layout(self.layout, self.task.verifier_view if self.config.verifier_view == "task"
                                  else self.config.verifier_view)  # what the verifier will see: judge_view.py
        if self.judge is not self.layout:  # its own homes, seeded as the agent's were
            prepare_view(self.judge)
            self.errors += seed_files(self.judge, self.system, self.task)
        self._cgroups = self.privilege.cgroups(root, limits)
        self._verifier_cgroups = self.privilege.cgroups(root, limits, VERIFIER_CGROUPS)  # a budget of its own
        self._start_shell()
        self._walk = StatWalk(self.layout)
        self._walk.changes()
        self._snapshot_initial_files()
        self.timings["setup_s"] = time.monotonic() - t0

    def _keep_path(self, path: str) -> bool:
        return is_record_path(path, self.layout.workdir)

    def _start_shell(self) -> None:
        """Start (or, after the agent killed its shell, restart) the traced shell; files persist, processes not."""
        if self.shell is not None:
            self.shell.close()
            self._feed_trace()
        # /etc stays parsed: commands can write there (copy-on-write) and verifiers read configs from it.
        # A workdir under /usr or /opt (an image's WORKDIR /usr/src/app) is tracked like /app: its prefix stays parsed.
        skipped = tuple(p for p in FAST_SKIP_PREFIXES if not (self.layout.workdir + "/").startswith(p))
        self._shell_starts += 1
        self.layout.trace_name = f"trace-{self._shell_starts}.log"
        self.shell = ShellSession(joined(self._cgroups.dirs, launcher_argv(self.layout, self.config.limits)),
                                  cpu=self.placement.cpu, first_command=len(self.commands))
        self.parser = TraceParser(keep_path=self._keep_path, untracked_prefixes=skipped,
                                  valid_marks=self.shell.valid_marks)
        self._trace = TraceLog(self.layout.trace_log, self.layout.traces, self.config.limits.trace_bytes, self.parser)
        self._feed_trace()

    def _snapshot_initial_files(self) -> None:
        for path in self._walk.seen:
            version = read_version(self.layout, path)
            if version is not None:
                self._cache[path] = version
        self._initial_hashes = {path: version.hash for path, version in self._cache.items()}  # the task's files

    def close(self) -> None:
        if self.shell is not None:
            self.shell.close()
            try:
                self._feed_trace()
            except Exception as e:
                self.errors.append(f"harness: reading the last of the trace failed: {type(e).__name__}: {e}")
        if hasattr(self, "_namespaces"):
            if self.config.keep_sandbox and self._namespaces.view:  # rootless: the tmpfs goes with its holder
                subprocess.run(["cp", "-a", str(self.layout.fs), str(self.layout.root / "fs-kept")], capture_output=True)
            try:
                survivors = self.privilege.reap(self._lease.uid, self._namespaces)
            except OSError as e:  # the lease, directories and lock below are released all the same
                survivors = 0
                self.errors.append(f"harness: ending the episode's processes failed: {e}")
            if survivors:
                self.errors.append(f"{survivors} processes of the episode outlived its sandbox; killed")
        if hasattr(self, "layout"):
            self.errors += unhashed_notes(self.layout.hashing)
        self._save()  # after the reaping, whose findings it records
        for cgroups in (getattr(self, "_cgroups", None), getattr(self, "_verifier_cgroups", None)):
            if cgroups is not None:
                cgroups.remove()
        if hasattr(self, "_lease"):
            self._lease.release()
        self.placement.release()
        if hasattr(self, "layout") and not self.config.keep_sandbox:
            remove_layout(self.layout)
        if hasattr(self, "_live_lock"):
            os.close(self._live_lock)
            del self._live_lock
        self._closed = True

    # ---------------------------------------------------------------- commands
    def _feed_trace(self) -> None:
        t0 = time.monotonic()
        try:
            self._trace.feed()
        finally:
            self.timings["parse_s"] += time.monotonic() - t0

    def run_command(self, text: str, turn: int | None = None, timeout_s: float | None = None) -> dict:
        """Run one command (a keystroke batch or one bash tool call) and record its effects. Raises only
        HarnessFailure (after recording it): the episode has then ended."""
        if self.failed:
            raise HarnessFailure("the episode already ended on a harness failure: " + self.errors[-1])
        try:
            return self._run_command(text, turn, timeout_s)
        except Exception as e:
            self.record_failure(f"harness failed on command {len(self.commands)} ({text[:80]!r})", e)
            self.commands.append({"index": len(self.commands), "turn": len(self.commands) if turn is None else turn,
                                  "text": text, "observation": "", "exit_code": None, "timed_out": False,
                                  "duration_s": 0.0, "harness_error": f"{type(e).__name__}: {e}",
                                  **self._effects_record(SegmentEffects(), walk=False)})
            raise HarnessFailure(self.errors[-1]) from e

    def record_failure(self, what: str, e: BaseException) -> None:
        """End the episode on a harness failure: reward 0, the reason recorded (and saved, if already closed)."""
        if self.failed:
            return
        self.failed = True
        self.errors.append(f"{what}: {type(e).__name__}: {e}")
        self.verifier = unverified([], f"episode ended by a harness failure: {type(e).__name__}: {e}", reward=0.0,
                                   reward_source="error", duration_s=0.0, tampering=[])
        if self._closed:
            self._save()

    def _run_command(self, text: str, turn: int | None, timeout_s: float | None) -> dict:
        index = len(self.commands)
        self._namespaces.check()
        if not self.shell.alive():
            self.errors.append(f"the shell had exited; restarted before command {index} (background processes lost)")
            self._start_shell()
        result = self.shell.run_marked(text, timeout_s=timeout_s or self.config.command_timeout_s)
        self.timings["commands_s"] += result.duration_s
        self._feed_trace()
        effects = self.parser.summary(index)
        self._parser_of[index] = self.parser
        record: CommandRecord = {
            "index": index, "turn": index if turn is None else turn, "text": text,
            "observation": truncate_observation(result.output, omitted=result.omitted_bytes),
            "exit_code": result.exit_code,
            "timed_out": result.timed_out, "duration_s": round(result.duration_s, 4),
            **self._effects_record(effects),
        }
        if result.recovery:
            record["recovery"] = result.recovery
        if not self.shell.alive():
            self.errors.append(f"the shell exited during command {index} ({text[:80]!r})")
        full = self._disk_full()
        if full:
            record["disk_limit"] = full
            self.errors.append(f"command {index} reached the episode's disk limit ({full})")
        self.commands.append(record)
        self._append_partial(record)
        return record

    def _disk_full(self) -> str | None:
        """'bytes' or 'inodes' when the episode's tmpfs is (nearly) full after a command, else None."""
        try:
            st = os.statvfs(self.layout.fs)
        except OSError:
            return None
        if st.f_blocks and st.f_bavail * st.f_frsize < 1 << 20:
            return f"bytes: {self.config.limits.disk_bytes}"
        if st.f_files and st.f_favail < 16:
            return f"inodes: {self.config.limits.disk_inodes}"
        return None

    def _effects_record(self, fx: SegmentEffects, walk: bool = True) -> CommandEffects:
        renamed_to = {dst for _, dst in fx.renamed}
        traced_writes = fx.opened_for_write | fx.created | fx.dirs_created | renamed_to
        changed = self._walk.changes() if walk else set()
        self.errors += skip_notes(self._walk.skipped, self._noted, "the stat walk of the writable directories")
        untraced = {p for p in changed if self._keep_path(p)} - traced_writes - fx.deleted \
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
            changed = after.hash != before.hash or not before.exists or is_unhashed(after.hash)  # cannot tell
            truncated = path in fx.truncated
            if not (changed or truncated):  # a directory made (mkdir, renamed onto) is a write too
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
            "reads_after_write": sorted(filter(relevant, fx.reads_after_write)),
        }

    # ---------------------------------------------------------------- verifier
    def verify(self) -> dict:
        """Run the task's verifier as its own process tree (sandbox.verifier_argv): it sees the agent's files and
        servers, the agent cannot see it, /tests or /logs. Record E, the reward, tampering and the final state."""
        if self.failed:
            return self.verifier
        try:
            return self._verify()
        except Exception as e:
            self.record_failure("harness failed while verifying", e)
            return self.verifier

    def _verify(self) -> dict:
        t0 = time.monotonic()
        self._namespaces.check()
        self.final = self._final_files()
        if not self.shell.alive() or self.shell.shell_pid() is None:  # (its bash killed by a command's recovery)
            self.errors.append("the shell had exited; the verifier ran beside a restarted one (agent processes gone)")
            self._start_shell()
        install_verifier_files(self.task, self.layout.tests_dir)
        self._feed_trace()  # what background processes did until now belongs to the agent's segments
        self.parser.begin_verifier()
        timeout = self.config.verifier_timeout_s or self.task.verifier_timeout_s
        agent_processes = self.parser.alive_processes()
        for proc in agent_processes:
            self._process_names.setdefault(proc.pid, proc.name)
        env = {**BASE_ENV, "TERM": "dumb", **self.layout.env, **self.task.verifier_env}
        if not self.judge.view:  # it sees the agent's system directories: what of them is the agent's, before it
            unwalked = self.layout.record_agent_upper()  # writes there too
            self.errors += skip_notes(unwalked, self._noted, "the walk of the upper layers (counted as the agent's)")
        tools = verifier_tools.for_verifier(self.task, self.config.wheel_cache, self.config.work_root / "tools",
                                            env.get("HOME") or "/root", self.system.is_host)
        self.judge.verifier_binds, env = tools.binds, {**env, **tools.env}
        self.errors += tools.errors
        # Harbor's test.sh runs as written; TB1's run-tests.sh needs helpers TB1 does not ship (tasks.task).
        command = self.task.test_command if self.task.format == "harbor" else \
            tools.tb1_setup + offline_test_command(self.task, self.layout.workdir, tools.tb1_python)
        limits = replace(self.config.limits, cpu=self.placement.cpu)  # the verifier runs where the agent did
        run = run_verifier(self.judge, limits, self.shell, self._verifier_cgroups.dirs,
                           env, command, timeout, self.config.output_limit_bytes, agent_processes)
        self._feed_trace()  # what agent processes did while the verifier ran (a server answering it)
        own = run.effects  # all of it for tampering; for E, less its tools' start-up reads (judging/startup_reads.py)
        agent_during = self.parser.summary("verifier")  # agent processes' events while it ran: always the agent's
        seen = run.inspected(lambda p: self._keep_path(p) and agent_visible(self.judge, p))  # of the agent's work
        effects = merged_effects(agent_during, seen)
        provided = tuple(inside for _, inside in self.judge.verifier_binds)  # the harness's tools, not agent work
        E_detail, E_source = inspected_records(effects, self._agent_written, self._process_names, self.layout.workdir,
                                               run.output, provided, [host for host, _ in self.task.verifier_files])
        self._add_E_files_to_final(E_detail)
        self._final_processes()
        work = Provenance.of(self._initial_hashes, self.final["files"], agent_during)
        processes = VerifierProcesses(run.trace, run.mark, run.exit_code, self.judge, work, self.system.path)
        work = replace(work, during=work.during | processes.agent_code_wrote)  # agent code the verifier ran wrote
        tampering = find_tampering(own, self.judge, work, self.system.path) + processes.findings
        logs = lambda name: read_verifier_file(self.layout.verifier_logs, name)  # noqa: E731
        reward = compute_reward(logs("reward.json"), logs("reward.txt"), run.output, run.exit_code,
                                self.task.test_weights, logs("junit.xml"), require_reward_file=self.task.format == "harbor")
        value, source, error = verdict(run, processes, reward, tampering, self.config.tampering)
        self.verifier = {
            "E": [d["record"] for d in E_detail], "E_detail": E_detail, "E_source": E_source,
            "reward": value, "reward_source": source, "tests": reward.tests, "tampering": tampering,
            "exit_code": run.exit_code, "output": truncate_observation(run.output),
            "duration_s": round(time.monotonic() - t0, 4), "error": error,
            "view": "image" if self.judge.view else "full"}
        if source == "tampering":
            self.verifier["reward_before_tampering"] = reward.value
        self.timings["verifier_s"] = time.monotonic() - t0
        return self.verifier

    def _final_files(self) -> dict:
        """Tracked files as the verifier found them (taken before it runs: it may write files itself)."""
        files = {}
        for path in sorted(self._agent_written):
            v = self._cache.get(path, MISSING)
            files[path] = v.as_final()
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
                self.final["files"][path] = v.as_final()

    # ---------------------------------------------------------------- output
    def _refresh_background_effects(self) -> None:
        """A background server binds its port and execs its program after its command's marker: update them."""
        for command in self.commands:
            if command["processes_started"]:
                parser = self._parser_of[command["index"]]
                command["ports_bound"] = sorted(parser.summary(command["index"]).ports_bound)
            for proc in command["processes_started"]:
                proc["name"] = self._process_names.get(proc["pid"], proc["name"])

    def trajectory(self) -> Trajectory:
        E = self.verifier["E"] if self.verifier else []
        workdir = self.layout.workdir if hasattr(self, "layout") else self.task.workdir  # an image's WORKDIR wins
        timings = {k: round(v, 4) for k, v in self.timings.items()}
        timings["total_s"] = round(sum(v for k, v in self.timings.items() if k != "parse_s"), 4)
        return make_trajectory(
            task={"id": self.task.id, "path": str(self.task.root), "format": self.task.format},
            instruction=self.task.instruction, workdir=workdir, tracked_roots=tracked_roots(workdir, E),
            source="traced", commands=self.commands, verifier=self.verifier, final=self.final,
            timings=timings, errors=self.errors,
            environment=self._environment_record())

    def _environment_record(self) -> dict | None:
        if not hasattr(self, "system"):
            return None
        record = {**self.system.as_record(), "privilege": self.privilege.name, "cpu": self.placement.cpu}
        record["notes"] = [*record["notes"], *self.privilege.notes(self.system.is_host)]
        return record

    def _save(self) -> None:
        """trajectory.json, written once at the end (and the per-command partial file removed)."""
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._refresh_background_effects()
        tmp = self.out_dir / "trajectory.json.tmp"
        tmp.write_text(json.dumps(self.trajectory(), indent=1))
        tmp.replace(self.out_dir / "trajectory.json")
        (self.out_dir / "commands.partial.jsonl").unlink(missing_ok=True)

    def _append_partial(self, record: dict) -> None:
        """Each command's record as it ends: what a killed harness leaves behind (O(1) per command)."""
        if self.out_dir is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / "commands.partial.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")
