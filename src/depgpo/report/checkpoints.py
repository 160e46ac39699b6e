"""RL runs whose checkpoints ended byte-identical, and whether their credit had to agree.

A β value or an ablation that ends on the same weights as another run changed nothing the update used; the report
names such groups instead of letting two table rows silently agree. The weights (`checkpoint/*.safetensors`) are
hashed. For DepGPO variants the reason is checked on the logged rollouts: only a trajectory in a group of unequal
rewards has a non-zero advantage, so runs whose credit gives every such trajectory the same step factors take the same
updates (depgpo.credit with each run's β and variant, its other settings at their defaults).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

from depgpo.config import parse_run
from depgpo.credit import CreditConfig, step_factors_for


def weights_digest(checkpoint: Path) -> str | None:
    """SHA-256 over the checkpoint's safetensors files, in name order; None without any."""
    files = sorted(checkpoint.glob("*.safetensors"))
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def identical_groups(setting_dir: Path) -> list[list[Path]]:
    """Groups of two or more `rl/{run}/seed{n}` directories (with the SFT checkpoint as `sft`) of equal weights."""
    by_digest: dict[str, list[Path]] = {}
    for run_dir in [setting_dir / "sft"] + sorted(setting_dir.glob("rl/*/seed*")):
        digest = weights_digest(run_dir / "checkpoint")
        if digest is not None:
            by_digest.setdefault(digest, []).append(run_dir)
    return [group for group in by_digest.values() if len(group) > 1]


def credit_config(run: str) -> CreditConfig | None:
    """The credit of a run directory name with credit ablations (depgpo, depgpo_beta0.25, depgpo_direct_only); None
    for other runs and for names that are no run (depgpo.config.parse_run)."""
    try:
        return parse_run(run).credit()
    except ValueError:
        return None


def _live_trajectories(run_dir: Path) -> list[dict]:
    """The logged rollouts with a non-zero advantage: those whose group (update, task) has unequal rewards."""
    live = []
    for path in sorted(run_dir.glob("trajectories/update*.jsonl")):
        groups = defaultdict(list)
        for line in path.read_text().splitlines():
            if line.strip():
                trajectory = json.loads(line)
                groups[trajectory["task"]["id"]].append(trajectory)
        live += [t for group in groups.values() if len({t["verifier"]["reward"] for t in group}) > 1 for t in group]
    return live


def _reason(group: list[Path]) -> str:
    if any(run_dir.name == "sft" for run_dir in group):
        return "the SFT policy's weights, which these runs never changed (the frozen control trains at lr 0)"
    configs = [credit_config(run_dir.parent.name) for run_dir in group]
    if None in configs:
        return "not explained: runs other than DepGPO variants ended on the same weights"
    live = _live_trajectories(group[0])
    differing = sum(len({tuple(step_factors_for(trajectory, config)[0]) for config in configs}) > 1
                    for trajectory in live)
    if differing:
        return (f"not explained: their credit differs on {differing} of the {len(live)} logged trajectories with a "
                "non-zero advantage")
    return (f"must be equal: on each of the {len(live)} logged trajectories with a non-zero advantage (groups of "
            "unequal rewards) their credit gives the same step factors, so every update was the same (no credited "
            "read, indirect or partly kept write met a non-zero advantage)")


def identical_markdown(results: Path) -> list[str]:
    """The index.md section: one line per group of byte-identical checkpoints, with its reason."""
    lines = []
    for setting_dir in sorted(path.parent for path in results.glob("*/*/rl")):
        for group in identical_groups(setting_dir):
            names = ", ".join(f"`{run_dir.relative_to(setting_dir).as_posix().removeprefix('rl/')}`"
                              for run_dir in group)
            lines.append(f"- {setting_dir.relative_to(results).as_posix()}: {names}: {_reason(group)}")
    return lines or ["- none: every RL run ended on weights of its own"]
