"""The CPU kernels a run's numbers depend on: pinned before torch loads, and recorded beside each stage's output.

torch picks its CPU kernels at run time from what the processor offers: ATen's vectorised kernels (AVX-512 or
AVX2), MKL's GEMM code path (one per ISA and, outside its reproducibility mode, per vendor), oneDNN's ISA. Each
choice rounds differently, so the same tiny run gave a different SFT checkpoint, other filtered tasks and other
tables on a machine without AVX-512 (docs/reproducibility.md). The pin makes every x86-64 machine with AVX2 take
the same kernels:

- `ATEN_CPU_CAPABILITY=avx2`: ATen's kernels as on a machine without AVX-512;
- `MKL_CBWR=COMPATIBLE`: MKL's one code path that MKL keeps the same across processors and vendors (its `AVX2`
  branch is the same only across Intel processors: on others MKL uses its automatic dispatch instead);
- `ONEDNN_MAX_CPU_ISA=AVX2`: oneDNN's kernels capped at AVX2 (fp32 matmuls do not reach it today; a belt).

Thread counts come from the config (`torch_threads`, `sft.threads`), never from the machine's core count.

`depgpo.cli.main` calls `pin_cpu_kernels()` before anything imports torch, so every stage run by hand, by
Snakemake or in a submitit job is pinned (the variables are inherited by child processes too). `DEPGPO_CPU_PIN=0`
turns it off (GPU runs need none of it); a variable the user set explicitly wins, and both are recorded.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import MutableMapping
from pathlib import Path

PIN_SWITCH = "DEPGPO_CPU_PIN"  # "0" (or off/false/no) turns the pin off
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# Variables that change which kernels run, and those that set their threads (Snakemake sets the latter to a rule's
# threads); recorded when set, whoever set them. Threads are compared per stage, apart from the kernels.
KERNEL_VARIABLES = (*PINNED, "MKL_ENABLE_INSTRUCTIONS", "DNNL_MAX_CPU_ISA", "OPENBLAS_CORETYPE")
THREAD_VARIABLES = ("MKL_NUM_THREADS", "OMP_NUM_THREADS", "MKL_DYNAMIC")
RECORDED = (*KERNEL_VARIABLES, *THREAD_VARIABLES)
_SET_BY_PIN = "DEPGPO_CPU_PIN_SET"  # which of PINNED the pin set, so that a child process tells them from the user's
NUMERICS_FILE = "numerics.json"  # beside a stage's output: what produced it (read by depgpo.report)
# What must agree for two stages' numbers to come from the same kernels (threads are per stage, compared apart).
KERNEL_KEYS = ("torch", "cpu_capability", "blas", "pin", "machine")


def pin_enabled(environ: MutableMapping[str, str] = os.environ) -> bool:
    return environ.get(PIN_SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def _set_by_pin(environ: MutableMapping[str, str]) -> set[str]:
    return {name for name in environ.get(_SET_BY_PIN, "").split(",") if name}


def pin_cpu_kernels(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set PINNED in `environ` where the user has not set them (a no-op where the pin is off). Must run before torch
    is imported: ATen and MKL read these variables once, when they first dispatch."""
    ours = _set_by_pin(environ)
    if not pin_enabled(environ):
        for name in ours:  # a parent's pin, turned off here: its values are not the user's
            environ.pop(name, None)
        environ.pop(_SET_BY_PIN, None)
        return
    for name, value in PINNED.items():
        if name not in environ or name in ours:
            environ[name] = value
            ours.add(name)
    environ[_SET_BY_PIN] = ",".join(sorted(ours))


def user_settings(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """The RECORDED variables set by someone other than the pin (the user, or Snakemake for threads)."""
    ours = _set_by_pin(environ)
    return {name: environ[name] for name in RECORDED if name in environ and name not in ours}


def provenance(environ: MutableMapping[str, str] = os.environ) -> dict:
    """What produced this process's numbers, read from torch itself (imports it)."""
    import torch

    config = torch.__config__.show()
    blas = next((line.split("BLAS_INFO=")[1].split(",")[0] for line in config.splitlines() if "BLAS_INFO=" in line),
                "unknown")
    capability = torch.backends.cpu.get_cpu_capability()
    if not pin_enabled(environ):
        pin = "off"
    elif any(environ.get(name) != value for name, value in PINNED.items()):
        pin = "overridden"  # the user's own value of a pinned variable won
    elif capability != PINNED["ATEN_CPU_CAPABILITY"].upper():
        pin = "not in force"  # torch was imported before the pin, or the CPU lacks AVX2
    else:
        pin = "on"
    return {
        "torch": torch.__version__,
        "cpu_capability": capability,
        "blas": blas,
        "threads": torch.get_num_threads(),
        "pin": pin,
        "environment": {name: environ[name] for name in RECORDED if name in environ},
        "user_settings": user_settings(environ),
        "machine": platform.machine(),
        "cpu": cpu_model(),
    }


def record(out_dir: str | Path) -> dict:
    """Write this process's provenance to OUT_DIR/numerics.json (the directory is created)."""
    facts = provenance()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / NUMERICS_FILE).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    return facts


def kernels(facts: dict) -> dict:
    """The part of a provenance record that must agree for two stages' numbers to be comparable."""
    environment = facts.get("environment", {})
    return {**{key: facts.get(key) for key in KERNEL_KEYS},
            "environment": {name: environment[name] for name in KERNEL_VARIABLES if name in environment}}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
