"""Does the tiny model learn to copy from its context? SFT on one task set's oracle runs, measured on another's.

    .venv/bin/python -m depgpo generate-tasks --out /tmp/copy/tasks --sft 320 --pool 0 --test 16
    .venv/bin/python -m depgpo sft-data --tasks /tmp/copy/tasks/sft --out /tmp/copy/train.jsonl \
        --reference /tmp/copy/r1.json --variants 1 scale=tiny
    .venv/bin/python -m depgpo sft-data --tasks /tmp/copy/tasks/test_tb20 --out /tmp/copy/held.jsonl \
        --reference /tmp/copy/r2.json --variants 1 scale=tiny
    .venv/bin/python bench/tiny_copying.py --train /tmp/copy/train.jsonl --held /tmp/copy/held.jsonl \
        [--hidden 128 --layers 3 --steps 800 --batch 4 --lr 3e-3 --schedule cosine --loss-on assistant --save DIR]
        [--copy-steps 400 --copy-batch 64 --copy-mix 0.5 --copy-recall 0.5]  # induction: random strings written twice

The same tokenizer and model as `depgpo sft` (depgpo.train.sft.build_tiny_policy), trained with AdamW; every 100
steps it prints the training loss and, on the held-out conversations (tasks the model never saw: other values, names
and, for test_tb21, wording), the loss and the teacher-forced accuracy of the tokens the model writes. A policy that
copies values and file names from its context solves held-out tasks; one that writes the training distribution's
does not (`depgpo evaluate --policy DIR` on the test sets says which). `--loss-on all` also trains on the prompt and
the observations (language modelling of the whole transcript), which `depgpo sft` does not.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from depgpo.policy.chat import conversation_segments, messages_to_turns
from depgpo.policy.model import save_policy
from depgpo.train.induction import induction_examples, written_tokens
from depgpo.train.sft import IGNORE_INDEX, _lr_at, _pad, build_tiny_policy, encode_segments


def load(path: str, observation_chars: int) -> list[list[tuple[str, bool]]]:
    with open(path) as lines:
        return [conversation_segments(*messages_to_turns(json.loads(line)), observation_chars) for line in lines]


def held_out(model, examples) -> tuple[float, float]:
    """Loss and argmax accuracy on the tokens the model writes (teacher forcing)."""
    model.eval()
    total = correct = 0
    loss = 0.0
    with torch.no_grad():
        for first in range(0, len(examples), 8):
            ids, mask, labels = _pad(examples[first:first + 8])
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
            target, written = labels[:, 1:], labels[:, 1:] != IGNORE_INDEX
            correct += int(((out.logits[:, :-1].argmax(-1) == target) & written).sum())
            total += int(written.sum())
            loss += out.loss.item() * int(written.sum())
    model.train()
    return loss / total, correct / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--held", required=True)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--schedule", choices=("constant", "cosine"), default="cosine")
    parser.add_argument("--loss-on", choices=("assistant", "all"), default="assistant")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--copy-steps", type=int, default=0, help="induction pretraining steps before SFT")
    parser.add_argument("--copy-recall", type=float, default=0.0, help="share of a copying batch that is key-value "
                        "recall (find a value by its key)")
    parser.add_argument("--copy-mix", type=float, default=0.0, help="fraction of SFT steps that are copying batches")
    parser.add_argument("--copy-batch", type=int, default=16, help="strings per copying batch (64 forms induction "
                        "heads within 400 steps, 16 not within 3,000: docs/results.md)")
    parser.add_argument("--copy-pool", choices=("all", "written"), default="all",
                        help="tokens the copied strings are drawn from: the whole vocabulary, or those the "
                        "training conversations' assistant turns write")
    parser.add_argument("--copy-lr", type=float, help="constant lr of the copying steps before SFT (default --lr)")
    parser.add_argument("--save")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train, held = load(args.train, 400), load(args.held, 400)
    model_cfg = {"vocab_size": 1024, "hidden": args.hidden, "layers": args.layers, "heads": args.heads,
                 "kv_heads": 2, "head_dim": 64, "max_positions": 1024, "seed": 0}
    model, tokenizer = build_tiny_policy(model_cfg, train)
    examples = [encode_segments(tokenizer, segments) for segments in train]
    if args.loss_on == "all":
        examples = [(ids, list(ids)) for ids, _ in examples]
    held_examples = [encode_segments(tokenizer, segments) for segments in held]
    print(f"parameters {sum(p.numel() for p in model.parameters())}, {len(examples)} conversations of "
          f"{sum(len(ids) for ids, _ in examples) / len(examples):.0f} tokens on average")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = {"lr": args.lr, "schedule": args.schedule, "warmup_steps": 50}  # as depgpo sft's sft.* keys
    shuffle, step, start = torch.Generator().manual_seed(0), 0, time.perf_counter()
    model.train()
    special = set(tokenizer.all_special_ids)
    if args.copy_pool == "written":
        pool = written_tokens(examples, special)
    else:
        pool = [i for i in range(len(tokenizer)) if i not in special]
    print(f"copied strings draw from {len(pool)} tokens")

    def train_step(ids, mask, labels) -> float:
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    def copy_batch():
        """Random token strings written twice, the loss on the second copy (trains induction heads), and a share
        --copy-recall of key-value recall examples (depgpo.train.induction)."""
        return _pad(induction_examples(pool, args.copy_batch, args.copy_recall, shuffle))

    for group in optimizer.param_groups:  # constant lr while copying; SFT's schedule starts after
        group["lr"] = args.lr if args.copy_lr is None else args.copy_lr
    for copy in range(args.copy_steps):
        copy_loss = train_step(*copy_batch())
        if (copy + 1) % 100 == 0:
            print(f"copy {copy + 1:5d}  {time.perf_counter() - start:5.0f} s  loss {copy_loss:.3f}", flush=True)
    while step < args.steps:
        order = torch.randperm(len(examples), generator=shuffle).tolist()
        for first in range(0, len(order), args.batch):
            if step >= args.steps:
                break
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(step, args.steps, schedule)
            loss = train_step(*_pad([examples[i] for i in order[first:first + args.batch]]))
            step += 1
            if args.copy_mix and torch.rand(1, generator=shuffle).item() < args.copy_mix:
                train_step(*copy_batch())
            if step % 100 == 0 or step == args.steps:
                held_loss, accuracy = held_out(model, held_examples)
                print(f"step {step:5d}  {time.perf_counter() - start:5.0f} s  train loss {loss:.3f}  "
                      f"held-out loss {held_loss:.3f}  held-out accuracy {accuracy:.3f}", flush=True)
    if args.save:
        save_policy(model, tokenizer, args.save)


if __name__ == "__main__":
    main()
