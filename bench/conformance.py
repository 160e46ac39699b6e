"""Conformance of a task set: does `depgpo data check` predict what the oracle actually scores?

    .venv/bin/python bench/conformance.py TASKS_DIR [--tasks a,b] [--out results.json] [--backend auto]

For each task, in order:

1. environment  `images.system_root_for` timed as a whole (build s = wall seconds of that call: bootstrapping the
                bases, `podman build`, unpacking; 0 for the host and for images already unpacked). An ImageError
                (a failed build) is the task's failure; the oracle does not run;
2. prediction   `depgpo data check` without --oracle (`task_check.check_task(..., oracle=False)`): from the
                image just built (its Pythons, packages, pytest) or the builder's error, and from what the build,
                the verifier and the oracle download; ok, or its problems;
3. oracle       one real episode running solution/solve.sh, then the verifier: reward, E, the verifier's error,
                the last lines of its output when the reward is below 1, and the episode's wall time;
4. match        prediction ok <=> oracle reward 1 (a task whose environment could not be made scored 0).

Everything per task is caught and recorded, so one broken task never stops the run. The table goes to stdout, the
JSON (everything, including each trajectory's path) to --out. Trajectories go under --work (default
/tmp/depgpo-conformance), never into this repository: real benchmark tasks carry a canary string, and a trajectory
holds the oracle's script.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from depgpo.env.checks.task_check import check_task
from depgpo.env.cli import oracle_commands
from depgpo.env.episode import Episode, EpisodeConfig, HarnessFailure
from depgpo.env.images import backend as images
from depgpo.env.images import base_images
from depgpo.tasks import TaskFormatError, load_task, task_dirs
from depgpo.tasks.dockerfile import external_bases

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT_TAIL_LINES = 25
COLUMNS = [("task", 30), ("base FROM", 26), ("env", 9), ("build s", 8), ("oracle", 6), ("predicted", 9),
           ("match", 5), ("what failed and why", 0)]


def bases_of(task) -> list[str]:
    dockerfile = task.root / "environment" / "Dockerfile"
    if dockerfile.is_file():
        return external_bases(dockerfile.read_text(errors="replace"))
    return [task.docker_image] if task.docker_image else []


def bases_missing(bases: list[str], runtime: str) -> list[str]:
    """Bases not yet in the runtime's store: their bootstrap is part of this task's build time."""
    try:
        name = images.find_runtime(runtime)
    except images.ImageError:
        return []
    return [b for b in bases if not images.in_local_store(base_images.qualified(b), name)]


def short(text: str, width: int = 110) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def last_lines(text: str, n: int = OUTPUT_TAIL_LINES) -> list[str]:
    return (text or "").rstrip().splitlines()[-n:]


def first_failure_line(output: str) -> str | None:
    """pytest's first `FAILED test::name - reason` line, or its last error line."""
    lines = (output or "").splitlines()
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            return line
    for line in reversed(lines):
        if line.strip().startswith(("E ", "error:", "ERROR:", "Error", "Traceback")) or "No solution found" in line:
            return line.strip()
    return next((line.strip() for line in reversed(lines) if line.strip()), None)


def predict(path: Path, args) -> dict:
    t0 = time.monotonic()
    try:
        report = check_task(path, args.backend, args.runtime, args.wheels, oracle=False)
    except Exception as e:  # noqa: BLE001  # the checker itself failed: record it as a failed prediction
        return {"ok": False, "problems": [f"check_task raised {type(e).__name__}: {e}"], "notes": [],
                "backend": None, "seconds": round(time.monotonic() - t0, 2), "crashed": traceback.format_exc()}
    return {"ok": report.ok, "problems": report.problems, "notes": report.notes, "backend": report.backend,
            "seconds": round(time.monotonic() - t0, 2)}


