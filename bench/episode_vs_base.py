"""A generated task's episode now and at an older commit (default 25a730d, the code issue 19 measured), side by side.

    .venv/bin/python bench/episode_vs_base.py [--base 25a730d] [--runs 5] [--resident-mb 0] [--out FILE.json]

The base's src/ is extracted (git archive) into a temporary directory. One worker process per version, its
PYTHONPATH at that version's src/, writes every family both versions have with its own generator (same family,
split and seed; this checkout with its default verifier) and runs the task's oracle episode when asked; the two are
asked in turn, run by run, so that machine noise hits both alike. Phases as in episode_cost.py. The tasks are each
version's own: the base's oracles run fewer commands and its verifier is pytest, which is what issue 19 asked to
make cheaper ("a generated task's episode at most a third of today's"). Both must give reward 1. `--resident-mb N`:
each worker first fills N MB of memory, as a policy and its optimizer fill an RL process (what a fork copies).
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

from episode_cost import PHASES  # bench/ is sys.path[0] when this runs as a script

REPO = Path(__file__).resolve().parent.parent

# Runs inside each version's interpreter: episode_cost.run_once, on the API both versions share (Episode, load_task,
# build_task, write_task, solution/oracle.json). One family name per stdin line, one JSON line back.
WORKER = r"""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
resident = bytearray(int(sys.argv[2]) << 20)
for page in range(0, len(resident), 4096):
    resident[page] = 1  # touched: resident, as a policy's weights are
from episode_cost import run_once
from depgpo.tasks.generate import FAMILIES, build_task, write_task
print(json.dumps(sorted(FAMILIES)), flush=True)
tmp = Path(tempfile.mkdtemp())
for line in sys.stdin:
    spec = build_task(line.strip(), "pool", 0, seed=0)
    task_dir = write_task(spec, Path(tempfile.mkdtemp(dir=tmp)) / spec.family, {})  # a fresh directory per run
    times, verifier = run_once(task_dir)
    print(json.dumps({**times, "reward": verifier["reward"], "commands": len(spec.oracle)}), flush=True)
"""


class Worker:
    def __init__(self, src: Path, resident_mb: int = 0):
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, str(REPO / "bench"), str(resident_mb)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=src.parent)
        self.families = set(json.loads(self._line()))

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the worker for {self.proc.args} exited (code {self.proc.wait()}); see its stderr above")
        return line

    def run(self, family: str) -> dict:
        self.proc.stdin.write(family + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def extract_src(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="25a730d", help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--resident-mb", type=int, default=0, help="memory each worker holds, as a policy would")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workers = {"base": Worker(extract_src(args.base, Path(tmp)), args.resident_mb),
                   "head": Worker(REPO / "src", args.resident_mb)}
        families = sorted(workers["base"].families & workers["head"].families)
        samples: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.runs):
            for family in families:
                for version, worker in workers.items():
                    sample = worker.run(family)
                    if sample["reward"] != 1.0:
                        raise SystemExit(f"{version}'s oracle of {family} got reward {sample['reward']}")
                    samples.setdefault((version, family), []).append(sample)
        for worker in workers.values():
            worker.close()
    medians = {key: {p: statistics.median(s[p] for s in runs) for p in PHASES} for key, runs in samples.items()}
    rows = [{"family": f, "version": v, "commands": samples[v, f][0]["commands"], **medians[v, f]}
            for f in families for v in workers]
    median = {v: {p: statistics.median(medians[v, f][p] for f in families) for p in PHASES} for v in workers}
    ratios = {f: medians["base", f]["episode_s"] / medians["head", f]["episode_s"] for f in families}
    git = lambda *a: subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    head = git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "src") else "")
    result = {"base": args.base, "head": head, "resident_mb": args.resident_mb,
              "runs": args.runs, "rows": rows, "median": median, "episode_ratio_base_over_head": ratios,
              "median_ratio": statistics.median(ratios.values())}
    print(f"{'family':18} {'version':7} {'cmds':>4} " + " ".join(f"{p:>11}" for p in PHASES))
    for r in rows:
        print(f"{r['family']:18} {r['version']:7} {r['commands']:>4} " + " ".join(f"{r[p]:11.3f}" for p in PHASES))
    print("episode, base / head: " + ", ".join(f"{f} {x:.2f}x" for f, x in ratios.items()) +
          f"; median {result['median_ratio']:.2f}x")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
