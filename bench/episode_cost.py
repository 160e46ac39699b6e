"""What one episode of a generated task costs, phase by phase: shell-check verifiers vs Harbor's pytest layout.

    .venv/bin/python bench/episode_cost.py [--runs 5] [--out bench/results/episode_cost.json]

For every family, the same task (same seed, same oracle) is written twice, once per verifier (depgpo.tasks.checks),
and its oracle episode runs `--runs` times per verifier, the two interleaved run by run so that machine noise hits
both alike. Phases: sandbox set-up (Episode.__enter__), the oracle's commands, the verifier (run and trace parsed),
teardown. We report medians per phase and the ratio of whole episodes, pytest over shell, and check that both
verifiers give reward 1 and the same records E.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.tasks import load_task
from depgpo.tasks.generate import FAMILIES, build_task, write_task

PHASES = ("setup_s", "commands_s", "verifier_s", "teardown_s", "episode_s")


def run_once(task_dir: Path) -> tuple[dict[str, float], dict]:
    task, times = load_task(task_dir), {}
    start = time.perf_counter()
    episode = Episode(task, EpisodeConfig(command_timeout_s=10))
    episode.__enter__()
    try:
        times["setup_s"] = time.perf_counter() - start
        mark = time.perf_counter()
        for turn, command in enumerate(json.loads((task_dir / "solution" / "oracle.json").read_text())):
            episode.run_command(command, turn=turn)
        times["commands_s"] = time.perf_counter() - mark
        mark = time.perf_counter()
        verifier = episode.verify()
        times["verifier_s"] = time.perf_counter() - mark
    finally:
        mark = time.perf_counter()
        episode.__exit__(None, None, None)
        times["teardown_s"] = time.perf_counter() - mark
    times["episode_s"] = time.perf_counter() - start
    return times, verifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    samples: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in FAMILIES:
            spec = build_task(family, "pool", 0, seed=0)
            dirs = {v: write_task(spec, Path(tmp) / v / family, {}, verifier=v) for v in ("shell", "pytest")}
            records = {}
            for _ in range(args.runs):
                for verifier, task_dir in dirs.items():
                    times, result = run_once(task_dir)
                    assert result["reward"] == 1.0, (family, verifier, result["output"][-500:])
                    records[verifier] = sorted(result["E"])
                    samples.setdefault((family, verifier), []).append(times)
            assert records["shell"] == records["pytest"], (family, records)
    rows = []
    for (family, verifier), runs in samples.items():
        rows.append({"family": family, "verifier": verifier,
                     **{phase: statistics.median(r[phase] for r in runs) for phase in PHASES}})
    summary = {}
    for verifier in ("shell", "pytest"):
        mine = [r for r in rows if r["verifier"] == verifier]
        summary[verifier] = {phase: statistics.median(r[phase] for r in mine) for phase in PHASES}
    ratio = summary["pytest"]["episode_s"] / summary["shell"]["episode_s"]
    print(f"{'family':20} {'verifier':8} " + " ".join(f"{p:>11}" for p in PHASES))
    for r in rows:
        print(f"{r['family']:20} {r['verifier']:8} " + " ".join(f"{r[p]:11.3f}" for p in PHASES))
    for verifier, phases in summary.items():
        print(f"{'median':20} {verifier:8} " + " ".join(f"{phases[p]:11.3f}" for p in PHASES))
    print(f"episode, pytest / shell: {ratio:.2f}x ({args.runs} runs per family and verifier, interleaved)")
    if args.out:
        args.out.write_text(json.dumps({"runs": args.runs, "rows": rows, "median": summary,
                                        "episode_ratio_pytest_over_shell": ratio}, indent=1) + "\n")


if __name__ == "__main__":
    main()
