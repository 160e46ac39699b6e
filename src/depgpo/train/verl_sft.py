"""SFT through verl's own SFT trainer (`verl.trainer.sft_trainer`: FSDP engine, torchrun): `sft.backend: verl`.

    run_verl_sft("conversations.jsonl", "out/sft", cfg)   # out/sft/checkpoint/ (Hugging Face model + tokenizer)

verl trains and shards; the tokens stay ours. verl reads the conversations through `ConversationDataset` (its
`data.custom_cls` hook), which encodes each one with depgpo.policy.chat exactly as the local SFT trainer and the
agent loop do: the same segments, the loss on the tokens the model writes. verl's own MultiTurnSFTDataset would
render the conversations with the model's chat template instead, whose tool-call format is not the <bash> turns
the policy samples during RL.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch
from omegaconf import DictConfig

from depgpo.policy.chat import conversation_segments, messages_to_turns
from depgpo.train.sft import IGNORE_INDEX, build_tiny_policy, cut_to_length, encode_segments
from depgpo.train.sft_import import read_conversations
from depgpo.train.verl_config import hydra_value, verl_config_dir

MESSAGES = "messages_json"  # one conversation's chat messages as JSON (their tool calls vary in shape)


class ConversationDataset(torch.utils.data.Dataset):
    """verl's SFT data set interface (`data.custom_cls`) over our Parquet rows, in verl's `no_padding` layout:
    per conversation `input_ids`, `position_ids` and `loss_mask` (1 on the tokens the model writes). Cut and filtered
    as the local trainer does; unlike it, verl's loader drops an epoch's last incomplete batch."""

    def __init__(self, parquet_files, tokenizer, config, processor=None, max_samples: int = -1):
        if config.get("pad_mode", "no_padding") != "no_padding":
            raise ValueError(f"ConversationDataset gives verl's no_padding layout; got data.pad_mode="
                             f"{config.get('pad_mode')}")
        files = [parquet_files] if isinstance(parquet_files, str) else list(parquet_files)
        rows = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        if max_samples > 0:
            rows = rows.iloc[:max_samples]
        observation_chars, max_length = config.get("observation_chars"), config.get("max_length")
        examples = [encode_segments(tokenizer, conversation_segments(*messages_to_turns(json.loads(messages)),
                                                                     observation_chars))
                    for messages in rows[MESSAGES]]
        self.examples = cut_to_length(examples, max_length, f"{files[0]}")

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids, labels = self.examples[index]
        return {"input_ids": torch.tensor(ids), "position_ids": torch.arange(len(ids)),
                "loss_mask": torch.tensor([int(label != IGNORE_INDEX) for label in labels])}


def write_parquet(conversations_jsonl: Path, path: Path) -> int:
    rows = read_conversations(Path(conversations_jsonl))
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({MESSAGES: [json.dumps(row["messages"]) for row in rows]}).to_parquet(path)
    return len(rows)


def verl_sft_overrides(cfg: DictConfig, model_path: str, train_parquet: str, out_dir: str, n_gpus: int = 1
                       ) -> list[str]:
    """verl overrides for `sft_trainer_engine.yaml` from our `sft` section (Table 5: micro-batch 1 per device), then
    the user's `sft.verl_overrides` (e.g. the attention kernel)."""
    sft = cfg.sft
    copy = sft.get("copy") or {}
    if copy.get("steps") or copy.get("mix"):
        raise ValueError(f"sft.copy.steps={copy.get('steps')}, sft.copy.mix={copy.get('mix')}: copying steps are for "
                         "the tiny model trained from scratch (sft.backend=local); set both to 0 for sft.backend=verl")
    overrides = {
        "model.path": model_path,
        "data.train_files": train_parquet,
        "data.custom_cls.path": f"pkg://{__name__}",  # imported as a module: one class, installed or not
        "data.custom_cls.name": ConversationDataset.__name__,
        "+data.observation_chars": cfg.agent.observation_chars,  # ours: the agent loop's observation cut
        "data.pad_mode": "no_padding",
        "data.max_length": sft.max_seq_len,
        "data.micro_batch_size_per_gpu": 1,
        "data.train_batch_size": sft.batch_size * n_gpus,  # sft.batch_size conversations per device and step
        "data.use_dynamic_bsz": False,
        "data.num_workers": 0,
        "optim.lr": sft.lr,
        "optim.weight_decay": sft.weight_decay,
        "optim.clip_grad": sft.grad_clip,
        "optim.lr_scheduler_type": sft.get("schedule", "constant"),  # verl's names: constant, cosine
        "optim.lr_warmup_steps": sft.get("warmup_steps", 0) or -1,  # -1: verl's lr_warmup_steps_ratio (0)
        "trainer.total_epochs": sft.epochs,
        "trainer.n_gpus_per_node": n_gpus,
        "trainer.nnodes": 1,
        "trainer.default_local_dir": out_dir,
        "trainer.save_freq": sft.checkpoint_every,  # steps; -1: at the end only
        "trainer.max_ckpt_to_keep": 2,
        "trainer.resume_mode": "auto",  # a requeued job resumes from its last checkpoint
        "trainer.logger": "[console]",
        "trainer.project_name": "depgpo",
        "trainer.experiment_name": f"{cfg.model.name}-{cfg.data.name}-sft",
        "checkpoint.save_contents": "[model,optimizer,extra,hf_model]",  # hf_model: what RL and evaluation read
    }
    return [f"{key}={hydra_value(value)}" for key, value in overrides.items()] + list(sft.get("verl_overrides", []))


