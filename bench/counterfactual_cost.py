"""What `depgpo counterfactual` costs: seconds per trajectory and per command, side by side or one at a time.

    .venv/bin/python bench/counterfactual_cost.py [--workers 1 2] [--out bench/results/counterfactual_cost.json]

One generated task per family (seed 0, pool split, shell verifiers), its oracle replayed as a command list, with
each `--workers` (agent.workers): (a) as it is, (b) without each command, (c) credited only, (d) each credited read
in the task redrawn with other values, (e) the minimal sufficient set from replays of subsets. Reported per family
and in all: replays, wall seconds per trajectory, per command and per replay; and what the counterfactual found
(necessary commands, credited ones, sufficiency, the sufficient set), so a cost is never quoted for a run that did
not work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

from depgpo.credit import CreditConfig
from depgpo.env.episode import EpisodeConfig
from depgpo.replay.counterfactual import counterfactual
from depgpo.replay.source import read_sources
from depgpo.tasks.generate import FAMILIES, build_task, write_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    load_before = os.getloadavg()  # the machine may be shared: its load is part of what a timing means
    with tempfile.TemporaryDirectory() as tmp:
        for family in FAMILIES:
            task_dir = write_task(build_task(family, "pool", 0, seed=0), Path(tmp) / family, {"split": "pool"})
            (source,) = read_sources(task_dir / "solution" / "oracle.json")
            for workers in args.workers:
                result, problems = counterfactual(source, task_dir, EpisodeConfig(command_timeout_s=10),
                                                  CreditConfig(), workers)
                assert not problems, problems
                n, cost = len(result["commands"]), result["cost"]
                rows.append({
                    "family": family, "workers": workers, "commands": n, "replays": cost["replays"],
                    "seconds": cost["seconds"], "seconds_per_command": round(cost["seconds"] / n, 3),
                    "seconds_per_replay": round(cost["seconds"] / cost["replays"], 3),
                    "reward": result["reward"], "reproducible": result["reproducible"],
                    "sufficient": result["sufficient"],
                    "necessary": [c["index"] for c in result["commands"] if c["necessary"]],
                    "credited": result["credited"],
                    "sufficient_set": result["sufficient_set"],  # (e): its kept commands and replays of subsets
                    "perturbed": {c["index"]: c["reward_perturbed"] for c in result["commands"]
                                  if c["reward_perturbed"] is not None},
                })
                print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for workers in args.workers:
        mine = [r for r in rows if r["workers"] == workers]
        summary[str(workers)] = {
            "trajectories": len(mine), "commands": sum(r["commands"] for r in mine),
            "replays": sum(r["replays"] for r in mine),
            "median_seconds_per_trajectory": round(statistics.median(r["seconds"] for r in mine), 3),
            "seconds_per_command": round(sum(r["seconds"] for r in mine) / sum(r["commands"] for r in mine), 3),
            "seconds_per_replay": round(sum(r["seconds"] for r in mine) / sum(r["replays"] for r in mine), 3),
        }
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_average_1_5_15_before": load_before, "after": os.getloadavg()},
              "summary": summary,
              "rows": rows}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
