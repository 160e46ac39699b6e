"""The task's files in a new episode, before its shell starts: what its container would hold at start.

Host backend: the Dockerfile's COPY/ADD sources. Image backend: the image's own workdir, /root, /home and /run, and
its other top-level entries (a `COPY data /data`, the /app around WORKDIR /app/project) as entries of the sandbox's
`/`. All become the episode uid's (root inside; rootless they already are the user's).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from depgpo.env.images.backend import SystemRoot, image_dir, image_top_level
from depgpo.env.sandbox.layout import SandboxLayout, harness_entries
from depgpo.trajectory.scope import is_under


def seed_files(layout: SandboxLayout, system: SystemRoot, task) -> list[str]:
    """Copy the task's files into the episode's writable directories; returns what could not be seeded."""
    errors = []
    image_dirs = [] if system.is_host else [
        (image_dir(system, sandbox_dir), host_dir) for sandbox_dir, host_dir in layout.writable.items()
        if sandbox_dir not in ("/logs", "/tmp")  # /tmp starts empty, as the harness's own mount (docs/sandbox.md)
        and not (layout.view and sandbox_dir == layout.workdir)]  # the verifier's view: its workdir is the agent's
    for source, host_dir in image_dirs:
        if source is not None:
            shutil.copytree(source, host_dir, dirs_exist_ok=True, symlinks=True)
    owned = [host for inside, host in layout.writable.items() if not (layout.view and inside == layout.workdir)]
    if layout.workdir_top and not layout.view:  # /app of WORKDIR /app/project: the task's, as in its container
        owned.append(layout.rootfs / layout.workdir_top)
    for source in [] if system.is_host else image_top_level(system, harness_entries(layout)):
        target = layout.rootfs / source.name  # the image's /data, /srv/x: entries of the sandbox's /
        if layout.view and source.name == layout.workdir_top:
            continue  # the verifier's view: the agent's own, bound there
        if source.name == layout.workdir_top:
            # Around the workdir's mount point (made by prepare): the workdir itself was seeded into its mount above.
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True, ignore=_the_workdir(system, layout))
        elif source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)
        owned.append(target)
    for host_path, sandbox_path in (task.app_files if system.is_host else []):
        if layout.view and is_under(sandbox_path, (layout.agent_area,)):
            continue  # the verifier's view: its workdir is the agent's
        target = layout.host_path(sandbox_path)
        if target is None:
            errors.append(f"cannot seed {sandbox_path}: outside the writable locations of the sandbox")
            continue
        if Path(host_path).is_dir():
            shutil.copytree(host_path, target, dirs_exist_ok=True, symlinks=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(host_path, target, follow_symlinks=False)
    layout.give_to_episode(list(dict.fromkeys(owned)))
    return errors


def _the_workdir(system: SystemRoot, layout: SandboxLayout):
    """copytree's `ignore`: the image's workdir, below the directory that holds it."""
    parent, name = os.path.split(layout.workdir.lstrip("/"))
    holder = str(system.path / parent)
    return lambda directory, names: {name} & set(names) if os.path.normpath(directory) == holder else set()
