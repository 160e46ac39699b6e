"""What the traced chain does before the agent's first prompt: syscalls per program, this checkout and a base.

    .venv/bin/python bench/chain_startup.py [--base c5bee39] [--runs 5]

Every traced syscall is a ptrace stop (docs/benchmarks.md#where-an-episodes-start-goes), so the count before the
shell's first marker is the start-up's cost in the tracer's own unit. Each version starts its sandbox shell (root or
rootless, as the harness is) `--runs` times in a process of its own, its PYTHONPATH at its own src/ (the base's from
`git archive`); the two alternate. Counts by the program each process was running; the time from the launcher's
start to the first marker, median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from episode_vs_base import extract_src  # bench/ is sys.path[0] when this runs as a script

REPO = Path(__file__).resolve().parent.parent

# One sandbox shell started and closed; prints {program: traced syscalls before mark -1} and the start's seconds.
WORKER = r"""
import collections, json, re, tempfile, time
from pathlib import Path
from depgpo.env.sandbox.layout import SandboxLayout, SandboxLimits, launcher_argv, remove_layout
from depgpo.env.sandbox.privilege import resolve
from depgpo.env.sandbox.shell import ShellSession
privilege = resolve()
lease, root = privilege.lease_uid(), Path(tempfile.mkdtemp(prefix="chain-"))
namespaces = privilege.open_namespaces(root, None, None)
layout = SandboxLayout(root=root, uid=lease.uid, privilege=privilege, namespaces=namespaces)
layout.prepare()
started = time.perf_counter()
shell = ShellSession(launcher_argv(layout, SandboxLimits()))
seconds = time.perf_counter() - started
shell.close()
program, counts = {}, collections.Counter()
for line in layout.trace_log.read_text().splitlines():
    if "/.depgpo_mark/-1/" in line:
        break
    m = re.match(r"(\d+)\s+\S+\s+(\w+)\((.*)", line)
    if not m:
        continue
    pid, call, rest = m.groups()
    if call == "execve" and rest.rstrip().endswith("= 0"):
        program[pid] = Path(rest.split('"')[1]).name
    elif call in ("clone", "clone3", "fork", "vfork") and (child := re.search(r"= (\d+)", rest)):
        # until it execs, a child runs its parent's program
        program[child[1]] = program.get(pid, "?").removesuffix(" (child)") + " (child)"
    counts[program.get(pid, "?")] += 1
privilege.reap(lease.uid, namespaces)
remove_layout(layout)
lease.release()
print(json.dumps({"seconds": seconds, "counts": counts}))
"""


def run(src: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", WORKER], env={**os.environ, "PYTHONPATH": str(src)}, cwd=src.parent,
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"the worker at {src} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="c5bee39")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"base": extract_src(args.base, Path(tmp)), "head": REPO / "src"}
        samples: dict[str, list[dict]] = {v: [] for v in sources}
        for _ in range(args.runs):
            for version, src in sources.items():
                samples[version].append(run(src))
    for version, runs in samples.items():
        counts = runs[-1]["counts"]
        total = statistics.median(sum(r["counts"].values()) for r in runs)
        seconds = statistics.median(r["seconds"] for r in runs)
        by_program = ", ".join(f"{p} {n}" for p, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        print(f"{version}: {total:.0f} traced syscalls before the first prompt ({by_program}); "
              f"shell start {seconds * 1000:.1f} ms (median of {len(runs)})")


if __name__ == "__main__":
    main()
