"""Trees of a built image, as `podman export` gives them and as an episode's agent sees them, for comparison.

`mini_base` makes a tiny base image from this host's own binaries (sh, bash, coreutils, find), so that Dockerfiles
with RUN steps build offline in a private store; `exported_tree` reads `podman create` + `podman export`;
`AGENT_LISTING` is the command an agent runs to list its own view; `listed_tree` parses what it wrote.
"""

from __future__ import annotations

import hashlib
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

BINARIES = ("sh", "bash", "cat", "ls", "env", "mkdir", "cp", "ln", "chmod", "find", "sha256sum", "true")
# What the harness itself mounts or makes, and what the comparison therefore leaves out (docs/sandbox.md, ENV and
# WORKDIR): pseudo file systems, a fresh /tmp, the harness's own mount points.
HARNESS_PATHS = ("/proc", "/sys", "/dev", "/tmp", "/tests", "/logs", "/.depgpo", "/.depgpo_mark", "/.depgpo_tools")
AGENT_LISTING = (  # type, mode, owner, link target, sha256 of every path outside HARNESS_PATHS
    "find / \\( " + " -o ".join(f"-path {p}" for p in HARNESS_PATHS) + " \\) -prune -o -printf '%p\\t%y\\t%m\\t%U\\t%G\\t%l\\n' "
    "> /tmp/tree.txt && find / \\( " + " -o ".join(f"-path {p}" for p in HARNESS_PATHS) + " \\) -prune -o -type f "
    "-exec sha256sum {} + > /tmp/sums.txt; echo listed")


# What differs by design (docs/sandbox.md, ENV and WORKDIR). At root the /bin, /lib, ... symlinks at `/` are host
# root's, so the agent cannot replace what the verifier runs; inside they show as nobody's (rootless: root's).
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The harness's mount points /root, /home, /run and the workdir (with its parents) exist from the start, empty where
# the image lacks them, as a container runtime makes the WORKDIR when the container starts (podman's build does not).
STARTS_WITH = ("/root", "/home", "/run")


def differences(expected: dict[str, Entry], seen: dict[str, Entry], workdir: str) -> dict[str, dict]:
    """What the agent's tree lacks, has in addition, or has otherwise than the image's, but for the above."""
    made = {*STARTS_WITH, *(str(p) for p in Path(workdir).parents if str(p) != "/"), workdir}
    extra = {p: e for p, e in seen.items() if p not in expected and not (p in made and e == ("d", "755", 0, 0, "", ""))}
    differ = {}
    for path, entry in expected.items():
        got = seen.get(path)
        if got is not None and path in SYSTEM_LINKS and got[2:4] == (65534, 65534):
            got = (*got[:2], *entry[2:4], *got[4:])
        if got is not None and got != entry:
            differ[path] = (entry, got)
    return {"missing": {p: e for p, e in expected.items() if p not in seen}, "extra": extra, "differ": differ}


def mini_base(root: Path) -> None:
    """A merged-/usr root with the host's BINARIES (sh is dash) and their shared libraries."""
    for name in ("usr/bin", "usr/lib", "usr/lib64", "etc", "root", "var", "opt"):
        (root / name).mkdir(parents=True, exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (root / link).symlink_to(target)
    libraries = set()
    for name in BINARIES:
        binary = Path(shutil.which("dash" if name == "sh" else name)).resolve()
        shutil.copy2(binary, root / "usr/bin" / name)
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        libraries |= {word for word in ldd.split() if word.startswith("/")}
    for library in libraries:
        target = root / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(library).resolve(), target)


Entry = tuple  # (type, mode, uid, gid, link target, sha256 or "")


def _kept(path: str) -> bool:
    return path != "/" and not any(path == p or path.startswith(p + "/") for p in HARNESS_PATHS)


def exported_tree(runtime: str, image: str, scratch: Path) -> dict[str, Entry]:
    """Every path of `image` as its container's file system holds it (`create` + `export`), outside HARNESS_PATHS.
    Set-id bits are left out: the harness clears them when it unpacks an image (docs/sandbox.md)."""
    container = subprocess.run([runtime, "create", image, "/bin/true"], capture_output=True, text=True,
                               check=True).stdout.strip()
    tar_path = scratch / "export.tar"
    try:
        subprocess.run([runtime, "export", "-o", str(tar_path), container], check=True, capture_output=True)
    finally:
        subprocess.run([runtime, "rm", "-f", container], capture_output=True)
    tree = {}
    with tarfile.open(tar_path) as tar:
        members = {("/" + m.name.lstrip("./")).rstrip("/") or "/": m for m in tar}
        for path, member in members.items():
            if not _kept(path) or member.ischr() or member.isblk():  # device files are never made
                continue
            kind = "d" if member.isdir() else "l" if member.issym() else "f" if member.isfile() else "?"
            if member.islnk():  # a hard link: the content of the file it links
                kind, member_data = "f", members["/" + member.linkname.lstrip("./")]
            else:
                member_data = member
            digest = hashlib.sha256(tar.extractfile(member_data).read()).hexdigest() if kind == "f" else ""
            mode = stat.S_IMODE(member_data.mode) & ~(stat.S_ISUID | stat.S_ISGID)
            tree[path] = (kind, f"{mode:o}", member_data.uid, member_data.gid,
                          member.linkname if kind == "l" else "", digest)
    tar_path.unlink()
    return tree


def listed_tree(tree_txt: str, sums_txt: str) -> dict[str, Entry]:
    """The agent's view, from what AGENT_LISTING wrote."""
    sums = {}
    for line in sums_txt.splitlines():
        digest, path = line.split("  ", 1)
        sums[path] = digest
    tree = {}
    for line in tree_txt.splitlines():
        path, kind, mode, uid, gid, target = line.split("\t")
        if _kept(path):
            tree[path] = (kind, mode, int(uid), int(gid), target, sums.get(path, ""))
    return tree
