"""Supervised fine-tuning on stored conversations: the loss is on the tokens the model writes, nothing else.

    run_sft("conversations.jsonl", "out/sft", depgpo.config.compose(["scale=tiny", "sft.epochs=5"]))
    # out/sft/checkpoint/  (save_pretrained model + tokenizer)   out/sft/metrics.jsonl  (one line per step)

Each conversation is rendered with depgpo.policy.chat and tokenized segment by segment, exactly as the Policy builds
its context during RL, so the assistant tokens trained on here are the tokens the policy samples later.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from depgpo.policy.chat import conversation_segments, messages_to_turns
from depgpo.policy.generate import tokenize
from depgpo.policy.device import resolve_device
from depgpo.policy.model import build_tiny_qwen3, load_smollm2, save_policy, train_tokenizer
from depgpo.train.checkpoint import replace_dir, staging_dir
# IGNORE_INDEX: the label of tokens without loss (prompt, template, observations, padding)
from depgpo.train.induction import IGNORE_INDEX, induction_examples, written_tokens
from depgpo.train.progress import Progress
from depgpo.train.sft_import import read_conversations



def run_sft(conversations_jsonl: str | Path, out_dir: str | Path, cfg: DictConfig) -> Path:
    """Train on the conversations of a JSONL file; returns the checkpoint directory (out_dir/checkpoint).

    `cfg` is the composed config (depgpo.config.compose): `model`, `sft`, `seed`, and `agent.observation_chars`,
    which must be the value the RL agent loop uses, so that SFT and RL see the same observation truncation."""
    out_dir = Path(out_dir)
    model_cfg = cfg.model
    train_cfg = {**OmegaConf.to_container(cfg.sft, resolve=True), "seed": cfg.seed}
    segmented = [conversation_segments(*messages_to_turns(conversation), cfg.agent.observation_chars)
                 for conversation in read_conversations(Path(conversations_jsonl))]
    if model_cfg["kind"] == "tiny_qwen3":
        model, tokenizer = build_tiny_policy(model_cfg, segmented)
    elif model_cfg["kind"] == "smollm2":
        model, tokenizer = load_smollm2(Path(model_cfg["cache_dir"]).expanduser())
    else:
        raise ValueError(f"model.kind={model_cfg['kind']!r}: expected tiny_qwen3 or smollm2")

    examples = cut_to_length([encode_segments(tokenizer, segments) for segments in segmented],
                             train_cfg["max_seq_len"], str(conversations_jsonl))

    out_dir.mkdir(parents=True, exist_ok=True)  # only once the data has been read: bad input writes nothing
    _train(model.to(resolve_device(cfg.device)), examples, train_cfg, out_dir / "metrics.jsonl",
           set(tokenizer.all_special_ids))
    checkpoint = out_dir / "checkpoint"
    staging = staging_dir(checkpoint)
    shutil.rmtree(staging, ignore_errors=True)
    save_policy(model.cpu(), tokenizer, staging)
    replace_dir(staging, checkpoint)  # a kill while saving leaves the previous checkpoint, never half of one
    return checkpoint


def build_tiny_policy(model_cfg: Mapping, segmented: list[list[tuple[str, bool]]]):
    """The tiny model SFT starts from: its tokenizer trained on the conversations' text, sized by `model_cfg`."""
    tokenizer = train_tokenizer(["".join(text for text, _ in segments) for segments in segmented],
                                model_cfg["vocab_size"])
    model = build_tiny_qwen3(tokenizer, hidden=model_cfg["hidden"], layers=model_cfg["layers"],
                             heads=model_cfg["heads"], kv_heads=model_cfg["kv_heads"],
                             head_dim=model_cfg["head_dim"], max_positions=model_cfg["max_positions"],
                             seed=model_cfg["seed"])
    return model, tokenizer


def cut_to_length(examples: list[tuple[list[int], list[int]]], max_seq_len: int, source: str
                  ) -> list[tuple[list[int], list[int]]]:
    """Examples cut to max_seq_len tokens (said on stderr), without those left with no assistant token."""
    cut = sum(len(ids) > max_seq_len for ids, _ in examples)
    if cut:
        print(f"sft: {cut} of {len(examples)} conversations cut to sft.max_seq_len={max_seq_len} tokens",
              file=sys.stderr)
    examples = [(ids[:max_seq_len], labels[:max_seq_len]) for ids, labels in examples]
    examples = [example for example in examples if any(label != IGNORE_INDEX for label in example[1])]
    if not examples:
        raise ValueError(f"{source}: no conversation has assistant tokens within sft.max_seq_len={max_seq_len}")
    return examples


