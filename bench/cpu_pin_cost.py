"""What the CPU-kernel pin (depgpo.numerics) costs: SFT steps and evaluation rollouts with the pin on and off, side by
side, interleaved round by round so that machine noise hits both alike.

    .venv/bin/python bench/cpu_pin_cost.py [--results results/tiny] [--rounds 3] [--out bench/results/cpu_pin_cost.json]

Each measurement is a `depgpo` process of its own (the pin is read when torch loads): `depgpo sft` on the tiny DAG's
SFT conversations (the first 96, one epoch after 20 copying steps; the time of its last step, from metrics.jsonl), and `depgpo
evaluate` of its SFT checkpoint on one test set, one round (wall time: decoding and the sandboxed episodes). Needs a
finished tiny DAG (`snakemake`) for its conversations, checkpoint and test tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from depgpo import numerics


def environment(pin: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in numerics.PINNED and not k.startswith("DEPGPO_CPU_PIN")}
    return env if pin else {**env, numerics.PIN_SWITCH: "0"}


def depgpo(args: list[str], pin: bool) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "depgpo", *args], env=environment(pin), capture_output=True,
                          text=True)
    if proc.returncode:
        raise SystemExit(f"depgpo {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return time.perf_counter() - start


def sft_seconds(conversations: Path, pin: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="pin-sft-") as out:
        depgpo(["sft", "--data", str(conversations), "--out", out, "scale=tiny", "torch_threads=2", "sft.epochs=1",
                "sft.copy.steps=20"], pin)
        last = (Path(out) / "metrics.jsonl").read_text().splitlines()[-1]
        return json.loads(last)["time_s"]


def evaluate_seconds(policy: Path, tasks: Path, pin: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="pin-eval-") as out:
        return depgpo(["evaluate", "--policy", str(policy), "--tasks", str(tasks), "--run", "sft", "--out", out,
                       "scale=tiny", "eval.rounds=1"], pin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results/tiny"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=96, help="the first N SFT conversations (12 steps)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/cpu_pin_cost.json"))
    args = parser.parse_args()
    setting = args.results / "tiny" / "tiny"
    conversations, policy = setting / "sft" / "conversations.jsonl", setting / "sft" / "checkpoint"
    tasks = args.results / "tasks" / "test_tb20"
    for path in (conversations, policy, tasks):
        if not path.exists():
            raise SystemExit(f"error: {path} not found: run the tiny DAG first (snakemake), or give --results")
    subset = Path(tempfile.mkdtemp(prefix="pin-data-")) / "conversations.jsonl"
    subset.write_text("".join(conversations.read_text().splitlines(keepends=True)[:args.conversations]))
    conversations = subset
    times: dict[str, dict[str, list[float]]] = {"sft": {"on": [], "off": []}, "evaluate": {"on": [], "off": []}}
    for round_ in range(args.rounds):
        for pin in (round_ % 2 == 0, round_ % 2 == 1):  # alternate which goes first
            mode = "on" if pin else "off"
            times["sft"][mode].append(sft_seconds(conversations, pin))
            times["evaluate"][mode].append(evaluate_seconds(policy, tasks, pin))
            print(f"round {round_} pin {mode}: sft {times['sft'][mode][-1]:.1f} s, "
                  f"evaluate {times['evaluate'][mode][-1]:.1f} s", flush=True)
    summary = {stage: {"median_on_s": statistics.median(t["on"]), "median_off_s": statistics.median(t["off"]),
                       "ratio_on_over_off": statistics.median(t["on"]) / statistics.median(t["off"]), "runs": t}
               for stage, t in times.items()}
    summary["cpu"] = numerics.cpu_model()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    for stage in ("sft", "evaluate"):
        s = summary[stage]
        print(f"{stage}: pin on {s['median_on_s']:.1f} s, off {s['median_off_s']:.1f} s, "
              f"ratio {s['ratio_on_over_off']:.2f}")


if __name__ == "__main__":
    main()
