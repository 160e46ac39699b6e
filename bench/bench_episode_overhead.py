"""Traced vs untraced wall time of the same 10-command episode, and trace parsing time per trajectory.

    .venv/bin/python bench/bench_episode_overhead.py [--runs 7] [--beside]

Both modes run the identical sandbox (idmapped overlays, bwrap, PTY shell, markers); the traced one adds strace as
pid 1. Modes are interleaved run by run so that machine noise hits both alike; we report medians and their ratio,
pinned to one CPU (what the episode runner recommends) and unpinned. `--beside`: another traced episode runs all
the while, in a thread as the agent loop runs them (pinned: on CPU 1; unpinned: floating), its own start included.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from depgpo.env.sandbox.layout import SandboxLayout, SandboxLimits, launcher_argv, remove_layout
from depgpo.env.sandbox.privilege import Privilege, resolve
from depgpo.env.sandbox.shell import ShellSession
from depgpo.env.tracing.trace_parser import TraceParser
from depgpo.env.tracing.trace_syntax import FAST_SKIP_PREFIXES
from depgpo.trajectory.scope import is_record_path

COMMANDS = [
    "ls -la",
    "cat > solve.py <<'EOF'\nimport csv\nrows = list(csv.reader(open('data.csv')))\nprint(sum(int(r[1]) for r in rows))\nEOF",
    "python3 -c \"import random; random.seed(0); open('data.csv','w').write(''.join(f'r{i},{random.randint(0,9)}\\n' for i in range(5000)))\"",
    "python3 solve.py > answer.txt; cat answer.txt",
    "wc -l data.csv; head -3 data.csv",
    "sed -i 's/r1,/row1,/' data.csv && grep -c row data.csv",
    "mkdir -p out && cp answer.txt out/ && mv out/answer.txt out/final.txt",
    "find . -name '*.txt' | xargs wc -c",
    "tar czf /tmp/backup.tgz data.csv solve.py && ls -la /tmp/backup.tgz",
    "python3 -c \"import json, collections, re; print(json.dumps({'ok': True}))\"",
]


def run_once(traced: bool, cpu: int | None, privilege: Privilege | None = None) -> tuple[float, str]:
    """Wall time of sandbox start + the commands, and the trace log ("" untraced)."""
    privilege = privilege or resolve()
    lease, root = privilege.lease_uid(), Path(tempfile.mkdtemp(prefix="bench-"))
    start = time.perf_counter()
    namespaces = privilege.open_namespaces(root, None, None)  # rootless: the holder is part of the start
    layout = SandboxLayout(root=root, uid=lease.uid, privilege=privilege, namespaces=namespaces)
    layout.prepare()
    shell = ShellSession(launcher_argv(layout, SandboxLimits(), traced=traced), cpu=cpu)
    for command in COMMANDS:
        out = shell.run_marked(command, timeout_s=60)
        assert out.exit_code == 0, (command, out.output)
    elapsed = time.perf_counter() - start
    shell.close()
    trace = layout.trace_log.read_text() if traced else ""
    privilege.reap(lease.uid, namespaces)
    remove_layout(layout)
    lease.release()
    return elapsed, trace


def parse_time_ms(trace: str) -> float:
    start = time.perf_counter()
    parser = TraceParser(keep_path=is_record_path, untracked_prefixes=FAST_SKIP_PREFIXES)
    parser.feed(trace)
    for k in range(len(COMMANDS)):
        parser.summary(k)
    return (time.perf_counter() - start) * 1000


def _neighbour(stop: threading.Event, cpu: int | None) -> None:
    while not stop.is_set():
        run_once(True, cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--beside", action="store_true", help="another traced episode running all the while")
    args = ap.parse_args()
    beside = " with another episode beside it" if args.beside else ""
    print(f"{len(COMMANDS)}-command episode{beside}, {args.runs} interleaved runs per mode, medians")
    for label, cpu in (("pinned to CPU 0", 0), ("unpinned", None)):
        stop = threading.Event()
        neighbour = threading.Thread(target=_neighbour, args=(stop, None if cpu is None else 1), daemon=True) \
            if args.beside else None
        if neighbour:
            neighbour.start()
        times = {True: [], False: []}
        for _ in range(args.runs):
            for traced in (False, True):
                elapsed, trace = run_once(traced, cpu)
                times[traced].append(elapsed)
        stop.set()
        if neighbour:
            neighbour.join()
        base_s, traced_s = statistics.median(times[False]), statistics.median(times[True])
        print(f"  {label:16s} untraced {base_s:6.3f} s   traced {traced_s:6.3f} s   ratio {traced_s / base_s:5.2f}x")
    parse = [parse_time_ms(trace) for _ in range(args.runs)]
    print(f"  trace parsing: {statistics.median(parse):.1f} ms per trajectory ({trace.count(chr(10))} lines)")


if __name__ == "__main__":
    main()