def resolve_environment(task, args) -> dict:
    bases = bases_of(task)
    missing = bases_missing(bases, args.runtime) if images.backend_for(task, args.backend) == "image" else []
    t0 = time.monotonic()
    env = {"bases": bases, "bases_bootstrapped_here": missing}
    try:
        root = images.system_root_for(task, args.backend, args.runtime, args.image_cache, args.wheels)
    except images.ImageError as e:
        env.update(ok=False, error=str(e), error_kind="ImageError")
    except Exception as e:  # noqa: BLE001
        env.update(ok=False, error=f"{type(e).__name__}: {e}", error_kind=type(e).__name__,
                   traceback=traceback.format_exc())
    else:
        env.update(ok=True, backend="host" if root.is_host else "image", image=root.image, source=root.source,
                   notes=list(root.notes), workdir=root.workdir)
    env["build_s"] = round(time.monotonic() - t0, 2)
    return env


def run_oracle(task, args, out_dir: Path) -> dict:
    timeout = min(task.agent_timeout_s or args.command_timeout, args.command_timeout)
    config = EpisodeConfig(backend=args.backend, runtime=args.runtime, image_cache=args.image_cache,
                           wheel_cache=args.wheels, command_timeout_s=timeout)
    result: dict = {"command_timeout_s": timeout}
    t0 = time.monotonic()
    try:
        with Episode(task, config, out_dir=out_dir) as episode:
            records = []
            try:
                for command in oracle_commands(task):
                    records.append(episode.run_command(command))
            except HarnessFailure as e:
                result["harness_failure"] = str(e)
            verifier = episode.verify()
        result["solve"] = [{"exit_code": r["exit_code"], "timed_out": r["timed_out"], "duration_s": r["duration_s"],
                            "output_tail": last_lines(r["observation"], 15)} for r in records]
        result.update(reward=verifier["reward"], reward_source=verifier["reward_source"], E=verifier["E"],
                      E_source=verifier["E_source"], verifier_error=verifier["error"],
                      verifier_exit_code=verifier.get("exit_code"), tests=verifier.get("tests"),
                      episode_errors=list(episode.errors), timings=dict(episode.timings),
                      environment=episode.system.as_record())
        if verifier["reward"] < 1:
            result["output_tail"] = last_lines(verifier["output"])
    except Exception as e:  # noqa: BLE001 (failed to start, or the harness broke: a failed outcome, recorded)
        result.update(reward=0.0, reward_source="exception", exception=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc())
    result["wall_s"] = round(time.monotonic() - t0, 2)
    trajectory = out_dir / "trajectory.json"
    result["trajectory"] = str(trajectory) if trajectory.is_file() else None
    return result


def why_failed(row: dict) -> str:
    """One short phrase: what failed, and why."""
    env, oracle, prediction = row.get("environment") or {}, row.get("oracle") or {}, row.get("prediction") or {}
    if row.get("error"):
        return short(row["error"], 90)
    if env and not env.get("ok"):
        error = env.get("error", "")
        tail = [line for line in error.splitlines() if line.strip()]
        return "build: " + short(tail[-1] if tail else error, 84)
    if oracle.get("exception"):
        return "episode: " + short(oracle["exception"], 82)
    if oracle.get("reward", 0) >= 1:
        return "" if prediction.get("ok") else "predicted: " + short(prediction["problems"][0], 79)
    solve = oracle.get("solve") or []
    if solve and solve[-1].get("timed_out"):
        return f"solve.sh timed out ({oracle['command_timeout_s']:.0f} s)"
    if oracle.get("verifier_error"):
        return "verifier: " + short(oracle["verifier_error"], 80)
    failure = first_failure_line("\n".join(oracle.get("output_tail") or []))
    solve_exit = solve[-1].get("exit_code") if solve else None
    where = f"solve exit {solve_exit}; " if solve_exit not in (0, None) else ""
    return short(where + (failure or "reward 0, no output"), 90)


def table_line(values: list[str]) -> str:
    return " ".join(v.ljust(w) if w else v for v, (_, w) in zip(values, COLUMNS)).rstrip()


def row_cells(row: dict) -> list[str]:
    env, oracle, prediction = row.get("environment") or {}, row.get("oracle") or {}, row.get("prediction") or {}
    base = " / ".join(env.get("bases") or []) or "-"
    source = env.get("source") or ("FAIL" if env else "-")
    build = f"{env['build_s']:.1f}" + ("*" if env.get("bases_bootstrapped_here") else "") if env else "-"
    reward = f"{oracle['reward']:g}" if "reward" in oracle else "-"
    predicted = "-" if not prediction else ("ok" if prediction["ok"] else "fail")
    match = {True: "yes", False: "NO", None: "-"}[row.get("match")]
    return [row["task"][:30], base[:26], source, build, reward, predicted, match, why_failed(row)]


