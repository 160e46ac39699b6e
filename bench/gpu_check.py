"""The GPU check: one training step of every method (and ablation) on the CPU and on a GPU, side by side.

The GPU machines lent to this project have torch but no strace, no bubblewrap and no verl, so the rollouts are
recorded here first, in the real traced sandbox, and the step runs there on exactly those rollouts:

    # here (sandbox + a trained tiny policy, e.g. from the tiny DAG):
    .venv/bin/python bench/gpu_check.py record --policy results/tiny/tiny/tiny/sft/checkpoint \\
        --train results/tiny/tiny/tiny/filter/rl_train.txt --out .gpu/fixture
    # on the GPU machine (or here, CPU only):
    python bench/gpu_check.py run --fixture .gpu/fixture --out gpu_check.json

`run` builds each method's local RL trainer (depgpo.train.rl.RLTrainer: verl's estimator registry and policy losses,
AdamW) once with device=cpu and once with device=cuda from the same weights, takes one step on the recorded groups,
and reports the loss, the gradient norm, how far the two updates differ, and each step's wall time. It then runs
verl's own FSDP training engine (bench/verl_engine_step.py) on the same batch where verl imports.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch

# Every compared method, and the Table 2 ablations (DepGPO with one part of the credit changed).
CONFIGS = {
    "grpo": ["method=grpo"], "dapo": ["method=dapo"], "dppo": ["method=dppo"], "gigpo": ["method=gigpo"],
    "depgpo": ["method=depgpo"], "depgpo_beta0.25": ["method=depgpo", "credit.beta=0.25"],
    **{f"depgpo_{a}": ["method=depgpo", f"ablation={a}"]
       for a in ("binary_write", "no_verifier_filter", "no_read_credit", "direct_only")},
}


def _trainer(overrides: list[str], policy: Path, tasks: list, out: Path):
    from depgpo.config import compose
    from depgpo.train.rl import RLTrainer

    return RLTrainer(compose(["scale=tiny", *overrides]), policy, tasks, out)


# ---------------------------------------------------------------------------------------------------- record
def record(args: argparse.Namespace) -> None:
    """Groups of real rollouts of `policy` on training tasks (traced sandbox), kept only where rewards differ, so
    that every method's advantage is non-zero somewhere."""
    from depgpo.tasks import load_task_set

    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    tasks = load_task_set(args.train)
    trainer = _trainer(["method=depgpo", f"rl.k={args.k}", f"rl.tasks_per_update={len(tasks)}", "device=cpu"],
                       args.policy, tasks, out / "scratch")
    groups = [g for g in trainer.collect(update=0)[0] if len({r.reward for r in g.rollouts}) > 1][:args.groups]
    if not groups:
        raise SystemExit("no task had both passing and failing rollouts; use another policy or a larger --k")
    shutil.copytree(args.policy, out / "policy", ignore=shutil.ignore_patterns("trainer_state.pt"))
    for g in groups:
        shutil.copytree(g.task.root, out / "tasks" / g.task.root.name)
    rows = [{"task": g.task.root.name, "rollouts": [dataclasses.asdict(r) for r in g.rollouts]} for g in groups]
    (out / "groups.json").write_text(json.dumps(rows))
    shutil.rmtree(out / "scratch")
    print(f"recorded {len(groups)} groups x {args.k} rollouts, rewards "
          f"{[[r.reward for r in g.rollouts] for g in groups]} -> {out}")


def load_groups(fixture: Path):
    from depgpo.agent.loop import Rollout
    from depgpo.tasks import load_task
    from depgpo.train.rl import Group

    rows = json.loads((fixture / "groups.json").read_text())
    # Without their recorded credit: each config's trainer assigns its own (rl.RLTrainer.advantages).
    fields = {f.name for f in dataclasses.fields(Rollout)} - {"step_factors", "credit_fallback", "credit_diagnostics",
                                                               "credit_s"}
    return [Group(load_task(fixture / "tasks" / row["task"]),
                  [Rollout(**{k: v for k, v in r.items() if k in fields}) for r in row["rollouts"]])
            for row in rows]


