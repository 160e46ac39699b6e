"""Pid 1 of an episode's namespaces: mount the copy-on-write system directories, then exec strace.

Runs as host root inside `unshare --mount --pid --fork --mount-proc`, so the mounts are private to the episode.
Kept import-light: it runs once per episode on the critical path.
"""

import json
import os
import sys

from depgpo.env.idmap import idmapped_bind


def main() -> None:
    spec = json.loads(sys.argv[1])
    root, uid, system = spec["layout"]["root"], spec["layout"]["uid"], spec["layout"]["system_root"].rstrip("/")
    for name in spec["layout"]["cow_dirs"]:
        lower, upper, work, merged = (f"{root}/{part}/{name}" for part in ("lower", "upper", "work", "merged"))
        idmapped_bind(f"{system}/{name}", lower, uid)  # the host's /usr, or an unpacked image's
        opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
        rc = os.spawnvp(os.P_WAIT, "mount", ["mount", "-t", "overlay", "overlay", "-o", opts, merged])
        if rc != 0:
            sys.exit(f"depgpo sandbox: overlay mount of /{name} failed (mount exit {rc})")
    # strace's own messages ("Exit of unknown pid") must not reach the agent's terminal.
    err = os.open(spec["layout"]["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(err, 2)
    os.execvp(spec["argv"][0], spec["argv"])


if __name__ == "__main__":
    main()
