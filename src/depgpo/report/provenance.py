"""What produced a results tree's numbers: the `numerics.json` each stage wrote beside its output (depgpo.numerics),
summarised for index.md, with a note wherever stages ran on different kernels."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from depgpo.numerics import KERNEL_VARIABLES, NUMERICS_FILE, kernels


def stage_records(results: Path) -> dict[str, dict]:
    """{stage output directory relative to `results`: its provenance record}, sorted."""
    return {str(path.parent.relative_to(results)): json.loads(path.read_text())
            for path in sorted(Path(results).rglob(NUMERICS_FILE))}


def numerics_markdown(results: Path) -> list[str]:
    records = stage_records(results)
    if not records:
        return [f"- no stage recorded it (no {NUMERICS_FILE}: the stages ran before depgpo recorded it)"]
    groups: dict[str, list[str]] = defaultdict(list)
    for stage, facts in records.items():
        groups[json.dumps(kernels(facts), sort_keys=True)].append(stage)
    lines = []
    if len(groups) > 1:
        lines.append(f"- **Note: the stages ran on {len(groups)} different kernel settings**, so their numbers may "
                     "differ for reasons other than the method (docs/reproducibility.md):")
    for key, stages in groups.items():
        facts = json.loads(key)
        environment = ", ".join(f"{name}={value}" for name, value in facts["environment"].items()) or "none"
        lines.append(f"- torch {facts['torch']}, CPU capability {facts['cpu_capability']}, BLAS {facts['blas']}, "
                     f"pin {facts['pin']}, machine {facts['machine']}; environment: {environment}"
                     + (f" ({len(stages)} stages: {_stage_span(stages)})" if len(groups) > 1 else
                        f" (all {len(stages)} stages)"))
    users = {name: value for facts in records.values() for name, value in facts.get("user_settings", {}).items()
             if name in KERNEL_VARIABLES}
    if users:
        lines.append("- kernel variables the user set (they win over the pin): "
                     + ", ".join(f"{n}={v}" for n, v in sorted(users.items())))
    threads = defaultdict(list)
    for stage, facts in records.items():
        threads[facts.get("threads")].append(stage)
    lines.append("- policy threads: " + "; ".join(f"{n} ({_stage_span(stages)})" for n, stages in sorted(
        threads.items(), key=lambda item: str(item[0]))))
    cpus = sorted({facts.get("cpu", "unknown") for facts in records.values()})
    lines.append(f"- CPU: {', '.join(cpus)}")
    return lines


def _stage_span(stages: list[str]) -> str:
    """A short list of stage directories: all of them up to four, else the first three and a count."""
    return ", ".join(stages) if len(stages) <= 4 else ", ".join(stages[:3]) + f" and {len(stages) - 3} more"