def conform(path: Path, args) -> dict:
    row: dict = {"task": path.name, "path": str(path)}
    try:
        task = load_task(path)
    except TaskFormatError as e:
        row.update(error=f"does not load: {e}", prediction=predict(path, args), match=None)
        return row
    row["environment"] = resolve_environment(task, args)  # first, so that its time is the build's
    row["prediction"] = predict(path, args)  # data check: looks inside the image built above (or says why not)
    if row["environment"]["ok"]:
        row["oracle"] = run_oracle(task, args, args.work / path.name)
    else:
        row["oracle"] = {"reward": 0.0, "reward_source": "no environment"}
    row["match"] = row["prediction"]["ok"] == (row["oracle"].get("reward", 0.0) >= 1.0)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks_dir", type=Path, help="a task set (a directory of task directories)")
    ap.add_argument("--tasks", help="comma-separated task names (default: all)")
    ap.add_argument("--out", type=Path, help="results JSON (default: WORK/results.json)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/depgpo-conformance"),
                    help="where trajectories go, one directory per task (outside the repository)")
    ap.add_argument("--backend", choices=images.BACKENDS, default="auto")
    ap.add_argument("--runtime", default="auto")
    ap.add_argument("--wheels", type=Path, default=images.DEFAULT_WHEELS)
    ap.add_argument("--image-cache", type=Path, default=images.DEFAULT_CACHE)
    ap.add_argument("--command-timeout", type=float, default=1800.0,
                    help="cap on solve.sh's seconds (the task's agent timeout when lower; default 1800)")
    args = ap.parse_args()
    args.work = args.work.resolve()
    if args.work == REPO_ROOT or REPO_ROOT in args.work.parents:
        sys.exit(f"refusing to write trajectories of benchmark tasks inside the repository: {args.work}")
    out = args.out or args.work / "results.json"
    dirs = task_dirs(args.tasks_dir)
    if args.tasks:
        wanted = args.tasks.split(",")
        unknown = set(wanted) - {d.name for d in dirs}
        if unknown:
            sys.exit(f"no such tasks in {args.tasks_dir}: {', '.join(sorted(unknown))}")
        dirs = [d for d in dirs if d.name in wanted]
    args.work.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)

    print(f"{len(dirs)} tasks from {args.tasks_dir}, backend {args.backend}, runtime {args.runtime}, "
          f"wheels {args.wheels}; build s with * includes bootstrapping a base", flush=True)
    print(table_line([name for name, _ in COLUMNS]), flush=True)
    rows, started = [], time.monotonic()
    for path in dirs:
        t0 = time.monotonic()
        try:
            row = conform(path, args)
        except Exception as e:  # noqa: BLE001  # anything conform itself did not expect
            row = {"task": path.name, "path": str(path), "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc(), "match": None}
        row["seconds"] = round(time.monotonic() - t0, 2)
        rows.append(row)
        print(table_line(row_cells(row)), flush=True)
        write_results(out, args, rows, started)

    oracle_ok = sum((r.get("oracle") or {}).get("reward", 0) >= 1 for r in rows)
    right = sum(r.get("match") is True for r in rows)
    print(f"{len(rows)} tasks, {oracle_ok} oracle 1, {right} predicted right "
          f"({sum(r.get('match') is False for r in rows)} mismatches); {time.monotonic() - started:.0f} s; {out}")
    return 0


def write_results(out: Path, args, rows: list[dict], started: float) -> None:
    summary = {"tasks": len(rows), "oracle_1": sum((r.get("oracle") or {}).get("reward", 0) >= 1 for r in rows),
               "predicted_right": sum(r.get("match") is True for r in rows),
               "mismatches": [r["task"] for r in rows if r.get("match") is False],
               "seconds": round(time.monotonic() - started, 1)}
    settings = {"tasks_dir": str(args.tasks_dir), "backend": args.backend, "runtime": args.runtime,
                "wheels": str(args.wheels), "image_cache": str(args.image_cache), "work": str(args.work)}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"settings": settings, "summary": summary, "tasks": rows}, indent=1, default=str))
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
