"""Which CPU an episode runs on: one of its own among those the process may use, while one is free.

strace stops its tracee at every traced syscall and wakes itself to read it. When the tracer and its tracee share
a CPU the hand-over costs 23-34 us; when the scheduler puts them on different CPUs, 107-140 us (docs/benchmarks.md,
"Pinning"). Unpinned, with other episodes beside it, a traced episode took 5.6x its untraced time against 1.7x
pinned. So each episode's whole tree (its tracer, shell, commands, and its verifier's chain) is pinned to one CPU.

The CPUs are those the process may use when it first asks (`os.sched_getaffinity`: what Slurm, a cgroup cpuset or
`taskset` gave the job), not the machine's. Episodes of one process run in threads (agent loop workers), so the
choice is shared and locked: a new episode takes a CPU no other episode holds and gives it back when it ends; with
every CPU taken it runs unpinned, since two pinned episodes on one CPU wait on each other while another CPU idles
(4 episodes at a time on 2 CPUs, all pinned: 0.86x the episodes per second of none). The harness's own threads stay
unpinned: only the episode's children are placed.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass


class CpuSlots:
    """A fixed set of CPUs, each held by at most one episode: `take` a free one, `give_back` when the episode ends."""

    def __init__(self, cpus: set[int] | None = None) -> None:
        self._lock = threading.Lock()
        self._cpus = tuple(sorted(cpus if cpus is not None else os.sched_getaffinity(0)))
        if not self._cpus:
            raise ValueError("CpuSlots needs at least one CPU")
        self._held: set[int] = set()

    @property
    def cpus(self) -> tuple[int, ...]:
        return self._cpus

    def take(self) -> int | None:
        """The lowest CPU no episode holds, or None when every one is held: pinning a second episode beside the
        first would leave it waiting while another CPU idles (bench/episode_pinning.py: 0.86x)."""
        with self._lock:
            cpu = next((c for c in self._cpus if c not in self._held), None)
            if cpu is not None:
                self._held.add(cpu)
            return cpu

    def give_back(self, cpu: int) -> None:
        with self._lock:
            if cpu not in self._held:
                raise ValueError(f"CPU {cpu} was not taken from these slots")
            self._held.remove(cpu)

    def held(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._held)


_shared: CpuSlots | None = None
_shared_lock = threading.Lock()


def shared_slots() -> CpuSlots:
    """The process's slots, made on first use from the affinity it had then (a stage's episodes share them)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = CpuSlots()
        return _shared


@dataclass
class Placement:
    """Where one episode's processes run: a configured CPU, a slot of the shared ones (given back by `release`),
    or nowhere in particular (None)."""

    cpu: int | None = None
    from_slots: bool = False

    @classmethod
    def of(cls, cpu: int | None, pin: bool) -> "Placement":
        """SandboxLimits' `cpu` if set, else a shared slot when `pin` and one is free, else floating."""
        if cpu is not None or not pin:
            return cls(cpu)
        taken = shared_slots().take()
        return cls(taken, taken is not None)

    def release(self) -> None:
        if self.from_slots:
            shared_slots().give_back(self.cpu)
            self.from_slots = False