# ---------------------------------------------------------------------------------------------------- run
def _timed_step(trainer, groups) -> tuple[dict, float]:
    cuda = trainer.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    metrics = trainer.step(groups)
    if cuda:
        torch.cuda.synchronize()
    return metrics, time.perf_counter() - t0


def _step(name: str, device: str, fixture: Path, groups, scratch: Path) -> dict:
    """One step from the recorded policy (compared across devices), then a second, warm one (timed)."""
    trainer = _trainer([*CONFIGS[name], f"device={device}"], fixture / "policy", [g.task for g in groups],
                       scratch / f"{name}-{device}")
    before = [p.detach().cpu().clone() for p in trainer.model.parameters()]
    metrics, cold_s = _timed_step(trainer, groups)
    params = list(trainer.model.parameters())
    grad = torch.cat([p.grad.detach().cpu().flatten() for p in params])  # clipped, as the optimizer used it
    delta = torch.cat([(p.detach().cpu() - b).flatten() for p, b in zip(params, before)])
    _, warm_s = _timed_step(trainer, groups)
    advantages, _ = trainer.advantages(groups)
    return {"loss": metrics["train/loss"], "grad_norm": metrics["actor/grad_norm"], "cold_s": cold_s,
            "warm_s": warm_s, "grad": grad, "delta": delta, "advantage_abs_sum": float(advantages.abs().sum()),
            "model_device": str(params[0].device)}


def _rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def run_local_steps(fixture: Path, scratch: Path, devices: list[str], names=tuple(CONFIGS)) -> list[dict]:
    rows = []
    for name in names:
        groups = load_groups(fixture)  # fresh rollouts: the step factors are the config's own
        row: dict = {"config": name}
        try:
            results = {device: _step(name, device, fixture, groups, scratch) for device in devices}
            cpu = results["cpu"]
            row.update(loss_cpu=cpu["loss"], grad_norm_cpu=cpu["grad_norm"], advantage_abs_sum=cpu["advantage_abs_sum"],
                       step_s_cpu=cpu["warm_s"], first_step_s_cpu=cpu["cold_s"])
            if "cuda" in results:
                gpu = results["cuda"]
                row.update(model_device=gpu["model_device"], loss_gpu=gpu["loss"], grad_norm_gpu=gpu["grad_norm"],
                           step_s_gpu=gpu["warm_s"], first_step_s_gpu=gpu["cold_s"],
                           cpu_over_gpu_step_time=cpu["warm_s"] / gpu["warm_s"],
                           # the GPU's gradient and AdamW update against the CPU's, relative L2 distance
                           grad_rel_diff=_rel_l2(gpu["grad"], cpu["grad"]),
                           update_rel_diff=_rel_l2(gpu["delta"], cpu["delta"]))
            row["ok"] = True
        except Exception:
            row.update(ok=False, error=traceback.format_exc(limit=4))
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def run_verl_engine(fixture: Path, scratch: Path, device: str, local_rows: list[dict]) -> list[dict]:
    """verl's FSDP engine and actor loss (bench/verl_engine_step.py) on the recorded batch with each policy loss, set
    against the local trainer's step on the same device (same weights, batch and advantages). One device per process:
    verl's platform and process group are set up once."""
    sys.path.insert(0, str(Path(__file__).parent))
    from verl_engine_step import verl_engine_step

    from depgpo.config import compose

    suffix = "gpu" if device == "cuda" else "cpu"
    local = {row["config"]: row for row in local_rows}
    rows = []
    for name in ("grpo", "dapo", "dppo", "gigpo", "depgpo"):
        row: dict = {"config": name, "device": device}
        try:
            groups = load_groups(fixture)
            trainer = _trainer([*CONFIGS[name], "device=cpu"], fixture / "policy", [g.task for g in groups],
                               scratch / f"verl-{name}")
            advantages, _ = trainer.advantages(groups)
            rollouts = [r for g in groups for r in g.rollouts]
            cfg = compose(["scale=tiny", *CONFIGS[name]])
            batch = {"prompt_ids": [r.prompt_ids for r in rollouts], "response_ids": [r.response_ids for r in rollouts],
                     "response_mask": [r.response_mask for r in rollouts],
                     "old_log_probs": [r.old_logprobs for r in rollouts],
                     "advantages": [advantages[i, :len(r.response_ids)].tolist() for i, r in enumerate(rollouts)]}
            actor = {**{k: cfg.actor[k] for k in ("policy_loss", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c",
                                                  "loss_agg_mode", "entropy_coeff")}, "lr": cfg.rl.lr}
            result = verl_engine_step(str(fixture / "policy"), batch, actor, device)
            # the engine's log-probs (training forward) against the sampler's, on model-written tokens
            logprob_diff = max(abs(a - b) for lp, r in zip(result.pop("log_probs"), rollouts)
                               for a, b, m in zip(lp, r.old_logprobs, r.response_mask) if m)
            result.pop("entropy", None)
            row.update(result, max_logprob_diff_vs_sampler=logprob_diff,
                       local_loss=local.get(name, {}).get(f"loss_{suffix}"),
                       local_grad_norm=local.get(name, {}).get(f"grad_norm_{suffix}"), ok=True)
        except Exception:
            row.update(ok=False, error=traceback.format_exc(limit=6))
        print(json.dumps(row, default=str), flush=True)
        rows.append(row)
    return rows


