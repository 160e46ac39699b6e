"""Checkpoint directories swapped in whole, so that a kill at any moment leaves a complete one to resume from.

    write everything into TARGET.tmp          (a kill here: TARGET is untouched; TARGET.tmp is dropped on start)
    rename TARGET -> TARGET.old               (a kill here: TARGET is missing; TARGET.tmp is complete)
    rename TARGET.tmp -> TARGET               (a kill here: TARGET.old is left over)
    delete TARGET.old

`recover` runs before a stage looks for its checkpoint and puts back whichever complete directory a kill left.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def staging_dir(target: Path) -> Path:
    return target.with_name(target.name + ".tmp")


def previous_dir(target: Path) -> Path:
    return target.with_name(target.name + ".old")


def replace_dir(staging: Path, target: Path) -> None:
    """Swap the complete directory `staging` in as `target`; the previous `target` stays until the new one is in
    place."""
    old = previous_dir(target)
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def recover(target: Path, complete: Callable[[Path], bool]) -> None:
    """Finish a `replace_dir` that a kill interrupted: with `target` missing, the complete staging directory (the
    newer) or else the previous one becomes `target`; leftovers are removed. `complete(dir)` says whether a
    directory was written to the end."""
    staging, old = staging_dir(target), previous_dir(target)
    if not target.exists():
        for candidate in (staging, old):
            if candidate.is_dir() and complete(candidate):
                candidate.rename(target)
                break
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` then rename tmp onto `path`: `path` exists only once it is written to the end."""
    partial = path.with_name(path.name + ".partial")
    write(partial)
    os.replace(partial, path)
