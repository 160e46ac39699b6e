"""Rollout throughput through vLLM (rollout.backend=vllm) versus the local sampler, on the same tasks and model.

Both run the same agent loop (traced sandbox, verifier) on the same (task, seed) jobs; only where a turn's tokens
come from differs: the local `Policy` (transformers, one sequence per forward, agent.workers episodes side by side)
or vLLM servers started through verl's server manager (here vLLM's CPU build), with --vllm-workers episodes in
flight. Reported per backend: start-up, trajectories/s and generated tokens/s over the rollouts, generated tokens/s
of first turns alone (no sandbox), and the ratios.

    .venv/bin/python bench/vllm_rollouts.py --policy CKPT --tasks TASKS [--attempts 4] [--out bench/results/X.json]

CKPT is a policy directory (the tiny DAG's results/tiny/tiny/tiny/sft/checkpoint, or SmolLM2-135M converted by
depgpo.policy.model.smollm2_dir); TASKS a task set (e.g. generated with `depgpo generate-tasks`).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path


def measure(policy, tasks, attempts: int, agent, seed: int) -> dict:
    from depgpo.agent.loop import iter_rollouts

    jobs = [(task, seed * 100_003 + i * 101 + a) for i, task in enumerate(tasks) for a in range(attempts)]
    started = time.perf_counter()
    rollouts = list(iter_rollouts(policy, jobs, agent))
    wall = time.perf_counter() - started
    tokens = sum(sum(r.response_mask) for r in rollouts)
    return {"response_ids": [r.response_ids for r in rollouts], "trajectories": len(rollouts),
            "generated_tokens": tokens, "wall_s": round(wall, 2),
            "trajectories_per_s": round(len(rollouts) / wall, 3), "tokens_per_s": round(tokens / wall, 1),
            "turns": sum(r.num_turns for r in rollouts), "mean_reward": sum(r.reward for r in rollouts) / len(jobs)}


def measure_generation(policy, tasks, turns: int, workers: int) -> dict:
    """Generation alone: `turns` first turns (each task's prompt, seeds 0..turns-1), `workers` at a time."""
    from depgpo.agent.loop import map_in_threads

    prompts = [policy.start(tasks[i % len(tasks)].instruction).token_ids for i in range(turns)]
    started = time.perf_counter()
    outputs = list(map_in_threads(lambda job: policy.generate(job[1], job[0]), list(enumerate(prompts)), workers))
    wall = time.perf_counter() - started
    tokens = sum(len(ids) for ids, _ in outputs)
    return {"turns": turns, "tokens": tokens, "wall_s": round(wall, 2), "tokens_per_s": round(tokens / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--tasks", type=Path, required=True)
    parser.add_argument("--attempts", type=int, default=4)
    parser.add_argument("--local-workers", type=int, default=2, help="agent.workers of the local sampler")
    parser.add_argument("--vllm-workers", type=int, default=8, help="episodes in flight against vLLM")
    parser.add_argument("--turns", type=int, default=32, help="first turns of the generation-only measurement")
    parser.add_argument("--out", type=Path)
    parser.add_argument("overrides", nargs="*", default=["scale=ci"])
    args = parser.parse_args()

    import torch

    from depgpo.agent.config import agent_config
    from depgpo.config import compose
    from depgpo.policy.generate import make_policy
    from depgpo.policy.model import load_policy
    from depgpo.tasks import load_task_set
    from depgpo.train.vllm_rollouts import vllm_servers, vllm_version

    tasks = load_task_set(args.tasks)
    report = {"policy": str(args.policy), "tasks": len(tasks), "attempts": args.attempts, "overrides": args.overrides,
              "vllm": vllm_version(), "torch": torch.__version__, "machine": f"{platform.machine()}, "
              f"{torch.get_num_threads()} torch threads, {__import__('os').cpu_count()} CPUs"}

    cfg = compose([*args.overrides, f"agent.workers={args.local_workers}"])
    torch.set_num_threads(cfg.torch_threads)
    started = time.perf_counter()
    model, tokenizer = load_policy(args.policy)
    local_start = time.perf_counter() - started
    policy = make_policy(model, tokenizer, cfg)
    report["local"] = {"start_s": round(local_start, 2), "workers": args.local_workers,
                       **measure(policy, tasks, args.attempts, agent_config(cfg), cfg.seed),
                       "generation_only": measure_generation(policy, tasks, args.turns, args.local_workers)}
    print("local", {k: v for k, v in report["local"].items() if k != "response_ids"}, flush=True)
    del model

    cfg = compose([*args.overrides, f"agent.workers={args.vllm_workers}"])
    started = time.perf_counter()
    with vllm_servers(cfg, args.policy) as servers:
        vllm_start = time.perf_counter() - started
        policy = servers.policy()
        report["vllm"] = {"start_s": round(vllm_start, 2), "workers": args.vllm_workers,
                          **measure(policy, tasks, args.attempts, agent_config(cfg), cfg.seed),
                          "generation_only": measure_generation(policy, tasks, args.turns, args.vllm_workers)}
    print("vllm", {k: v for k, v in report["vllm"].items() if k != "response_ids"}, flush=True)
    # The same (task, seed) jobs: how many trajectories came out token for token the same on both samplers
    local_ids, vllm_ids = report["local"].pop("response_ids"), report["vllm"].pop("response_ids")
    report["identical_trajectories"] = sum(a == b for a, b in zip(local_ids, vllm_ids))
    report["ratio_vllm_over_local"] = {
        **{key: round(report["vllm"][key] / report["local"][key], 2) for key in ("trajectories_per_s", "tokens_per_s")},
        "generation_only_tokens_per_s": round(report["vllm"]["generation_only"]["tokens_per_s"]
                                              / report["local"]["generation_only"]["tokens_per_s"], 2)}
    print(json.dumps({"identical_trajectories": report["identical_trajectories"],
                      **report["ratio_vllm_over_local"]}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
