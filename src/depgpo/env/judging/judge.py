"""The verifier as its own process tree: the judge stands apart from the agent (docs/threat-model.md).

The agent's chain lives in pid namespace P2; the verifier is started by the harness with `nsenter` into the
episode's M1 (the overlays) and P1 (P2's parent, where agent processes are visible and the reverse is not) and the
agent's network namespace (so it can reach the servers the agent left running), under its own strace, with /tests
and /logs mounted in its own bwrap alone (sandbox.verifier_argv). The reward directory is new for every run; a run
that times out is killed and reports an error, whatever it left on disk.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from depgpo.env.judging.startup_reads import VerifierTraceParser
from depgpo.env.sandbox.chain import chain_env
from depgpo.env.sandbox.layout import SandboxLayout, SandboxLimits, verifier_argv
from depgpo.env.sandbox.shell import ShellSession, _descendants, wait_exit
from depgpo.env.sandbox.spawn import joined, spawn
from depgpo.env.tracing.strace_flags import MARK_DIR
from depgpo.env.tracing.trace_state import PATH_KINDS, RECORD_KINDS, ProcInfo, SegmentEffects


@dataclass
class VerifierRun:
    output: str                # its stdout and stderr, at most output_limit bytes
    exit_code: int | None      # None when it timed out
    error: str | None          # timed out, or could not be started: the reward is then 0
    effects: SegmentEffects    # from its own trace, every path kept; agent processes under their agent pids
    trace: Path                # its own strace log
    mark: str                  # the trace path its script's first line looked up: where its own events begin
    startup_reads: set[str] = field(default_factory=set)  # paths only its tools' start-up read (startup_reads.py)
    chain_error: str = ""      # what its chain (nsenter, strace) said on stderr: why it did not start, if it did not
    duration_s: float = 0.0
    agent_alive: int = 0       # agent processes alive when it started, beside it
    agent_cpu_s: float = 0.0   # CPU time those used while it ran (what starves it: judging/verdict.py)
    cpus: int = 1              # the CPUs the episode may use (it is pinned to one, or the harness's)

    def inspected(self, keep) -> SegmentEffects:
        """Its effects as E sees them: the paths `keep` accepts, less its tools' start-up reads. Tampering reads
        `effects`, all of them."""
        return kept_effects(self.effects, lambda path: keep(path) and path not in self.startup_reads)


def run_verifier(layout: SandboxLayout, limits: SandboxLimits, shell: ShellSession, cgroups: list[Path],
                 env: dict[str, str], command: str, timeout: float, output_limit: int,
                 agent_processes: list[ProcInfo]) -> VerifierRun:
    """Run `command` as the episode's verifier, wait at most `timeout`, kill what is left of it, parse its trace."""
    logs = layout.verifier_logs
    if os.path.lexists(logs):  # only an earlier verifier (and agent code its tests ran) wrote here: any depth
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(logs)], capture_output=True)
    (logs / "verifier").mkdir(parents=True)
    layout.give_to_episode([logs])
    p1_init, agent_shell = _namespace_pids(shell)
    # The mark cuts the verifier's trace where its script starts: what nsenter, setpriv and bwrap did before
    # (opening the host-side bind sources) is not the verifier's.
    nonce = secrets.token_hex(8)
    script = f"test -e {MARK_DIR}/-1/0/{nonce}; {command}"
    out_path, trace = layout.root / "verifier-output.log", layout.traces / "verifier-trace.log"
    net_fd = os.open(f"/proc/{agent_shell}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    err_path = layout.root / "verifier-strace.err"
    try:
        argv = verifier_argv(layout, limits, p1_init, net_fd, trace, env, script)
        agents = _agent_processes(p1_init)  # before it starts: none of them is the verifier's
        cpu_before, t0 = _cpu_ticks(agents), time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = spawn(joined(cgroups, argv), limits.cpu, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                         pass_fds=(net_fd,), start_new_session=True, cwd="/", env=chain_env())
        error, exit_code = None, None
        try:
            exit_code = wait_exit(proc, timeout)
        except subprocess.TimeoutExpired:
            error = f"verifier timed out after {timeout}s"
        duration, agent_cpu = time.monotonic() - t0, _cpu_used_s(cpu_before, agents)
        _kill_tree(proc)
    finally:
        os.close(net_fd)
    with open(out_path, "rb") as fh:
        output = fh.read(output_limit).decode("utf-8", "replace")
    with open(err_path, "rb") as fh:
        chain_error = fh.read(4096).decode("utf-8", "replace")
    pid_map = {p2: p1 for p2, p1 in agents.values()}
    effects, startup_reads = _parse_trace(trace, nonce, pid_map, agent_processes, env.get("HOME") or "/root",
                                          layout.workdir)
    return VerifierRun(output, exit_code, error, effects, trace, f"{MARK_DIR}/-1/0/{nonce}", startup_reads,
                       chain_error, round(duration, 4), len(agents), round(agent_cpu, 2),
                       1 if limits.cpu is not None else len(os.sched_getaffinity(0)))


def _namespace_pids(shell: ShellSession) -> tuple[int, int]:
    """Host pids of P1's init (sandbox_init) and of the agent's interactive shell (for its network namespace)."""
    outer = shell.proc.pid
    children = Path(f"/proc/{outer}/task/{outer}/children").read_text().split()
    if not children:
        raise RuntimeError("the sandbox's init process is gone")
    agent = shell.shell_pid()
    if agent is None:
        raise RuntimeError("the agent's shell is gone")
    return int(children[0]), agent


def _agent_processes(p1_init: int) -> dict[int, tuple[int, int]]:
    """Host pid of each agent process -> (its pid in the agent's trace, namespace P2; its pid in P1, the verifier's)."""
    mapping = {}
    for pid in _descendants(p1_init):
        try:
            with open(f"/proc/{pid}/status") as fh:
                nspid = next(line for line in fh if line.startswith("NSpid:")).split()[1:]
        except (OSError, StopIteration):
            continue
        if len(nspid) == 3:  # host, P1, P2: an agent process
            mapping[pid] = (int(nspid[2]), int(nspid[1]))
    return mapping


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pids) -> dict[int, int]:
    """CPU time (user + system, in clock ticks) each live process among `pids` has used."""
    ticks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            ticks[pid] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        except (OSError, IndexError, ValueError):
            continue
    return ticks


