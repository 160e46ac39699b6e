"""Host vs image backend on the same generated tasks: image build time, per-episode setup and total wall time.

    .venv/bin/python bench/image_vs_host.py [--tasks 4] [--episodes 3] [--seed S] [--families a,b] [--out r.json]

Generates --tasks tasks (depgpo.tasks.generate, split pool; their Dockerfiles are FROM python:3.11-slim with COPY
and WORKDIR only, so the host backend can stand for them on a Debian 12 host) into a temporary directory, then for
each task:

- build      the first `images.system_root_for(task, "image")` of this process: bootstrapping the base if the store
             lacks it (marked), `podman build`, unpacking into the image cache. A fresh --seed (the default is
             drawn from the clock) gives tasks whose images were never built, so this is a cold build;
- warm       the same call again with the per-process memo cleared: what every later process pays once
             (podman image inspect, the unpacked copy found);
- episodes   --episodes oracle episodes per backend (solution/oracle.json, one command per turn, then the
             verifier), interleaved host, image, host, image, ... so machine noise hits both alike. Per episode:
             setup (Episode.start: sandbox, seeding the workdir, the traced shell) and total wall time (from
             Episode() to close, the verifier included), and the reward.

The generated tasks' verifier runs `python3 -m pytest` from the system, which the host has and a python:3.11-slim
image (the official one, and the bootstrapped one) has not: unchanged, every image episode scores 0 after a
verifier that fails at once. So by default the image side runs a copy of each task whose Dockerfile adds
`RUN pip install pytest` (from the wheel cache; the build pays for it): the same commands and verifier on both sides,
so the times compare. --no-add-pytest runs the tasks unchanged.

Reported: medians per task and over all episodes, and the ratio image/host.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.images import backend as images
from depgpo.env.images import base_images
from depgpo.tasks import load_task
from depgpo.tasks.dockerfile import external_bases
from depgpo.tasks.generate import generate_task_set, oracle_commands


def resolve(task, backend: str, cache: Path, wheels: Path) -> float:
    t0 = time.monotonic()
    images.system_root_for(task, backend, "auto", cache, wheels)
    return time.monotonic() - t0


def episode(task, backend: str, args) -> dict:
    config = EpisodeConfig(backend=backend, image_cache=args.image_cache, wheel_cache=args.wheels,
                           command_timeout_s=60.0)
    t0 = time.monotonic()
    with Episode(task, config) as ep:
        for turn, command in enumerate(oracle_commands(task.root)):
            ep.run_command(command, turn=turn)
        verifier = ep.verify()
        timings, errors = dict(ep.timings), list(ep.errors)
    return {"backend": backend, "total_s": time.monotonic() - t0, "setup_s": timings["setup_s"],
            "commands_s": timings["commands_s"], "verifier_s": timings["verifier_s"], "reward": verifier["reward"],
            "verifier_error": verifier["error"], "errors": errors,
            "output_tail": [] if verifier["reward"] >= 1 else verifier["output"].strip().splitlines()[-8:]}


def image_variant(path: Path) -> Path:
    """A copy of the task whose image has pytest (the host backend refuses it: it has a RUN step)."""
    copy = path.with_name(path.name + "-image")
    shutil.copytree(path, copy)
    dockerfile = copy / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().rstrip("\n") + "\nRUN pip install --no-cache-dir pytest\n")
    return copy


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--episodes", type=int, default=3, help="oracle episodes per task and backend (default 3)")
    ap.add_argument("--seed", type=int, help="task generator seed (default: from the clock, for cold builds)")
    ap.add_argument("--families", help="comma-separated generator families (default: all, in turn)")
    ap.add_argument("--no-add-pytest", dest="add_pytest", action="store_false",
                    help="run the image side on the unchanged tasks (their verifier then finds no pytest)")
    ap.add_argument("--wheels", type=Path, default=images.DEFAULT_WHEELS)
    ap.add_argument("--image-cache", type=Path, default=images.DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, help="write every measurement as JSON here")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    tmp = Path(tempfile.mkdtemp(prefix="depgpo-image-vs-host-"))
    paths = generate_task_set(tmp, "pool", args.tasks, seed, args.families.split(",") if args.families else None)
    runtime = images.find_runtime("auto")
    print(f"{len(paths)} generated tasks (seed {seed}) in {tmp}; {args.episodes} oracle episodes per backend, "
          f"interleaved; runtime {runtime}; image side "
          f"{'with RUN pip install pytest' if args.add_pytest else 'unchanged'}; times in s, medians")
    header = (f"{'task':24} {'build':>7} {'warm':>6} | {'setup host':>10} {'image':>6} {'ratio':>6} | "
              f"{'total host':>10} {'image':>6} {'ratio':>6} | reward h/i")
    print(header)
    results, all_runs = [], {"host": [], "image": []}
    for path in paths:
        task = load_task(path)
        image_task = load_task(image_variant(path)) if args.add_pytest else task
        bases = external_bases((path / "environment" / "Dockerfile").read_text())
        fresh_base = [b for b in bases if not images.in_local_store(base_images.qualified(b), runtime)]
        row = {"task": task.id, "image_task": str(image_task.root), "bases": bases,
               "base_bootstrapped_in_build": fresh_base}
        try:
            row["build_s"] = resolve(image_task, "image", args.image_cache, args.wheels)
            images._resolved.clear()  # as a new process would find it: built and unpacked already
            row["warm_resolve_s"] = resolve(image_task, "image", args.image_cache, args.wheels)
            row["host_resolve_s"] = resolve(task, "host", args.image_cache, args.wheels)
            runs = {"host": [], "image": []}
            for _ in range(args.episodes):
                for backend in ("host", "image"):
                    runs[backend].append(episode(task if backend == "host" else image_task, backend, args))
        except Exception as e:  # noqa: BLE001  # one task's failure is recorded, the others still run
            row["error"] = f"{type(e).__name__}: {e}"
            results.append(row)
            print(f"{task.id:24} FAILED: {row['error'][:200]}")
            continue
        row["episodes"] = runs
        for backend, backend_runs in runs.items():
            all_runs[backend] += backend_runs
        h_setup, i_setup = med(runs["host"], "setup_s"), med(runs["image"], "setup_s")
        h_total, i_total = med(runs["host"], "total_s"), med(runs["image"], "total_s")
        row["medians"] = {"host_setup_s": h_setup, "image_setup_s": i_setup, "host_total_s": h_total,
                          "image_total_s": i_total, "setup_ratio": i_setup / h_setup, "total_ratio": i_total / h_total}
        rewards = "/".join(",".join(f"{r['reward']:g}" for r in runs[b]) for b in ("host", "image"))
        mark = "*" if fresh_base else ""
        print(f"{task.id:24} {row['build_s']:6.1f}{mark:1} {row['warm_resolve_s']:6.2f} | {h_setup:10.3f} "
              f"{i_setup:6.3f} {i_setup / h_setup:5.2f}x | {h_total:10.3f} {i_total:6.3f} {i_total / h_total:5.2f}x "
              f"| {rewards}")
        results.append(row)
    if all_runs["host"] and all_runs["image"]:
        h_setup, i_setup = med(all_runs["host"], "setup_s"), med(all_runs["image"], "setup_s")
        h_total, i_total = med(all_runs["host"], "total_s"), med(all_runs["image"], "total_s")
        builds = [r["build_s"] for r in results if "build_s" in r]
        print(f"{'all episodes':24} {statistics.median(builds):6.1f}  {'':6} | {h_setup:10.3f} {i_setup:6.3f} "
              f"{i_setup / h_setup:5.2f}x | {h_total:10.3f} {i_total:6.3f} {i_total / h_total:5.2f}x | "
              f"reward 1: host {sum(r['reward'] >= 1 for r in all_runs['host'])}/{len(all_runs['host'])}, "
              f"image {sum(r['reward'] >= 1 for r in all_runs['image'])}/{len(all_runs['image'])}")
        print("parts, all episodes: " + "; ".join(
            f"{key.removesuffix('_s')} host {med(all_runs['host'], key):.3f} image {med(all_runs['image'], key):.3f}"
            for key in ("setup_s", "commands_s", "verifier_s")))
        print("build: first system_root_for of the task (* with bootstrapping its base); warm: the same with the "
              "process memo cleared")
        for backend in ("host", "image"):
            failed = [r for r in all_runs[backend] if r["reward"] < 1]
            if failed:
                print(f"{backend}: {len(failed)} episodes below reward 1, e.g. "
                      f"{(failed[0]['verifier_error'] or ' | '.join(failed[0]['output_tail'][-3:]))[:300]}")
    if args.out:
        args.out.write_text(json.dumps({"seed": seed, "runtime": runtime, "episodes_per_backend": args.episodes,
                                        "tasks": results}, indent=1))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
