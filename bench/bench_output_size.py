"""Time of one command whose output is a single huge line: 20 MB vs 50 MB (and 25 MB), in the real sandbox.

    .venv/bin/python bench/bench_output_size.py [--runs 3]

The harness must handle output in linear time (shell.py searches for the marker only in new bytes and keeps a head
and a tail): the 50 MB line should cost about 2.5x the 20 MB one, and no more than 2x the 25 MB one. Sizes are
interleaved run by run in one episode per size, so that machine noise hits all alike; medians are reported.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.tasks.generate import generate_task_set


def command(megabytes: int) -> str:
    return f"head -c {megabytes * 1_000_000} /dev/zero | tr '\\0' a"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        task = _any_task(Path(tmp))
        times: dict[int, list[float]] = {20: [], 25: [], 50: []}
        for _ in range(args.runs):
            for size in times:
                with Episode(task, EpisodeConfig(command_timeout_s=120)) as episode:
                    start = time.perf_counter()
                    record = episode.run_command(command(size))
                    times[size].append(time.perf_counter() - start)
                    assert record["exit_code"] == 0 and "interior bytes omitted" in record["observation"], record
    median = {size: statistics.median(t) for size, t in times.items()}
    print(f"one single-line output, median of {args.runs} runs (command + harness, traced)")
    for size, seconds in median.items():
        print(f"  {size:3d} MB: {seconds:6.3f} s")
    print(f"  ratio 50 MB / 20 MB: {median[50] / median[20]:.2f}x (linear: 2.5x)")
    print(f"  ratio 50 MB / 25 MB: {median[50] / median[25]:.2f}x (aim: <= 2x)")


def _any_task(root: Path):
    from depgpo.tasks import load_task

    return load_task(generate_task_set(root, "pool", 1, seed=0)[0])


if __name__ == "__main__":
    main()
