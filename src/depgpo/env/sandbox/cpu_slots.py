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


class CpuSlots:
    """Episodes per CPU of a fixed set; `take` a free one, `give_back` when the episode ends."""

    def __init__(self, cpus: set[int] | None = None) -> None:
        self._lock = threading.Lock()
        self._cpus = tuple(sorted(cpus if cpus is not None else os.sched_getaffinity(0)))
        if not self._cpus:
            raise ValueError("CpuSlots needs at least one CPU")
        self._load = dict.fromkeys(self._cpus, 0)

    @property
    def cpus(self) -> tuple[int, ...]:
        return self._cpus

    def take(self) -> int | None:
        """A CPU no episode runs on (the lowest), or None when every one has an episode: pinning a second episode
        beside the first would leave it waiting while another CPU idles (bench/episode_pinning.py: 0.86x)."""
        with self._lock:
            free = [c for c in self._cpus if self._load[c] == 0]
            if not free:
                return None
            self._load[free[0]] += 1
            return free[0]

    def give_back(self, cpu: int) -> None:
        with self._lock:
            if self._load.get(cpu, 0) <= 0:
                raise ValueError(f"CPU {cpu} was not taken from these slots")
            self._load[cpu] -= 1

    def load(self) -> dict[int, int]:
        with self._lock:
            return dict(self._load)


_shared: CpuSlots | None = None
_shared_lock = threading.Lock()


def shared_slots() -> CpuSlots:
    """The process's slots, made on first use from the affinity it had then (a stage's episodes share them)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = CpuSlots()
        return _shared