def encode_segments(tokenizer, segments: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
    """Token ids and labels: a token's own id where the model wrote it, IGNORE_INDEX elsewhere."""
    ids: list[int] = []
    labels: list[int] = []
    for text, written_by_model in segments:
        segment_ids = tokenize(tokenizer, text)
        ids += segment_ids
        labels += segment_ids if written_by_model else [IGNORE_INDEX] * len(segment_ids)
    return ids, labels


def _train(model, examples: list[tuple[list[int], list[int]]], train_cfg: Mapping, metrics_path: Path,
           special_ids: set[int]) -> None:
    """AdamW over the examples for `epochs`, after `copy.steps` copying steps (depgpo.train.induction) and with a
    copying step after a `copy.mix` share of the SFT steps; the lr is constant or a cosine after a linear warm-up."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=train_cfg["lr"], weight_decay=train_cfg["weight_decay"])
    shuffle = torch.Generator().manual_seed(train_cfg["seed"])
    batch_size = train_cfg["batch_size"]
    copy = train_cfg.get("copy") or {"steps": 0, "mix": 0.0}
    tokens = written_tokens(examples, special_ids) if copy["steps"] or copy["mix"] else []
    recall = copy.get("recall", 0.0)  # the share of recall examples in a copying batch
    total = train_cfg["epochs"] * math.ceil(len(examples) / batch_size)
    model.train()
    start, step = time.perf_counter(), 0

    def optimise(batch: list[tuple[list[int], list[int]]], lr: float) -> tuple[float, int]:
        for group in optimizer.param_groups:
            group["lr"] = lr
        input_ids, attention_mask, labels = (t.to(model.device) for t in _pad(batch))
        # Hugging Face shifts the labels and averages the loss over the labelled tokens of the batch.
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        if train_cfg["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg["grad_clip"])
        optimizer.step()
        return loss.item(), int((labels[:, 1:] != IGNORE_INDEX).sum())

    # Counted: the copying steps before SFT and the SFT steps; a mixed-in copying step (drawn at random) is not.
    note = f"{len(examples)} conversations, {copy['steps'] + total} steps; the loss of each in {metrics_path}"
    with metrics_path.open("w") as metrics, Progress(copy["steps"] + total, "sft", "step", note=note) as progress:

        def log(phase: str, epoch: int, loss: float, tokens_seen: int) -> None:
            metrics.write(json.dumps({"phase": phase, "step": step, "epoch": epoch, "loss": loss, "tokens": tokens_seen,
                                      "time_s": round(time.perf_counter() - start, 3)}) + "\n")

        for copy_step in range(copy["steps"]):
            log("copy", -1, *optimise(induction_examples(tokens, copy["batch"], recall, shuffle), copy["lr"]))
            progress.advance(phase="copy")
        for epoch in range(train_cfg["epochs"]):
            order = torch.randperm(len(examples), generator=shuffle).tolist()
            for first in range(0, len(order), batch_size):
                loss, labelled = optimise([examples[i] for i in order[first:first + batch_size]],
                                          _lr_at(step, total, train_cfg))
                step += 1
                log("sft", epoch, loss, labelled)
                progress.advance(phase="sft", epoch=epoch, loss=f"{loss:.3f}")
                if copy["mix"] and torch.rand(1, generator=shuffle).item() < copy["mix"]:
                    log("copy", epoch, *optimise(induction_examples(tokens, copy["batch"], recall, shuffle),
                                                 copy["lr"]))


def _lr_at(step: int, total: int, train_cfg: Mapping) -> float:
    """sft.lr, constant; or with sft.schedule=cosine a linear warm-up over sft.warmup_steps, then a cosine to 0."""
    lr, warmup = train_cfg["lr"], train_cfg.get("warmup_steps", 0)
    if train_cfg.get("schedule", "constant") == "constant":
        return lr
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _pad(batch: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad a batch: input ids, attention mask, labels. Padding is masked out, so its token id is irrelevant."""
    length = max(len(ids) for ids, _ in batch)
    input_ids = torch.tensor([ids + [0] * (length - len(ids)) for ids, _ in batch])
    attention_mask = torch.tensor([[1] * len(ids) + [0] * (length - len(ids)) for ids, _ in batch])
    labels = torch.tensor([targets + [IGNORE_INDEX] * (length - len(targets)) for _, targets in batch])
    return input_ids, attention_mask, labels
