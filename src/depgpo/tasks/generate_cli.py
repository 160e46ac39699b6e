"""`depgpo generate-tasks --out DIR`: write the generated task sets (sft when asked, pool, test_tb20, test_tb21)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from depgpo.tasks.checks import VERIFIERS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="directory that receives {pool,test_tb20,test_tb21}/")
    parser.add_argument("--seed", type=int, default=0, help="the same seed writes the same bytes (default 0)")
    parser.add_argument("--pool", type=int, default=24, help="tasks in the pool split (default 24)")
    parser.add_argument("--test", type=int, default=12, help="tasks in each test split (default 12)")
    parser.add_argument("--sft", type=int, default=0,
                        help="tasks in the sft split, whose oracle runs become SFT data (default 0: none written)")
    parser.add_argument("--verifier", choices=VERIFIERS, default="shell",
                        help="tests/test.sh as shell checks (default) or Harbor's pytest layout")
    parser.add_argument("--families", type=lambda text: [name for name in text.split(",") if name],
                        help="comma-separated task families (default: all)")


def run(args: argparse.Namespace) -> int:
    from depgpo.tasks.generate import generate_all

    if min(args.pool, args.test, args.sft) < 0:
        print("error: --pool, --test and --sft must not be negative", file=sys.stderr)
        return 2
    try:
        written = generate_all(args.out, args.seed, args.pool, args.test, args.families, args.sft, args.verifier)
    except (ValueError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for split, paths in written.items():
        print(f"{split}: {len(paths)} tasks in {args.out / split}")
    return 0