def _cpu_used_s(before: dict[int, int], pids) -> float:
    """CPU seconds the processes of `before` used since, those still alive (what exited meanwhile is not counted)."""
    after = _cpu_ticks(pids)
    return sum(max(0, t - before[pid]) for pid, t in after.items() if pid in before) / _TICK


def _parse_trace(path: Path, nonce: str, pid_map: dict[int, int], agent_processes: list[ProcInfo], home: str,
                 workdir: str) -> tuple[SegmentEffects, set[str]]:
    """The verifier's own trace from its script's mark on (segment 0), every path kept: tampering looks in system
    directories too. Probes and kills of agent processes are reported under their agent pids. With the effects, the
    paths that only its tools' start-up read (startup_reads.py)."""
    parser = VerifierTraceParser(home, workdir, untracked_prefixes=(), valid_marks={f"-1/{nonce}"})
    for proc in agent_processes:
        if proc.pid in pid_map:
            parser.adopt_process(pid_map[proc.pid], proc.name, proc.owner)
    if path.exists():
        with open(path, "rb") as fh:
            for line in fh:  # whole lines: a multi-byte name is never split between two decodes
                parser.feed(line.decode("utf-8", "surrogateescape"))
    effects = parser.summary(0)
    reverse = {v: k for k, v in pid_map.items()}  # the verifier's own processes are no agent's
    effects.probed = [replace(p, pid=reverse[p.pid]) for p in effects.probed if p.pid in reverse]
    effects.killed = [replace(p, pid=reverse[p.pid]) for p in effects.killed if p.pid in reverse]
    return effects, parser.startup_reads()


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the verifier's session and every process still below it (its strace, bwrap, tests)."""
    for pid in reversed(_descendants(proc.pid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        wait_exit(proc, timeout=10)
    except subprocess.TimeoutExpired:
        pass


def kept_effects(effects: SegmentEffects, keep) -> SegmentEffects:
    """`effects` with only the paths `keep` accepts (the episode's tracked scope), as the agent's parser keeps."""
    return replace(effects, **{kind: {p for p in getattr(effects, kind) if keep(p)} for kind in PATH_KINDS})


def merged_effects(a: SegmentEffects, b: SegmentEffects) -> SegmentEffects:
    merged = SegmentEffects(**{kind: getattr(a, kind) | getattr(b, kind) for kind in RECORD_KINDS})
    merged.probed, merged.killed = [*a.probed, *b.probed], [*a.killed, *b.killed]
    return merged
