"""The task's files in a new episode, before its shell starts: what its container would hold at start.

Host backend: the Dockerfile's COPY/ADD sources. Image backend: the image's own workdir, /root and /home, and its
other top-level entries (a `COPY data /data`) as new entries of the sandbox's `/`. All become the episode uid's
(root inside; rootless they already are the user's).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from depgpo.env.images import SystemRoot, image_dir, image_top_level
from depgpo.env.sandbox import SandboxLayout


def seed_files(layout: SandboxLayout, system: SystemRoot, task) -> list[str]:
    """Copy the task's files into the episode's writable directories; returns what could not be seeded."""
    errors = []
    image_dirs = [] if system.is_host else [
        (image_dir(system, sandbox_dir), host_dir) for sandbox_dir, host_dir in layout.writable.items()
        if sandbox_dir not in ("/logs", "/tmp")]
    for source, host_dir in image_dirs:
        if source is not None:
            shutil.copytree(source, host_dir, dirs_exist_ok=True, symlinks=True)
    owned = [host for _, host in layout.writable.items()]
    for source in [] if system.is_host else image_top_level(system, layout.rootfs):
        target = layout.rootfs / source.name  # the image's /data, /srv/x: new top-level entries of /
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)
        owned.append(target)
    for host_path, sandbox_path in (task.app_files if system.is_host else []):
        target = layout.host_path(sandbox_path)
        if target is None:
            errors.append(f"cannot seed {sandbox_path}: outside the writable locations of the sandbox")
            continue
        if Path(host_path).is_dir():
            shutil.copytree(host_path, target, dirs_exist_ok=True, symlinks=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(host_path, target, follow_symlinks=False)
    layout.give_to_episode(owned)
    return errors
