"""One policy-gradient step through verl 0.9.1's own training engine (FSDP) and actor loss (`ppo_loss`).

Mirrors what verl's `ActorRolloutRefWorker.update_actor` -> `TrainingWorker.train_batch` -> `FSDPEngine.train_batch`
does, minus Ray: the same config dataclasses, the same left/right-padded batch turned into verl's no-padding
(nested) layout by `left_right_2_no_padding`, the same meta keys, `partial(ppo_loss, config=actor_config)`.
Single process (world size 1). Run `python bench/verl_engine_step.py` for a CPU demo on a tiny Qwen3.
"""

from __future__ import annotations

import os
import socket
import time
from functools import partial

import torch

# Model/loss settings that avoid GPU-only kernels: no flash-attn (sdpa), no packed/rmpad path (it needs flash-attn
# varlen to keep sequences apart), no fused kernels or torch.compile, fp32 everywhere (FSDP mixed precision defaults
# to bf16 params, which would make the engine's log-probs differ from a plain fp32 forward).
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def _init_process(device: str) -> None:
    if torch.distributed.is_initialized():  # a second call in the same process reuses group and platform
        return
    with socket.socket() as probe:  # a free port, so that two checks on one machine do not collide
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    for key, val in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": "0", "WORLD_SIZE": "1",
                     "LOCAL_RANK": "0"}.items():
        os.environ.setdefault(key, val)
    if device == "cpu":
        use_cpu_platform()
    else:
        torch.cuda.set_device(0)
    torch.distributed.init_process_group(backend="gloo" if device == "cpu" else "nccl")