def wide_policy(fixture: Path, out: Path, hidden: int = 1024, layers: int = 8) -> Path:
    """The recorded policy's tokenizer under a randomly initialised Qwen3 of ~76 M parameters: the same batch, a
    model large enough for the step time to say something about devices (the tiny one is launch-bound on a GPU).
    Its loss means nothing (the old log-probs are the tiny policy's); only the time and the CPU/GPU agreement do."""
    from depgpo.policy.model import build_tiny_qwen3, load_policy, save_policy

    _, tokenizer = load_policy(fixture / "policy")
    save_policy(build_tiny_qwen3(tokenizer, hidden=hidden, layers=layers, heads=16, kv_heads=8, head_dim=64),
                tokenizer, out)
    return out


def run_wide_steps(fixture: Path, scratch: Path, devices: list[str]) -> list[dict]:
    from safetensors.torch import load_file

    wide = scratch / "wide"
    shutil.rmtree(wide, ignore_errors=True)
    shutil.copytree(fixture, wide, ignore=shutil.ignore_patterns("policy"))
    wide_policy(fixture, wide / "policy")
    n = sum(t.numel() for t in load_file(wide / "policy" / "model.safetensors").values())
    rows = run_local_steps(wide, scratch, devices, names=("grpo", "depgpo"))
    for row in rows:
        row["parameters"] = n
    return rows


