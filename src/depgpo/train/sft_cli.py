"""`depgpo sft --data FILE.jsonl --out DIR [key=value ...]`: supervised fine-tuning of the policy.

Overrides are dotted keys of depgpo.train.sft.DEFAULT_CONFIG, e.g. `model.kind=smollm2 sft.epochs=5 sft.lr=3e-4`.
Writes DIR/checkpoint/ (model + tokenizer) and DIR/metrics.jsonl (step, epoch, loss, tokens, time_s).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, required=True, metavar="FILE.jsonl",
                        help="conversations, one per line (OpenAI chat messages with bash tool calls)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. sft.epochs=5 model.kind=smollm2")


def run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from depgpo.train.sft import run_sft, sft_config

    try:
        config = sft_config(args.overrides)
    except (OmegaConfBaseException, ValueError) as error:
        print(f"error: depgpo sft: bad override: {error}", file=sys.stderr)
        return 2
    print(OmegaConf.to_yaml(config), end="")
    checkpoint = run_sft(args.data, args.out, config)
    print(f"checkpoint: {checkpoint}")
    return 0
