"""Command-line entry points of the pipeline stages that need the composed Hydra config (docs/pipeline.md).

Each stage: `depgpo STAGE --in… --out… [key=value …]`. The overrides select the Hydra groups (scale=, method=,
ablation=, model=, data=) and any single key (credit.beta=0.25, seed=1). Heavy imports happen inside `run_*`.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path


def _overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="Hydra overrides, e.g. scale=tiny method=depgpo credit.beta=0.25 seed=1")


def _compose(args: argparse.Namespace):
    from depgpo.config import compose

    try:
        cfg = compose(args.overrides)
    except ModuleNotFoundError:
        raise  # validation imports the training code: without torch, depgpo.cli names the extra that brings it
    except Exception as e:  # Hydra's own messages name the group/key and list the valid options
        raise SystemExit(f"error: config: {one_line(e)}")
    import torch

    from depgpo.policy.device import resolve_device

    try:
        resolve_device(cfg.device)  # fail before any work: device=cuda on a machine without a GPU
    except ValueError as e:
        raise SystemExit(f"error: config: {e}")

    torch.set_num_threads(cfg.torch_threads)
    return cfg


def record_numerics(out: Path) -> None:
    """OUT/numerics.json: the kernels, threads and pin that produced the stage's output (depgpo.numerics), once it
    is written; the report says where stages differ. A resumed RL run records the process that finished it."""
    from depgpo.numerics import record

    record(out)


def _gpus_for(setting: str, why: str) -> None:
    """verl's trainers need GPUs: say so before any work, naming the setting and the CPU alternative."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(f"error: config: {setting}=verl needs GPUs ({why}); on this machine use {setting}=local")


def one_line(error: BaseException) -> str:
    """An exception's message on one line: Hydra's span several, and list the options after a line ending in ':'
    ("Available options in 'method':"), then the config search path, which is left out."""
    parts: list[str] = []
    listing = False
    for line in str(error).split("Config search path:")[0].splitlines():
        line = line.strip()
        if not line:
            continue
        if listing:
            parts[-1] += (" " if parts[-1].endswith(":") else ", ") + line
        else:
            parts.append(line)
            listing = line.endswith(":")
    return "; ".join(parts) or type(error).__name__


# What `save_pretrained` writes (depgpo.policy.model.save_policy): the model config, weights, and a tokenizer.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
CHECKPOINT_EXPECTED = ("expected a policy checkpoint directory (config.json, model.safetensors, tokenizer.json) "
                       "as `depgpo sft` writes it to OUT/checkpoint")


def check_checkpoint(checkpoint: Path, option: str = "--policy") -> None:
    """Fail before any work, in one line naming the path, when `checkpoint` is not a complete policy checkpoint."""
    def bad(problem: str):
        raise SystemExit(f"error: {option} {checkpoint}: {problem}; {CHECKPOINT_EXPECTED}")

    if not checkpoint.exists():
        bad("no such directory")
    if not checkpoint.is_dir():
        bad("is a file, not a directory")
    present = {path.name for path in checkpoint.iterdir() if not path.is_file() or path.stat().st_size > 0}
    if not present:
        bad("the directory is empty")
    missing = [what for what, names in (("config.json", ("config.json",)), ("model weights", WEIGHT_FILES),
                                        ("tokenizer", TOKENIZER_FILES)) if present.isdisjoint(names)]
    if missing:
        bad(f"no {' and no '.join(missing)} (or an empty file) in it")


def _tasks(path: Path):
    """The task set at `path` (a directory of tasks, or a file listing them), or one line saying what is wrong."""
    from depgpo.tasks import TaskFormatError, load_task_set

    try:
        return load_task_set(path)
    except TaskFormatError as e:
        raise SystemExit(f"error: {e}")


@contextmanager
def _policy(checkpoint: Path, cfg, temperature: float | None = None):
    """The sampling policy of filtering and evaluation, by rollout.backend: the checkpoint in this process (local),
    or vLLM servers started for the stage and stopped after it (vllm)."""
    check_checkpoint(checkpoint)
    if cfg.rollout.backend == "vllm":
        from depgpo.train.vllm_rollouts import ServingError, vllm_servers

        with ExitStack() as stack:
            try:  # vLLM missing, no device, a head size or tensor parallel size it cannot serve: before any work
                servers = stack.enter_context(vllm_servers(cfg, checkpoint))
            except ServingError as e:
                raise SystemExit(f"error: {e}")
            yield servers.policy(temperature)
        return
    if cfg.rollout.backend != "local":
        raise SystemExit(f"error: config: rollout.backend={cfg.rollout.backend!r}; valid: local, vllm")
    from depgpo.policy.device import resolve_device
    from depgpo.policy.model import load_policy
    from depgpo.policy.generate import make_policy

    model, tokenizer = load_policy(checkpoint)
    model.to(resolve_device(cfg.device)).eval()
    yield make_policy(model, tokenizer, cfg, temperature)