def run(args: argparse.Namespace) -> None:
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    report: dict = {"python": platform.python_version(), "torch": torch.__version__, "devices": devices,
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        import transformers
        import verl

        report.update(transformers=transformers.__version__, verl=verl.__version__)
    except Exception as e:  # the local steps import verl too; they will report the same error per method
        report["verl_import_error"] = repr(e)
    scratch = args.out.parent / "gpu_check_scratch"
    report["local_steps"] = run_local_steps(args.fixture, scratch, devices)
    if args.wide:
        report["wide_model_steps"] = run_wide_steps(args.fixture, scratch, devices)
    if not args.skip_verl_engine:
        report["verl_engine"] = run_verl_engine(args.fixture, scratch, devices[-1], report["local_steps"])
    shutil.rmtree(scratch, ignore_errors=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    ok = [r["config"] for r in report["local_steps"] if r["ok"]]
    print(f"local steps ok on {devices}: {len(ok)}/{len(CONFIGS)} -> {args.out}")


# ---------------------------------------------------------------------------------------------------- sft
# Without flash-attn (the lent GPU machine has none): SDPA attention, padded batches, no torch.compile.
NO_FLASH_ATTN = ("sft.verl_overrides=['+model.override_config.attn_implementation=sdpa',"
                 "'model.use_remove_padding=false','engine.use_torch_compile=false']")


def conversation_loss(model_dir: Path, conversations: Path, cfg, device: str) -> float:
    """Mean loss per model-written token of a checkpoint on the conversations (teacher forcing, no update)."""
    from depgpo.policy.chat import conversation_segments, messages_to_turns
    from depgpo.policy.model import load_policy
    from depgpo.train.sft import IGNORE_INDEX, encode_segments
    from depgpo.train.sft_import import read_conversations

    model, tokenizer = load_policy(model_dir)
    model.to(device).eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for row in read_conversations(conversations):
            segments = conversation_segments(*messages_to_turns(row["messages"]), cfg.agent.observation_chars)
            ids, labels = (x[:cfg.sft.max_seq_len] for x in encode_segments(tokenizer, segments))
            count = sum(label != IGNORE_INDEX for label in labels[1:])
            loss = model(input_ids=torch.tensor([ids], device=device),
                         labels=torch.tensor([labels], device=device)).loss
            total, tokens = total + float(loss) * count, tokens + count
    return total / tokens


def sft(args: argparse.Namespace) -> None:
    """`depgpo sft` with the local trainer (on the GPU) and with verl's SFT trainer, from the same initial model,
    on the same conversations; the loss of the initial model and of both results on those conversations."""
    import subprocess

    from depgpo.config import compose

    args.out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    common = ["scale=tiny", f"sft.epochs={args.epochs}"]
    report: dict = {"epochs": args.epochs, "device": device}
    for backend, extra in (("local", [f"device={device}"]), ("verl", ["sft.backend=verl", NO_FLASH_ATTN])):
        start = time.perf_counter()
        with open(args.out / f"sft_{backend}.log", "w") as log:
            proc = subprocess.run([sys.executable, "-m", "depgpo", "sft", "--data", str(args.data), "--out",
                                   str(args.out / backend), *common, *extra], stdout=log, stderr=subprocess.STDOUT)
        report[backend] = {"returncode": proc.returncode, "seconds": time.perf_counter() - start}
    cfg = compose(common)
    if (args.out / "verl" / "initial").is_dir():  # the tiny model verl started from (the local trainer builds the same)
        report["initial_loss"] = conversation_loss(args.out / "verl" / "initial", args.data, cfg, device)
    for backend in ("local", "verl"):
        if (args.out / backend / "checkpoint" / "config.json").is_file():
            report[backend]["loss"] = conversation_loss(args.out / backend / "checkpoint", args.data, cfg, device)
    (args.out / "sft_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record real rollouts of a policy (needs the sandbox)")
    rec.add_argument("--policy", type=Path, required=True)
    rec.add_argument("--train", type=Path, required=True, help="task set or list file (filtering's rl_train.txt)")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--k", type=int, default=4)
    rec.add_argument("--groups", type=int, default=3)
    go = sub.add_parser("run", help="one step of every method on cpu and, where torch sees one, on the GPU")
    go.add_argument("--fixture", type=Path, required=True)
    go.add_argument("--out", type=Path, required=True)
    go.add_argument("--skip-verl-engine", action="store_true")
    go.add_argument("--wide", action="store_true", help="also time grpo/depgpo steps of a ~76 M-parameter model")
    tune = sub.add_parser("sft", help="SFT with the local trainer and with verl's SFT trainer, side by side")
    tune.add_argument("--data", type=Path, required=True, help="conversations JSONL (e.g. the tiny DAG's)")
    tune.add_argument("--out", type=Path, required=True)
    tune.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    {"record": record, "run": run, "sft": sft}[args.command](args)


if __name__ == "__main__":
    main()
