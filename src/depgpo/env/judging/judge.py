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
import shutil
import signal
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from depgpo.env.judging.startup_reads import VerifierTraceParser
from depgpo.env.sandbox.layout import SandboxLayout, SandboxLimits, verifier_argv
from depgpo.env.sandbox.shell import ShellSession, _descendants, wait_exit
from depgpo.env.tracing.strace_flags import MARK_DIR
from depgpo.env.tracing.trace_state import PATH_KINDS, RECORD_KINDS, ProcInfo, SegmentEffects

HARNESS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # nsenter, strace, setpriv, prlimit, bwrap: the host's


@dataclass
class VerifierRun:
    output: str                # its stdout and stderr, at most output_limit bytes
    exit_code: int | None      # None when it timed out
    error: str | None          # timed out, or could not be started: the reward is then 0
    effects: SegmentEffects    # from its own trace, every path kept; agent processes under their agent pids
    trace: Path                # its own strace log
    mark: str                  # the trace path its script's first line looked up: where its own events begin
    startup_reads: set[str] = field(default_factory=set)  # paths only its tools' start-up read (startup_reads.py)

    def inspected(self, keep) -> SegmentEffects:
        """Its effects as E sees them: the paths `keep` accepts, less its tools' start-up reads. Tampering reads
        `effects`, all of them."""
        return kept_effects(self.effects, lambda path: keep(path) and path not in self.startup_reads)


def run_verifier(layout: SandboxLayout, limits: SandboxLimits, shell: ShellSession, preexec, env: dict[str, str],
                 command: str, timeout: float, output_limit: int, agent_processes: list[ProcInfo]) -> VerifierRun:
    """Run `command` as the episode's verifier, wait at most `timeout`, kill what is left of it, parse its trace."""
    logs = layout.verifier_logs
    shutil.rmtree(logs, ignore_errors=True)  # only an earlier verifier could have written here; cleared regardless
    (logs / "verifier").mkdir(parents=True)
    layout.give_to_episode([logs])
    p1_init, agent_shell = _namespace_pids(shell)
    # The mark cuts the verifier's trace where its script starts: what nsenter, setpriv and bwrap did before
    # (opening the host-side bind sources) is not the verifier's.
    nonce = secrets.token_hex(8)
    script = f"test -e {MARK_DIR}/-1/0/{nonce}; {command}"
    out_path, trace = layout.root / "verifier-output.log", layout.traces / "verifier-trace.log"
    net_fd = os.open(f"/proc/{agent_shell}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        argv = verifier_argv(layout, limits, p1_init, net_fd, trace, env, script)
        with open(out_path, "wb") as out, open(layout.root / "verifier-strace.err", "wb") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(net_fd,),
                                    start_new_session=True, preexec_fn=preexec, cwd="/", env={"PATH": HARNESS_PATH})
        pid_map = _agent_pids_in_p1(p1_init)
        error, exit_code = None, None
        try:
            exit_code = wait_exit(proc, timeout)
        except subprocess.TimeoutExpired:
            error = f"verifier timed out after {timeout}s"
        _kill_tree(proc)
    finally:
        os.close(net_fd)
    with open(out_path, "rb") as fh:
        output = fh.read(output_limit).decode("utf-8", "replace")
    if exit_code not in (None, 0) and output.startswith("nsenter:"):
        error = f"the verifier could not be started: {output[:200].strip()}"
    effects, startup_reads = _parse_trace(trace, nonce, pid_map, agent_processes, env.get("HOME") or "/root",
                                          layout.workdir)
    return VerifierRun(output, exit_code, error, effects, trace, f"{MARK_DIR}/-1/0/{nonce}", startup_reads)


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


def _agent_pids_in_p1(p1_init: int) -> dict[int, int]:
    """Agent pid (as in the agent's trace, namespace P2) -> the same process's pid in P1 (the verifier's)."""
    mapping = {}
    for pid in _descendants(p1_init):
        try:
            with open(f"/proc/{pid}/status") as fh:
                nspid = next(line for line in fh if line.startswith("NSpid:")).split()[1:]
        except (OSError, StopIteration):
            continue
        if len(nspid) == 3:  # host, P1, P2: an agent process
            mapping[int(nspid[2])] = int(nspid[1])
    return mapping


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