class _CPUDeviceModule:
    """torch.cpu plus the memory queries verl makes of its device module between steps (nothing to report on a CPU)."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    memory_allocated = memory_reserved = max_memory_allocated = max_memory_reserved = staticmethod(lambda *_: 0)
    empty_cache = reset_peak_memory_stats = staticmethod(lambda *_: None)
    mem_get_info = staticmethod(lambda *_: (0, 0))
    get_device_name = staticmethod(lambda *_: "CPU")  # verl's MFU estimate: an unknown device, no peak FLOP/s


def use_cpu_platform() -> None:
    """A CPU stand-in for the GPU platform verl 0.9.1 requires (it has none for CPUs), so that verl's own training
    code can run here: the GPU is the boundary this machine lacks.

    With no GPU verl falls back to 'nvidia', so get_device_id() calls torch.cuda.current_device() and fails. Its
    plugin hook `set_platform` installs a CPU one, and VERL_ENGINE_DEVICE=cuda picks the FSDP engine class (registered
    for devices cuda/npu only). verl's process-group string would name the CPU twice ("cpu:gloo,cpu:gloo"), so its
    initializer becomes plain gloo. Must run before verl.workers.engine is imported: fsdp/transformer_impl.py reads
    get_device_name() at import time."""
    import verl.utils.distributed
    from verl.plugin.platform.platform_cuda import PlatformCUDA
    from verl.plugin.platform.platform_manager import set_platform

    class PlatformCPU(PlatformCUDA):
        device_name = "cpu"
        device_module = _CPUDeviceModule()
        is_available = lambda self: True  # noqa: E731
        current_device = lambda self: "cpu"  # noqa: E731  (used as `tensor.to(get_device_id())`, FSDP device_id)
        communication_backend_name = lambda self: "gloo"  # noqa: E731

    set_platform(PlatformCPU())
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"
    verl.utils.distributed.initialize_global_process_group = (
        lambda timeout_second=None: torch.distributed.init_process_group("gloo"))


def _left_right_padded(batch: dict, pad_id: int) -> dict[str, torch.Tensor]:
    # The layout verl's rollout hands the trainer (DataProto.batch): prompts left-padded, responses right-padded,
    # input_ids = prompts ++ responses, response_mask = 0 on padding and on tool-observation tokens.
    P, R = max(map(len, batch["prompt_ids"])), max(map(len, batch["response_ids"]))
    left = lambda rows, v: torch.tensor([[v] * (P - len(r)) + list(r) for r in rows])  # noqa: E731
    right = lambda rows, v, dt=None: torch.tensor([list(r) + [v] * (R - len(r)) for r in rows], dtype=dt)  # noqa: E731
    prompts, responses = left(batch["prompt_ids"], pad_id), right(batch["response_ids"], pad_id)
    attention_mask = torch.cat([left([[1] * len(p) for p in batch["prompt_ids"]], 0),
                                right([[1] * len(r) for r in batch["response_ids"]], 0)], dim=1)
    return {"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            # as verl's compute_position_id_with_mask
            "position_ids": torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0),
            "response_mask": right(batch["response_mask"], 0),
            "old_log_probs": right(batch["old_log_probs"], 0.0, torch.float32),
            "advantages": right(batch["advantages"], 0.0, torch.float32)}


def verl_engine_step(model_dir: str, batch: dict, actor: dict, device: str) -> dict:
    _init_process(device)
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import Metric
    from verl.workers.config import FSDPActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.config.actor import PolicyLossConfig
    from verl.workers.engine import EngineRegistry
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    n = len(batch["prompt_ids"])
    # FSDP1 ("fsdp", verl's default for dp_actor) is built with sync_module_states=True, which torch only allows for
    # GPU-resident params; FSDP2 ("fsdp2", fully_shard) has no such check, so CPU uses it.
    strategy = actor.get("strategy") or ("fsdp2" if device == "cpu" else "fsdp")
    model_config = HFModelConfig(path=model_dir, use_remove_padding=False, enable_gradient_checkpointing=False,
                                 override_config={"attn_implementation": "sdpa"})
    actor_config = FSDPActorConfig(  # what ActorRolloutRefWorker.init_model builds from actor_rollout_ref.actor
        strategy=strategy, rollout_n=1, ppo_mini_batch_size=n, ppo_micro_batch_size_per_gpu=n, use_dynamic_bsz=False,
        use_torch_compile=False, use_remove_padding=False,
        clip_ratio_low=actor["clip_ratio_low"], clip_ratio_high=actor["clip_ratio_high"],
        clip_ratio_c=actor["clip_ratio_c"], loss_agg_mode=actor["loss_agg_mode"],
        entropy_coeff=actor["entropy_coeff"], policy_loss=PolicyLossConfig(loss_mode=actor["policy_loss"]),
        optim=FSDPOptimizerConfig(lr=actor["lr"], total_training_steps=1, clip_grad=1.0),
        fsdp_config=FSDPEngineConfig(strategy=strategy, model_dtype="fp32", mixed_precision=FP32,
                                     use_torch_compile=False, use_remove_padding=False, use_dynamic_bsz=False,
                                     micro_batch_size_per_gpu=n, param_offload=False, optimizer_offload=False),
        model_config=model_config)
    engine = EngineRegistry.new(model_type="language_model", backend=strategy, model_config=model_config,
                                engine_config=actor_config.engine, optimizer_config=actor_config.optim,
                                checkpoint_config=actor_config.checkpoint)
    engine.initialize()  # builds HF model, FSDP wrap, AdamW, LR scheduler

    # Trainer side (RayPPOTrainer._update_actor): DataProto -> TensorDict -> no-padding, plus meta info.
    data = tu.get_tensordict(_left_right_padded(batch, model_config.tokenizer.pad_token_id),
                             non_tensor_dict={"temperature": 1.0, "multi_turn": True})
    data = left_right_2_no_padding(data)
    calculate_entropy = actor["entropy_coeff"] != 0.0
    tu.assign_non_tensor(data, calculate_entropy=calculate_entropy, distillation_use_topk=False,
                         distillation_only=False, global_batch_size=n, compute_loss=True,
                         # worker side (TrainingWorker.train_mini_batch / train_batch)
                         global_token_num=data["input_ids"].offsets().diff().tolist(), update_lr_scheduler=True,
                         disable_auto_offload=True, use_remove_padding=False, use_dynamic_bsz=False,
                         max_token_len_per_gpu=None, micro_batch_size_per_gpu=n, use_fused_kernels=False,
                         pad_token_id=model_config.tokenizer.pad_token_id,
                         return_model_output=True)  # keep the forward's log-probs (train_batch drops them)

    before = [p.detach().clone() for p in engine.module.parameters()]
    start = time.perf_counter()
    with engine.train_mode(disable_auto_offload=True):
        output = engine.train_batch(data, loss_function=partial(ppo_loss, config=actor_config))
    lr = engine.lr_scheduler_step()
    if device == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    change = max((p.detach() - b).abs().max().item() for p, b in zip(engine.module.parameters(), before))

    metrics = {}  # one value per micro-batch; verl's Metric objects carry their own aggregation (SUM or MEAN)
    for key, vals in output["metrics"].items():
        vals = vals if isinstance(vals, list) else [vals]
        merged = vals[0].init_list() if isinstance(vals[0], Metric) else None
        for v in vals if merged else []:
            merged.extend(v)
        metrics[key] = float(merged.aggregate()) if merged else float(vals[-1])
    resp_len = [len(r) for r in batch["response_ids"]]
    model_out = output["model_output"]
    result = {"loss": sum(output["loss"]), "metrics": metrics, "grad_norm": metrics.pop("grad_norm"), "lr": lr,
              "param_max_abs_change": change, "params_changed": change > 0, "wall_time_s": wall,
              "engine": type(engine).__name__, "fsdp_module": type(engine.module).__name__}
    for key in ("log_probs", "entropy"):  # (total_tokens,) nested -> per-response lists, as the trainer does
        if key in model_out:
            padded = no_padding_2_padding(model_out[key], data).float().cpu()
            result[key] = [padded[i, :resp_len[i]].tolist() for i in range(n)]
    return result


def main() -> None:
    import tempfile

    from depgpo.policy.model import build_tiny_qwen3, save_policy, train_tokenizer

    texts = ["ls -la /tmp", "cat README.md | head", "echo hello world", "grep -rn foo src/", "the file is empty"] * 20
    tokenizer = train_tokenizer(texts, vocab_size=300)
    model = build_tiny_qwen3(tokenizer)
    model_dir = tempfile.mkdtemp(prefix="verl_engine_step_")
    save_policy(model, tokenizer, model_dir)

    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [enc("list the files"), enc("show the readme please"), enc("say hello")]
    # response = action tokens, tool observation (mask 0), more action tokens
    parts = [(enc("ls -la"), enc("total 0"), enc("done")), (enc("cat README.md"), enc("the file is empty"), []),
             (enc("echo hello"), [], [])]
    responses = [a + o + b for a, o, b in parts]
    masks = [[1] * len(a) + [0] * len(o) + [1] * len(b) for a, o, b in parts]

    old_log_probs = []  # plain HF forward, fp32, eval mode
    model.eval()
    with torch.no_grad():
        for p, r in zip(prompts, responses):
            logits = model(torch.tensor([p + r])).logits[0, len(p) - 1:-1]
            token_logprobs = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(r)[:, None])[:, 0]
            old_log_probs.append(token_logprobs.tolist())
    advantages = [[a] * len(r) for a, r in zip([1.0, -0.5, 0.25], responses)]
    batch = {"prompt_ids": prompts, "response_ids": responses, "response_mask": masks,
             "old_log_probs": old_log_probs, "advantages": advantages}
    actor = {"policy_loss": "vanilla", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0,
             "loss_agg_mode": "token-mean", "entropy_coeff": 0.0, "lr": 1e-3}
    result = verl_engine_step(model_dir, batch, actor, "cuda" if torch.cuda.is_available() else "cpu")
    diff = max(abs(a - b) for lp, old in zip(result["log_probs"], old_log_probs) for a, b in zip(lp, old))
    for key, val in result.items():
        print(f"{key}: {val}")
    print(f"max |engine log_prob - HF old_log_prob|: {diff:.3e}")


if __name__ == "__main__":
    main()
