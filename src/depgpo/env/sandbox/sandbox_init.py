"""Pid 1 of an episode's namespaces M1/P1: mount the system directories (copy-on-write), then start the agent.

Runs as root of its namespaces inside `unshare --mount --pid --fork --mount-proc` (host root, or rootless the root of
the episode's own user namespace: privilege.py), so the mounts are private to the episode. It
stays in M1 and P1 (the agent's chain moves on into P2) so that the verifier can later `nsenter` this process's
namespaces: M1 holds the overlays and P1's /proc, from which the agent's processes are visible but not the reverse.
Kept import-light: it runs once per episode on the critical path.
"""

import os
import sys

from depgpo.env.sandbox.mount_api import idmapped_bind, mount, readonly_rbind, userns_fd


def main() -> None:
    # argv (sandbox.launcher_argv): ROOT FS UID SYSTEM_ROOT LOWER STDERR COW_DIR... -- INNER_ARGV... (no JSON: its
    # import, with `re`, costs more than the rest of this process's start)
    root, fs, uid, system, lower_kind, stderr, *rest = sys.argv[1:]
    split = rest.index("--")
    cow_dirs, inner = rest[:split], rest[split + 1:]
    system, ns_fd = system.rstrip("/"), None
    for name in cow_dirs:
        lower = f"{root}/lower/{name}"
        # The agent's overlay, and the verifier's own over the same lower where judge_view.prepare_view made its
        # mount point (its image view: an empty upper layer of its own).
        views = [(f"{root}/merged/{name}", f"{fs}/upper/{name}", f"{fs}/work/{name}")]
        if os.path.isdir(f"{root}/judge-merged/{name}"):
            views.append((f"{root}/judge-merged/{name}", f"{fs}/judge/upper/{name}", f"{fs}/judge/work/{name}"))
        if lower_kind == "read-only":  # rootless on the host's root (privilege.Privilege.system_dirs)
            for merged, _, _ in views:
                readonly_rbind(f"{system}/{name}", merged)
            continue
        if lower_kind == "idmapped":  # root: host 0 appears as the episode uid, which may then copy it up
            ns_fd = userns_fd(int(uid)) if ns_fd is None else ns_fd  # one idmap serves every lower
            idmapped_bind(f"{system}/{name}", lower, ns_fd)  # the host's /usr, or an unpacked image's
        else:  # rootless in an image the user unpacked: its files are root's inside already
            lower = f"{system}/{name}"
        for merged, upper, work in views:
            try:
                mount("overlay", merged, "overlay", f"lowerdir={lower},upperdir={upper},workdir={work}")
            except OSError as e:
                sys.exit(f"depgpo sandbox: overlay mount of {merged} failed ({e})")
    if ns_fd is not None:
        os.close(ns_fd)
    # strace's own messages ("Exit of unknown pid") must not reach the agent's terminal.
    err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(err, 2)
    os.close(err)
    child = os.fork()
    if child == 0:
        os.execvp(inner[0], inner)
    # Init of P1: reap whatever is reparented here (the verifier's orphans), and end with the agent's chain.
    while True:
        pid, status = os.wait()
        if pid == child:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main()
