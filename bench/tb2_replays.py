"""Real Terminal-Bench 2.0 agent trials, replayed and scored against counterfactual ground truth (issue 35 item 4).

    .venv/bin/python bench/tb2_replays.py --mirror GITDIR --tasks-dir /tmp/tb2 --out /tmp/tb2-replays \
        [--tasks a,b] [--per-task 8] [--max-turns 30] [--cf-pass 3] [--cf-fail 1] [--removals 8] [--subsets 8]
        [--workers 2]
    .venv/bin/python bench/tb2_replays.py --merge OUT_A OUT_B --out /tmp/tb2-merged   # runs side by side, together

Where the trials come from: `fetch github:hamishivi/tmax` (AllenAI's TMax, Apache-2.0): evaluation_assets/daytona/
<model>/terminal-bench-2-0/<task>__<id>/ holds Harbor trial directories (result.json with the reward,
agent/trajectory.json as chat messages, one `bash` tool call a turn) of eight open models (Qwen3.5 2B/4B/9B,
Qwen3.6 27B, TMax 2B/4B/9B/27B), five attempts at each of the 89 tasks at the pinned 2.0 commit. The tasks
themselves come from `bench/tb2_tasks.py` (--tasks-dir). Both carry the benchmark's canary: everything is written
under --out, which must lie outside this repository.

Steps, each written as it finishes so that a cut run keeps what it did:
1. extract the chosen tasks' trials from the git dir (blobs the snapshot lacks are skipped and counted);
2. choose per task, with a seeded shuffle (--seed), up to --per-task trials of at most --max-turns model turns
   (the cost of a replay grows with its commands): successes first, up to half, then failures;
   then task by task, in --tasks order (a run cut short holds whole tasks; rerun it to go on where it stopped):
3. replay each (`depgpo replay`): fidelity.jsonl, one line a trial (logged and replayed reward, the share of
   observations that differ, what could not be replayed, seconds, the problem lines `depgpo replay` printed);
4. on trials whose replay reproduced the logged reward, up to --cf-pass successes and --cf-fail failures per task:
   `depgpo counterfactual --removals N --subsets M` (every credited command and a seeded sample of the rest; a
   success's minimal sufficient set in at most M replays of subsets; docs/replay.md),
   counterfactual/<task>.jsonl, each with GiGPO's step group: the same model's attempts at the task;
5. `depgpo report --counterfactuals counterfactual/*.jsonl --name tb2 --out report/`: the scores of every weighting
   with task-resampled intervals; summary.json with the counts of each step.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPGPO = [sys.executable, "-m", "depgpo"]
TRIALS_UNDER = "evaluation_assets/daytona"
KEEP = ("result.json", "config.json", "agent/trajectory.json", "verifier/reward.txt")


def extract(mirror: str, tasks: set[str], out: Path) -> tuple[list[Path], int]:
    """The trial directories of `tasks` in the TMax snapshot, written under `out`; and how many files were absent."""
    listing = subprocess.run(["git", "--git-dir", mirror, "ls-tree", "-r", "HEAD", TRIALS_UNDER],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    trials, absent = set(), 0
    for line in listing:
        meta, path = line.split("\t", 1)
        parts = path.split("/")  # evaluation_assets/daytona/<model>/terminal-bench-2-0/<task>__<id>/<file...>
        if len(parts) < 6 or "__" not in parts[4] or parts[4].split("__")[0] not in tasks:
            continue
        if "/".join(parts[5:]) not in KEEP:
            continue
        dest = out.joinpath(*parts[2:])
        if not dest.exists():
            blob = subprocess.run(["git", "--git-dir", mirror, "cat-file", "blob", meta.split()[2]],
                                  capture_output=True)
            if blob.returncode:
                absent += 1
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(blob.stdout)
        trials.add(out.joinpath(*parts[2:5]))
    return sorted(t for t in trials if (t / "agent" / "trajectory.json").is_file()), absent


def describe(trial: Path) -> dict | None:
    """Task, model, logged reward and model turns of a trial; None when its files cannot be read."""
    try:
        result = json.loads((trial / "result.json").read_text())
        messages = json.loads((trial / "agent" / "trajectory.json").read_text())
    except (OSError, ValueError):
        return None
    verifier = result.get("verifier_result") or {}
    reward = (verifier.get("rewards") or {}).get("reward")
    turns = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant") \
        if isinstance(messages, list) else None
    return {"trial": trial.name, "path": str(trial), "task": result.get("task_name"), "model": trial.parts[-3],
            "logged_reward": reward, "turns": turns}


def choose(described: list[dict], per_task: int, max_turns: int, seed: int) -> list[dict]:
    by_task: dict[str, list[dict]] = defaultdict(list)
    for item in described:
        if item["logged_reward"] is not None and item["turns"] is not None and item["turns"] <= max_turns:
            by_task[item["task"]].append(item)
    chosen = []
    for task in sorted(by_task):
        items = sorted(by_task[task], key=lambda i: i["trial"])
        random.Random(f"{seed}:{task}").shuffle(items)
        successes = [i for i in items if i["logged_reward"] >= 1]
        failures = [i for i in items if i["logged_reward"] < 1]
        failed = failures[: per_task - len(successes[: per_task // 2])]
        chosen += successes[: per_task - len(failed)] + failed  # more successes where failures are few
    return chosen


def attach_gigpo_groups(cf_dir: Path, described: list[dict]) -> None:
    """GiGPO's step groups for the scores: a model's five attempts at a task are the group its trainer would have
    compared (one policy, one prompt); each member's anchor states from its logged observations
    (report.load.turn_anchors), its logged reward (docs/replay.md#scores)."""
    from depgpo.inference.formats import load_trajectories
    from depgpo.report.load import turn_anchors

    members: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for item in described:
        if item["logged_reward"] is not None:
            members[item["model"], item["task"]].append(item)
    by_trial = {item["trial"]: item for item in described}
    anchors: dict[str, list[str]] = {}
    for path in cf_dir.glob("*.jsonl"):
        objects = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for obj in objects:
            item = by_trial.get(obj.get("source_trial"))
            if item is None or obj.get("gigpo_group") is not None:
                continue
            group = sorted(members[item["model"], item["task"]], key=lambda i: i["trial"])
            for member in group:
                if member["trial"] not in anchors:
                    anchors[member["trial"]] = turn_anchors(load_trajectories(member["path"])[0])
            obj["gigpo_group"] = {"anchor_keys": [anchors[m["trial"]] for m in group],
                                  "rewards": [float(m["logged_reward"]) for m in group],
                                  "member": [m["trial"] for m in group].index(item["trial"])}
        path.write_text("".join(json.dumps(obj) + "\n" for obj in objects))


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def reproduced(row: dict) -> bool:
    """The replay gave the reward the trial logged."""
    return row.get("replayed_reward") is not None and row["replayed_reward"] == row["logged_reward"]


def counterfactuals(task: str, rows: list[dict], cf_dir: Path, args) -> None:
    """`depgpo counterfactual --removals` on the first --cf-pass successes and --cf-fail failures of `task` whose
    replay reproduced the logged reward (in the seeded order they were chosen); each result line gets
    `source_trial`. Results already in counterfactual/TASK.jsonl are kept."""
    sink_path = cf_dir / f"{task}.jsonl"
    picked: Counter = Counter()
    for row in rows:
        outcome = "pass" if row["logged_reward"] >= 1 else "fail"
        if row["task"] != task or not reproduced(row) or \
                picked[outcome] >= (args.cf_pass if outcome == "pass" else args.cf_fail):
            continue
        picked[outcome] += 1
        if any(r.get("source_trial") == row["trial"] for r in read_rows(sink_path)):
            continue
        code, stdout, stderr, seconds = run(
            [*DEPGPO, "counterfactual", row["trajectory"], "--task", str(args.tasks_dir / task),
             "--format", "json", "--removals", str(args.removals), "--seed", str(args.seed), "--subsets",
             str(args.subsets), "--timeout", str(args.timeout), "--out", str(cf_dir / row["trial"]),
             f"agent.workers={args.workers}"],
            (args.removals + args.subsets + 4) * 40 * args.timeout)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        with sink_path.open("a") as sink:
            for line in lines:
                sink.write(json.dumps({**json.loads(line), "source_trial": row["trial"]}) + "\n")
        print(f"counterfactual {task} {row['trial']} ({outcome}): exit {code}, {seconds:.0f} s"
              + (f"; {stderr.strip().splitlines()[-1]}" if code and stderr.strip() else ""), flush=True)


def run(command: list[str], timeout: float) -> tuple[int, str, str, float]:
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        return done.returncode, done.stdout, done.stderr, time.perf_counter() - started
    except subprocess.TimeoutExpired as expired:
        return 124, "", f"stopped after {timeout:g} s ({expired})", time.perf_counter() - started


def replay(item: dict, tasks_dir: Path, out: Path, timeout: float) -> dict:
    target = out / "replays" / item["trial"]
    code, _, stderr, seconds = run([*DEPGPO, "replay", item["path"], "--task", str(tasks_dir / item["task"]),
                                    "--timeout", str(timeout), "--out", str(target)], 40 * timeout)
    row = {**item, "replay_exit": code, "seconds": round(seconds, 1),
           "problems": [line for line in stderr.splitlines() if line.strip()][-5:]}
    path = target / "trajectory.json"
    if path.is_file():
        trajectory = json.loads(path.read_text())
        section = trajectory.get("replay") or {}
        fidelity = section.get("fidelity") or {}
        row.update(replayed_reward=trajectory["verifier"]["reward"], fidelity=fidelity,
                   unreplayable=section.get("unreplayable") or [], commands=len(trajectory.get("commands", [])),
                   trajectory=str(path))
    return row


def fidelity_table(rows: list[dict]) -> str:
    """Markdown, one row a task: trials (logged successes), replays written, logged reward reproduced, the median
    share of differing observations, trials with something unreplayable, median seconds a replay."""
    def median(values):
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    lines = ["| task | trials (logged pass) | replayed | reward reproduced | median differing share | with unreplayable "
             "steps | median s |", "|---|---|---|---|---|---|---|"]
    by_task: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    for task, items in sorted(by_task.items()) + [("all", rows)]:
        replayed = [r for r in items if r.get("replayed_reward") is not None]
        same = [r for r in replayed if reproduced(r)]
        share = median([(r.get("fidelity") or {}).get("differing_share") for r in replayed])
        lines.append(f"| {task} | {len(items)} ({sum(r['logged_reward'] >= 1 for r in items)}) | {len(replayed)} | "
                     f"{len(same)} ({sum(r['logged_reward'] >= 1 for r in same)} pass) | "
                     f"{'–' if share is None else f'{share:.2f}'} | {sum(bool(r.get('unreplayable')) for r in items)} | "
                     f"{median([r['seconds'] for r in items]):.0f} |")
    return "\n".join(lines)


def merge(dirs: list[Path], out: Path) -> int:
    """The fidelity table and the counterfactual report over several runs' --out directories (run side by side on
    disjoint --tasks)."""
    from depgpo.replay.run import fidelity
    from depgpo.replay.source import read_sources

    rows = list({row["trial"]: row for d in dirs for row in reversed(read_rows(d / "fidelity.jsonl"))}.values())
    for row in rows:  # compared again with this code's normalisation (a run may predate a change to it)
        if row.get("trajectory"):
            row["fidelity"] = fidelity(read_sources(Path(row["path"]))[0],
                                       json.loads(Path(row["trajectory"]).read_text()))
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (out / "fidelity.md").write_text(fidelity_table(rows) + "\n")
    for d in dirs:  # a run cut short has not attached them yet
        described = [i for i in map(describe, sorted((d / "trials").glob("*/*/*__*"))) if i is not None]
        attach_gigpo_groups(d / "counterfactual", described)
    files = sorted(str(p) for d in dirs for p in (d / "counterfactual").glob("*.jsonl") if p.stat().st_size)
    code, stdout, stderr, _ = run([*DEPGPO, "report", "--counterfactuals", *files, "--name", "tb2", "--out",
                                   str(out / "report")], 1800)
    print(fidelity_table(rows))
    print(stdout.strip(), stderr.strip()[-2000:], sep="\n")
    return code


def main() -> int:
    if sys.argv[1:2] == ["--merge"]:  # --merge DIR... --out DIR
        *dirs, flag, target = sys.argv[2:]
        if flag != "--out":
            sys.exit("usage: tb2_replays.py --merge DIR... --out DIR")
        return merge([Path(d) for d in dirs], Path(target))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", required=True, help="git dir of `fetch github:hamishivi/tmax`")
    parser.add_argument("--tasks-dir", type=Path, required=True, help="bench/tb2_tasks.py's --out")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", help="comma-separated task names (default: every task in --tasks-dir)")
    parser.add_argument("--per-task", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=30)
    parser.add_argument("--cf-pass", type=int, default=3, help="counterfactuals of reproduced successes per task")
    parser.add_argument("--cf-fail", type=int, default=1, help="counterfactuals of reproduced failures per task")
    parser.add_argument("--removals", type=int, default=8)
    parser.add_argument("--subsets", type=int, default=8,
                        help="replays of subsets per success for its minimal sufficient set (counterfactual --subsets)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per command")
    parser.add_argument("--workers", type=int, default=2, help="agent.workers of each counterfactual")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = args.out.resolve()
    if out == REPO or REPO in out.parents:
        sys.exit(f"refusing to write benchmark trials inside the repository: {out}")
    tasks = set(args.tasks.split(",")) if args.tasks else {p.name for p in args.tasks_dir.iterdir() if p.is_dir()}
    trials, absent = extract(args.mirror, tasks, out / "trials")
    described = [d for d in map(describe, trials) if d is not None]
    chosen = choose(described, args.per_task, args.max_turns, args.seed)
    print(f"{len(trials)} trials of {len(tasks)} tasks ({absent} files absent from the snapshot); "
          f"{len(chosen)} chosen", flush=True)

    fidelity_path, cf_dir = out / "fidelity.jsonl", out / "counterfactual"
    cf_dir.mkdir(exist_ok=True)
    order = args.tasks.split(",") if args.tasks else sorted(tasks)
    for task in order:  # task by task, so that a run cut short holds whole tasks
        for n, item in enumerate([i for i in chosen if i["task"] == task], 1):
            if item["trial"] in {row["trial"] for row in read_rows(fidelity_path)}:
                continue
            row = replay(item, args.tasks_dir, out, args.timeout)
            with fidelity_path.open("a") as sink:
                sink.write(json.dumps(row) + "\n")
            print(f"[{task} {n}] {item['trial']}: logged {item['logged_reward']}, "
                  f"replayed {row.get('replayed_reward')}, {row['seconds']} s", flush=True)
        counterfactuals(task, read_rows(fidelity_path), cf_dir, args)
    rows = read_rows(fidelity_path)
    picked = Counter((result["task"], "pass" if result["reward"] > 0 else "fail")
                     for path in cf_dir.glob("*.jsonl") for result in read_rows(path))

    attach_gigpo_groups(cf_dir, described)
    files = sorted(str(p) for p in cf_dir.glob("*.jsonl") if p.stat().st_size)
    report = run([*DEPGPO, "report", "--counterfactuals", *files, "--name", "tb2", "--out", str(out / "report")],
                 1800) if files else (None, "", "no counterfactuals", 0)
    summary = {
        "trials_in_snapshot": len(trials), "files_absent": absent, "chosen": len(chosen),
        "replayed": sum(1 for r in rows if r.get("replayed_reward") is not None),
        "reproduced": sum(map(reproduced, rows)),
        "tasks": len({r["task"] for r in rows}), "counterfactuals": {f"{t}:{o}": n for (t, o), n in picked.items()},
        "report_exit": report[0], "report_stderr": report[2][-2000:],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
