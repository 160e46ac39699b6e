"""The outermost layer of a rootless episode: holds its user namespace and mount namespace while the episode lives.

Started by the harness (privilege._start_holder) as
    unshare --user --map-root-user --mount --propagation private -- python -m depgpo.env.sandbox.sandbox_hold SPEC
it mounts the episode's disk-limit and trace tmpfs in its own mount namespace, prints `ready`, and waits until its
stdin closes (the harness ended the episode, or died). Each shell start and the verifier enter these namespaces
with nsenter; the harness reads the episode's files through /proc/PID/root of this process. Its tmpfs, and so
every file the episode wrote, are gone with it: nothing is left on the host after a crash.
Kept import-light: it runs once per episode on the critical path.
"""

import ctypes
import json
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main() -> None:
    spec = json.loads(sys.argv[1])
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the harness died: so does the episode
    for target, options, what in spec["mounts"]:
        rc = os.spawnvp(os.P_WAIT, "mount", ["mount", "-t", "tmpfs", "-o", options, "depgpo-episode", target])
        if rc != 0:
            print(f"cannot mount {what} (tmpfs {options}) at {target} in the episode's user namespace "
                  f"(mount exit {rc})", flush=True)
            sys.exit(1)
    print("ready", flush=True)
    sys.stdin.buffer.read()  # until the harness closes our stdin


if __name__ == "__main__":
    main()