def compose_verl_sft_config(cfg: DictConfig, **kwargs) -> DictConfig:
    """verl's `sft_trainer_engine` config with `verl_sft_overrides`; Hydra raises on any key verl does not have."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name="sft_trainer_engine", overrides=verl_sft_overrides(cfg, **kwargs))


def initial_model(cfg: DictConfig, conversations_jsonl: Path, out_dir: Path) -> str:
    """The model SFT starts from: the model config's path, SmolLM2's converted directory, or, for the tiny model, one
    built here (its tokenizer trained on the conversations, as the local trainer builds it)."""
    if cfg.model.kind == "smollm2":
        from depgpo.policy.model import smollm2_dir

        return str(smollm2_dir(cfg.model.cache_dir))
    if cfg.model.kind != "tiny_qwen3":
        return str(cfg.model.path)
    from depgpo.policy.model import save_policy

    segmented = [conversation_segments(*messages_to_turns(row["messages"]), cfg.agent.observation_chars)
                 for row in read_conversations(Path(conversations_jsonl))]
    save_policy(*build_tiny_policy(cfg.model, segmented), out_dir / "initial")
    return str(out_dir / "initial")


def run_verl_sft(conversations_jsonl: str | Path, out_dir: str | Path, cfg: DictConfig) -> Path:
    """Train with verl's SFT trainer on this node's GPUs (torchrun, one process per GPU); the last step's Hugging
    Face model becomes out_dir/checkpoint. A rerun with the same data and settings resumes from verl's last
    checkpoint (a requeued job); with other data or settings it starts over."""
    n_gpus = torch.cuda.device_count()
    if n_gpus == 0:
        raise RuntimeError("sft.backend=verl needs GPUs (verl's FSDP engine); on CPU use sft.backend=local")
    out_dir = Path(out_dir).resolve()
    verl_dir = out_dir / "verl"
    train = out_dir / "verl_data" / "train.parquet"
    write_parquet(conversations_jsonl, train)
    overrides = verl_sft_overrides(cfg, initial_model(cfg, conversations_jsonl, out_dir), str(train), str(verl_dir),
                                   n_gpus)
    run = {"overrides": overrides, "conversations_sha256": hashlib.sha256(Path(conversations_jsonl).read_bytes())
           .hexdigest()}
    stamp = verl_dir / "depgpo_run.json"
    if verl_dir.exists() and (not stamp.is_file() or json.loads(stamp.read_text()) != run):
        shutil.rmtree(verl_dir)  # verl's resume_mode=auto would otherwise continue another run's checkpoints
    verl_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(run, indent=1))
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n_gpus}",
                    "-m", "verl.trainer.sft_trainer", *overrides,
                    f"hydra.run.dir={verl_dir / 'hydra'}"],  # not ./outputs/ of the working directory
                   check=True)
    return export_checkpoint(verl_dir, out_dir / "checkpoint")


def export_checkpoint(verl_dir: Path, checkpoint: Path) -> Path:
    """The Hugging Face model and tokenizer of verl's last complete checkpoint (the step its tracker file names)
    as `checkpoint`."""
    tracker = Path(verl_dir) / "latest_checkpointed_iteration.txt"
    step = tracker.read_text().strip() if tracker.is_file() else None
    source = Path(verl_dir) / f"global_step_{step}" / "huggingface"
    if step is None or not any(source.glob("*.safetensors")):
        raise RuntimeError(f"{verl_dir}: verl's SFT trainer left no complete checkpoint ({tracker.name} and "
                           f"global_step_N/huggingface/*.safetensors)")
    from depgpo.train.checkpoint import replace_dir, staging_dir

    staging = staging_dir(checkpoint)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    replace_dir(staging, checkpoint)  # the previous export stays until this one is in place
    return checkpoint
