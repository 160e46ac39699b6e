"""The host programs of an episode's process chain, and the environment the chain runs in.

The wrappers between strace and the agent's shell (sh, setpriv, prlimit, bwrap: layout.py) and those of the verifier
run traced, so every lookup they make is a ptrace stop (docs/benchmarks.md#where-an-episodes-start-goes). So each is
named by its absolute path on the host (no search of the harness's PATH), and the chain's environment is a short
PATH with no locale: the C locale loads no files, where C.UTF-8 loads a dozen in every program. Neither the agent's
shell nor the verifier sees this environment: both bwraps start from --clearenv.
"""

from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path

import depgpo

HARNESS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # the host's own programs: never a virtual environment's or a user's


@lru_cache(maxsize=None)
def host_program(name: str) -> str:
    """The absolute path of a host program the chain runs: the host's own, else the one on the harness's PATH (a
    user's own strace or bwrap where the administrator installed none: docs/sandbox.md#privilege)."""
    found = shutil.which(name, path=HARNESS_PATH) or shutil.which(name, path=os.environ.get("PATH", ""))
    if found is None:
        raise RuntimeError(f"the sandbox needs `{name}`, found neither in {HARNESS_PATH} nor on PATH; install the "
                           "sandbox's Debian packages (bash envs/setup.sh test lists them)")
    return found


def chain_env() -> dict[str, str]:
    """The environment of the chain's first process: PATH, the C locale, and PYTHONPATH naming the directory this
    depgpo was imported from, so that sandbox_init (python -S) runs the same code as the harness (a worktree's)."""
    # LC_ALL=C, not an empty locale: Python would coerce that to LC_CTYPE=C.UTF-8 (PEP 538) for every program after.
    return {"PATH": HARNESS_PATH, "LC_ALL": "C", "PYTHONPATH": str(Path(depgpo.__file__).resolve().parent.parent)}
