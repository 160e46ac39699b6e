"""The verifier's verdict: the reward an episode earns and, where the verifier gave none of its own, why.

A verifier that could not judge says so in its own words (`verifier.error`, docs/trajectory-schema.md), each distinct
from "the verifier wrote neither /logs/verifier/reward.json nor reward.txt", which now means only that its script ran
and wrote none:

- "the verifier could not be started: ..." its script's first line never ran (the trace holds no mark of it): bwrap
  could not mount onto a symlink the agent made, nsenter could not fork. What its chain said follows. Reward 0.
- "verifier timed out after Ns" (reward 0); where agent processes ran beside it, how many and the CPU they used
  meanwhile, "starved of CPU" where they held at least half of what the episode's CPUs gave.
- "the verifier could not fork ..." its processes' clones or execs failed with EAGAIN (the process limit) or ENOMEM,
  with the agent processes alive beside it. The reward stays what the script wrote (it reached its verdict); with
  none, the words say that too.
- tampering, and a script killed by a signal, as before (docs/threat-model.md).
"""

from __future__ import annotations


def verdict(run, processes, reward, tampering: list[dict], policy: str) -> tuple[float, str, str | None]:
    """(reward, reward_source, error) of one verifier run (judge.VerifierRun), its processes
    (verifier_processes.VerifierProcesses), the reward its files give (verifier.Reward) and the tampering found."""
    value, source, error = reward.value, reward.source, reward.error
    if run.error:  # timed out: whatever is on disk does not count
        return 0.0, "error", run.error + _beside(run) + _no_fork(processes, run, lead="; its processes")
    if not processes.script_started:
        said = [text.strip().splitlines()[0][:300] for text in (run.chain_error, run.output) if text.strip()]
        return 0.0, "error", "the verifier could not be started: " + ("; ".join(said) or "its script never ran") \
            + _no_fork(processes, run, lead="; its chain")
    if tampering and policy == "zero":
        kinds = ", ".join(sorted({t["kind"] for t in tampering}))
        return 0.0, "tampering", f"tampering ({kinds}): the verifier ran or read what the agent planted: " + \
            ", ".join(t["path"] for t in tampering[:5])
    if processes.script_killed:  # it never reached its own verdict: a reward file there is someone else's
        return 0.0, "error", f"the verifier's script was killed ({processes.script_killed}) before it ended: its " \
            "reward files do not count (docs/threat-model.md)"
    if processes.fork_failures:
        error = "the verifier" + _no_fork(processes, run, lead="") + (f"; {error}" if error else "")
    return value, source, error


def _no_fork(processes, run, lead: str) -> str:
    """`lead` + " could not fork (...)" when clones or execs failed for lack of processes or memory, else ""."""
    failed = processes.fork_failures
    if not failed:
        return ""
    counts = ", ".join(f"{errno} x{n}" for errno, n in sorted(failed.items()))
    why = "the process limit" if "EAGAIN" in failed else "memory"
    return f"{lead} could not fork ({counts}: {why}; {run.agent_alive} agent processes alive beside it)"


def _beside(run) -> str:
    """How the agent processes alive beside a verifier that timed out competed with it for the CPU."""
    if not run.agent_alive:
        return ""
    starved = run.agent_cpu_s >= 0.5 * run.duration_s * run.cpus
    return (f"; {run.agent_alive} agent processes ran beside it and used {run.agent_cpu_s:.1f} s of CPU in its "
            f"{run.duration_s:.1f} s" + (" (it was starved of CPU)" if starved else ""))