# --------------------------------------------------------------------------- sft-data
def add_sft_data(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--tasks", type=Path, help="generated task set: run its oracle solutions in the sandbox")
    source.add_argument("--import", dest="import_from", type=Path, metavar="FILE",
                        help="user-given conversations (JSONL or Parquet of chat messages): check and normalise")
    parser.add_argument("--out", type=Path, required=True, help="conversations JSONL to write")
    parser.add_argument("--reference", type=Path, required=True, help="reference_credit.json to write (Fig. 1d)")
    parser.add_argument("--variants", type=int, default=3, help="conversations per task (distractor placements)")
    parser.add_argument("--max-distractors", type=int, default=2)
    parser.add_argument("--incomplete", type=int, default=0,
                        help="extra conversations per task that stop before the oracle's last change (kept unverified)")
    parser.add_argument("--reference-sample", type=int, default=500,
                        help="with --import: conversations whose static credit makes the Figure 1(d) reference")
    _overrides(parser)


def run_sft_data(args: argparse.Namespace) -> int:
    cfg = _compose(args)
    if args.import_from is not None:
        from depgpo.train.sft_import import ConversationError, import_conversations

        try:
            counts = import_conversations(args.import_from, args.out, args.reference, args.reference_sample,
                                          cfg.seed)
        except ConversationError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    else:
        from depgpo.tasks import task_dirs
        from depgpo.agent.config import agent_config
        from depgpo.train.sft_data import build_sft_data

        counts = build_sft_data(task_dirs(args.tasks), args.out, args.reference, agent_config(cfg), args.variants,
                                args.max_distractors, cfg.seed, args.incomplete)
    print(json.dumps(counts))
    return 0 if counts["conversations"] else 1


# --------------------------------------------------------------------------- sft
def add_sft(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, required=True, help="conversations JSONL (OpenAI chat messages)")
    parser.add_argument("--out", type=Path, required=True, help="directory for checkpoint/ and metrics.jsonl")
    _overrides(parser)


def run_sft(args: argparse.Namespace) -> int:
    from depgpo.train.sft_import import ConversationError

    cfg = _compose(args)
    if cfg.sft.backend == "verl":
        _gpus_for("sft.backend", "verl's FSDP engine")
        from depgpo.train.verl_sft import run_verl_sft as train
    elif cfg.sft.backend == "local":
        from depgpo.train.sft import run_sft as train
    else:
        raise SystemExit(f"error: config: sft.backend={cfg.sft.backend!r}; valid: local, verl")
    try:
        checkpoint = train(args.data, args.out, cfg)
    except ConversationError as e:  # raised while reading --data, before either trainer writes anything
        raise SystemExit(f"error: {e}")
    record_numerics(args.out)
    print(f"checkpoint: {checkpoint}")
    return 0


# --------------------------------------------------------------------------- filter
def add_filter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", type=Path, required=True, help="SFT checkpoint directory")
    parser.add_argument("--tasks", type=Path, required=True, help="candidate task set")
    parser.add_argument("--out", type=Path, required=True)
    _overrides(parser)


def run_filter(args: argparse.Namespace) -> int:
    cfg = _compose(args)  # first: a bad value is reported before the slow imports
    from depgpo.train.filtering import run_filter as select
    from depgpo.agent.config import agent_config

    tasks = _tasks(args.tasks)
    with _policy(args.policy, cfg) as policy:
        summary = select(policy, tasks, agent_config(cfg), cfg.filter.attempts, cfg.filter.val_fraction, cfg.seed,
                         args.out)
    record_numerics(args.out)
    print(json.dumps({k: v for k, v in summary.items() if k != "success_counts"}))
    if summary["rl_train"] == 0:
        print("error: no task was solved in some but not all attempts: nothing to train on. Train the SFT "
              "policy longer, or use more candidate tasks.", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------- rl
def add_rl(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", type=Path, required=True, help="starting checkpoint (the SFT policy)")
    parser.add_argument("--train", type=Path, required=True, help="rl_train.txt: task directories, one per line")
    parser.add_argument("--out", type=Path, required=True, help="run directory (resumes from its checkpoint/)")
    _overrides(parser)


def run_rl(args: argparse.Namespace) -> int:
    cfg = _compose(args)
    check_checkpoint(args.policy)
    if cfg.rl.backend == "verl":
        _gpus_for("rl.backend", "vLLM rollouts, verl's FSDP engine")
        from depgpo.train.verl_trainer import run_verl_rl

        run_verl_rl(cfg, args.policy, args.train, args.out)
        record_numerics(args.out)
        return 0
    if cfg.rl.backend != "local":
        raise SystemExit(f"error: config: rl.backend={cfg.rl.backend!r}; valid: local, verl")
    from depgpo.train.rl import RLTrainer

    RLTrainer(cfg, args.policy, _tasks(args.train), args.out).run()
    record_numerics(args.out)
    return 0


# --------------------------------------------------------------------------- evaluate
def add_evaluate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", type=Path, required=True, help="checkpoint to evaluate")
    parser.add_argument("--tasks", type=Path, nargs="+", required=True, help="test task set(s)")
    parser.add_argument("--run", required=True, help="run name recorded in the result (sft, grpo, depgpo, ...)")
    parser.add_argument("--out", type=Path, required=True, help="directory that receives {test set}.json")
    _overrides(parser)


def run_evaluate(args: argparse.Namespace) -> int:
    cfg = _compose(args)  # first: a bad value is reported before the slow imports
    from depgpo.evaluate import evaluate, write_evaluation
    from depgpo.agent.config import agent_config

    task_sets = {task_set: _tasks(task_set) for task_set in args.tasks}  # all checked before the first is run
    with _policy(args.policy, cfg, cfg.eval.temperature) as policy:  # loaded (or served) once for all test sets
        for task_set, tasks in task_sets.items():
            result = evaluate(policy, tasks, agent_config(cfg), cfg.eval.rounds, cfg.seed, args.run, task_set.stem)
            write_evaluation(result, args.out / f"{task_set.stem}.json")
            print(f"{args.run} on {task_set.stem}: pass@1 {result['mean']:.1f} ± {result['sd']:.1f}")
    record_numerics(args.out)
    return 0
