"""Episode time rootless vs root: the same 10-command traced episode (bench_episode_overhead.COMMANDS), side by side.

    .venv/bin/python bench/rootless_vs_root.py [--runs 7]      # as root

Run as root. The root mode runs in this process; the rootless one in a child process as an ordinary user (made as
tests/helpers/ordinary_user.py makes it), which times its own episode, so that interpreter start-up is not counted.
Modes are interleaved run by run so that machine noise hits both alike; we report medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_episode_overhead import run_once  # noqa: E402

CHILD = "from bench.bench_episode_overhead import run_once; print(run_once(True, None)[0])"


def rootless_once() -> float:
    from tests.helpers import ordinary_user

    kwargs = ordinary_user.popen_kwargs()
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, check=True, **kwargs)
    return float(done.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the root mode needs it, and the rootless one runs as an ordinary user made here")
    from tests.helpers import ordinary_user

    why = ordinary_user.unavailable()
    if why:
        sys.exit(f"cannot run as an ordinary user here: {why}")
    opened = ordinary_user.opened_way()
    times: dict[str, list[float]] = {"root": [], "rootless": []}
    try:
        for _ in range(args.runs):
            times["root"].append(run_once(True, None)[0])
            times["rootless"].append(rootless_once())
    finally:
        ordinary_user.close_way(opened)
    root_s, rootless_s = statistics.median(times["root"]), statistics.median(times["rootless"])
    print(f"10-command traced episode, {args.runs} interleaved runs per mode, medians (unpinned)")
    print(f"  root {root_s:6.3f} s   rootless {rootless_s:6.3f} s   ratio rootless/root {rootless_s / root_s:5.2f}x")


if __name__ == "__main__":
    main()
