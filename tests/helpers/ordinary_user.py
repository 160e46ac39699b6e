"""An ordinary user for the rootless tests, made as a site's administrator makes one: `useradd` with a home and
subordinate uid/gid ranges (what rootless podman and `mmdebstrap --mode=unshare` need), no sudo, no other group.

The root test run (CI) runs the sandbox suites a second time as this user (tests/test_rootless.py) and submits
the Slurm test's jobs as it (tests/workflow/test_slurm.py), so that every episode there runs rootless.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers import REPO

NAME = "depgpo-rootless"
SUBIDS = "300000-365535"  # subordinate uids and gids for the user's own namespaces (rootless podman)


def unavailable() -> str | None:
    """Why the tests cannot run as an ordinary user here (None: they can)."""
    if os.geteuid() != 0:
        return "not root: the rootless suites already run as this user (auto is rootless), none to switch to"
    for program in ("useradd", "runuser", "newuidmap", "setfacl"):
        if shutil.which(program) is None:
            return f"{program} is missing (Debian: passwd, util-linux, uidmap, acl; envs/setup.sh test installs them)"
    return None


def blocked_dirs(path: Path) -> list[Path]:
    """The directories on the way to `path` (resolved) that other users cannot pass."""
    return [parent for parent in reversed(path.resolve().parents) if not os.stat(parent).st_mode & stat.S_IXOTH]


def opened_way() -> list[Path]:
    """Let the user pass the directories on the way to this checkout and its interpreter that others cannot
    (a CI clone under /root): an ACL entry for it alone (search only, nothing listed or read), as an
    administrator would grant. Returns them, for close_way."""
    user = ensure()
    opened = []
    for path in (REPO / "pyproject.toml", Path(sys.executable)):
        for directory in blocked_dirs(path):
            if directory not in opened:
                subprocess.run(["setfacl", "-m", f"u:{user.pw_uid}:x", str(directory)], check=True)
                opened.append(directory)
    return opened


def close_way(opened: list[Path]) -> None:
    user = ensure()
    for directory in opened:
        subprocess.run(["setfacl", "-x", f"u:{user.pw_uid}", str(directory)], capture_output=True)


def ensure() -> pwd.struct_passwd:
    """The user, created on first use."""
    try:
        return pwd.getpwnam(NAME)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", NAME], check=True, capture_output=True)
    for path, flag in (("/etc/subuid", "--add-subuids"), ("/etc/subgid", "--add-subgids")):
        listed = Path(path).read_text().splitlines() if Path(path).exists() else []
        if not any(line.startswith(f"{NAME}:") for line in listed):  # useradd adds them where SUB_UID_COUNT is set
            subprocess.run(["usermod", flag, SUBIDS, NAME], check=True, capture_output=True)
    return pwd.getpwnam(NAME)


def own_dir(prefix: str) -> Path:
    """A new directory under the system's temporary directory that the user owns (root's pytest tmp_path lies
    below a directory only root may enter)."""
    user = ensure()
    path = Path(tempfile.mkdtemp(prefix=f"{NAME}-{prefix}-"))
    os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(0o755)
    return path


def give(path: Path) -> None:
    """Make `path` and all below it the user's."""
    user = ensure()
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(path)], check=True)


def share_wheel_cache() -> None:
    """Copy the wheels root's `depgpo data prefetch` fetched into the user's own cache (its own prefetch would
    download the same from PyPI): verifiers and image builds install from there offline."""
    from depgpo.env.images.backend import DEFAULT_WHEELS

    user = ensure()
    target = Path(user.pw_dir) / ".cache/depgpo/wheels"
    if DEFAULT_WHEELS.is_dir():
        shutil.copytree(DEFAULT_WHEELS, target, dirs_exist_ok=True, symlinks=True)
        give(Path(user.pw_dir) / ".cache")


def env() -> dict[str, str]:
    """The user's environment: its home, a plain PATH (with this venv's), nothing of root's but PYTHONPATH (a
    worktree's tests run with PYTHONPATH=its src over a venv installed from another checkout: the user's suites must
    import the same code)."""
    user = ensure()
    keep = {k: v for k, v in os.environ.items()
            if k in ("CI", "LANG", "LC_ALL", "TZ", "PYTHONPATH") or k.startswith("PIP_")}
    return {**keep, "HOME": user.pw_dir, "USER": NAME, "LOGNAME": NAME,
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}


def popen_kwargs() -> dict:
    """subprocess arguments that run a child as the user (no supplementary groups, its own environment)."""
    user = ensure()
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "env": env()}
