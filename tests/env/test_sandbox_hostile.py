"""Hostile commands run in one episode while a second episode works beside it; the host must not change.

Network egress is checked without sending traffic anywhere: the sandbox must have no route and no interface
besides loopback, and a server on the host's own loopback must be unreachable from inside.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from pathlib import Path

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.sandbox.layout import SandboxLimits
from depgpo.env.sandbox.privilege import processes_in_userns, processes_of_uid
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

HOST_FILES = ["/etc/passwd", "/etc/hostname", "/etc/hosts", "/usr/bin/python3.11", "/usr/bin/xargs",
              "/usr/lib/os-release", "/etc/crontab"]


RESERVE_40_GIB = ("python3 -c \"import ctypes; libc = ctypes.CDLL(None); libc.mmap.restype = ctypes.c_void_p; "
                  "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, "
                  "ctypes.c_long]; p = libc.mmap(None, 40 << 30, 0, 0x22 | 0x4000, -1, 0); "  # PROT_NONE, private,
                  "print('reserved' if p not in (None, 2**64 - 1) else 'not reserved')\"")  # anonymous, noreserve


SHARED_80_GIB = "python3 -c \"import mmap; m = mmap.mmap(-1, 80 << 30); print('mapped')\" 2>&1 | tail -1"


def hostile_commands(sentinel: Path, host_port: int) -> list[str]:
    return [
        "kill -9 -1; echo after-kill",
        "kill -9 1; kill -9 0 2>/dev/null; echo pid1-survives",  # kills its own shell: the episode restarts it
        f"cat {sentinel} 2>&1 | head -c 200",
        f"ln -s {sentinel} /app/leak; cat /app/leak 2>&1 | head -c 200",
        "ln -s / /app/rootlink; echo escape > /app/rootlink/tmp/escape.txt; ls /app/rootlink/tmp",
        f"ln -s {sentinel.parent} /tmp/sentinel-dir; ls /tmp/sentinel-dir/ 2>&1",
        "cat /etc/shadow; cat /etc/gshadow; echo shadow-read-done",
        "echo 'pwned:x:0:0::/root:/bin/bash' >> /etc/passwd; tail -1 /etc/passwd",
        "echo '* * * * * root rm -rf /' >> /etc/crontab",
        "echo 1 > /proc/sys/vm/drop_caches; echo sysctl-tried",
        "test -w /proc/sysrq-trigger && echo SYSRQ-WRITABLE || echo sysrq-protected",
        "echo b > /proc/sysrq-trigger 2>&1; echo sysrq-write-tried",
        "cat /proc/1/environ 2>&1 | head -c 100; echo",
        "ls /proc/1/root/ 2>&1 | head -3",
        "mount -t tmpfs none /mnt 2>&1; umount /proc 2>&1; echo mount-tried",
        "hostname evil-host; hostname",
        "ip -o link | cut -d: -f2; ip route | wc -l",
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {host_port}), timeout=2)\" 2>&1 | tail -1",
        "python3 -c \"import socket; print(socket.getaddrinfo('example.org', 80))\" 2>&1 | tail -1",
        "exec 3>/dev/tcp/127.0.0.1/22 2>&1; echo dev-tcp-tried",
        "dd if=/dev/zero of=/app/big bs=1M count=200 2>&1 | tail -1",
        "yes > /app/yes.txt",
        "python3 -c \"b = bytearray(6 << 30); print('allocated')\" 2>&1 | tail -1",
        # What OCaml 5 (coqc) does at start-up: reserve address space far beyond the memory limit.
        RESERVE_40_GIB,
        SHARED_80_GIB,
        "ulimit -s unlimited 2>/dev/null; ulimit -Hs",
        # /dev/shm is memory that no rlimit counts: a tmpfs of its own size, not /dev's (half the host's RAM).
        "for i in 1 2; do head -c 40M /dev/zero > /dev/shm/f$i || echo shm-full; done 2>&1",
        "nohup sleep 10000 >/dev/null 2>&1 & setsid sleep 10001 >/dev/null 2>&1 & disown -a; echo daemons-started",
        "(while true; do :; done) & sleep 0.5; echo spinner-started",
        "ls /work /home/* /root/.ssh 2>&1 | head -5",
        "cat /root/.bash_history /root/.ssh/id_rsa 2>&1 | head -3",
        "strace -p 1 2>&1 | head -2; echo ptrace-tried",
        "unshare -r id 2>&1; nsenter -t 1 -m id 2>&1 | head -2",
        "chmod -R 777 /etc 2>/dev/null; chown -R nobody /etc 2>/dev/null; echo chmod-tried",
        "echo garbage > /usr/bin/xargs; rm -f /usr/bin/python3.11; echo usr-overwritten",
        "rm -rf /usr/lib/os-release /etc/hosts; echo etc-removed",
        # With a copy-on-write root this really empties the episode's own /usr (and takes a while): interrupted.
        "rm -rf --no-preserve-root / 2>/dev/null; echo survived",
        # A fork bomb in the shell itself (nothing left to exec): it can only exhaust the episode's own limits.
        ":(){ :|:& };:",
    ]


def sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def episode_processes(ep):
    """What lists the episode's processes once it has closed: root, those of its leased uid; rootless (they run as
    the user, like this test), those in its user namespace and the namespaces below it."""
    if not ep.privilege.rootless:
        uid = ep.layout.uid
        return lambda: processes_of_uid(uid)
    inode = os.stat(f"/proc/{ep.layout.namespaces.holder_pid}/ns/user").st_ino
    return lambda: processes_in_userns(inode) + processes_in_userns(inode, children=True)


def test_hostile_battery_leaves_host_and_neighbour_intact(tmp_path):
    sentinel_dir = tmp_path / "host-secret"
    sentinel_dir.mkdir()
    sentinel = sentinel_dir / "secret.txt"
    sentinel.write_text("HOST-SECRET-7d1f\n")
    host_files = [p for p in HOST_FILES if os.path.exists(p)]
    before = {p: sha256(p) for p in host_files}

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    host_port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()

    limits = SandboxLimits(max_processes=256, max_file_bytes=64 << 20, memory_bytes=2 << 30)
    config = EpisodeConfig(command_timeout_s=8, limits=limits)
    task = load_task(make_harbor_task(tmp_path, "hostile", instruction="x", test_py="def test_ok():\n    pass\n"))
    neighbour_task = load_task(make_harbor_task(tmp_path, "neighbour", instruction="x",
                                                test_py="def test_ok():\n    pass\n"))
    with Episode(neighbour_task, EpisodeConfig(command_timeout_s=10)) as neighbour:
        neighbour.run_command("echo neighbour-data > /app/keep.txt; sleep 1000 &")
        with Episode(task, config, out_dir=tmp_path / "hostile-out") as ep:
            leftovers = episode_processes(ep)
            by_cgroup = ep.privilege.memory_by_cgroup()
            commands = hostile_commands(sentinel, host_port)
            results = {c: ep.run_command(c, timeout_s=15 if c.startswith("rm -rf") else None) for c in commands}
            # The neighbour works while the bomb and the daemons of the hostile episode are still running.
            check = neighbour.run_command("cat /app/keep.txt; jobs | wc -l")
        errors = ep.errors
    outputs = "\n".join(r["observation"] for r in results.values())

    def output_of(prefix: str) -> str:
        return next(r["observation"] for c, r in results.items() if c.startswith(prefix))

    # The host is unchanged.
    assert {p: sha256(p) for p in host_files} == before
    assert sentinel.read_text() == "HOST-SECRET-7d1f\n"
    assert "HOST-SECRET" not in outputs
    assert output_of("cat /etc/shadow").count("Permission denied") == 2
    assert not (Path("/tmp") / "escape.txt").exists()
    # Nothing of the hostile episode runs on, not even its daemons.
    assert leftovers() == []
    # No way out: sysrq and /proc/sys are protected, only loopback exists, the host's loopback is unreachable.
    assert "SYSRQ-WRITABLE" not in outputs
    assert output_of("ip -o link") == " lo\n0\n"
    assert "Connection refused" in output_of("python3 -c \"import socket; socket.create_connection")
    assert output_of("dd if").startswith("67108864 bytes")  # asked for 200 MiB, stopped at RLIMIT_FSIZE
    assert "File too large" in output_of("yes >")
    assert "allocated" not in output_of("python3 -c \"b = bytearray")
    assert output_of(RESERVE_40_GIB) == "reserved\n"  # a reservation is not a use (RLIMIT_DATA, not RLIMIT_AS)
    assert output_of("for i in 1 2; do head -c 40M /dev/zero > /dev/shm").endswith(
        "No space left on device\nshm-full\n")  # the second 40 MiB: past SandboxLimits.shm_bytes
    if not by_cgroup:  # rlimits: shared mappings, which RLIMIT_DATA does not count, stop at RLIMIT_AS; the stack too
        assert "mapped" not in output_of(SHARED_80_GIB)
        assert output_of("ulimit -s unlimited") == f"{limits.memory_bytes // 1024}\n"
    # The episode kept working after each attack (restarting its own shell after `kill -9 0`); the neighbour too.
    assert any("restarted" in e for e in errors)
    assert "usr-overwritten" in output_of("echo garbage") and "etc-removed" in output_of("rm -rf /usr/lib")
    assert check["observation"] == "neighbour-data\n1\n"
    listener.close()


def test_signals_to_the_tracer_neither_end_nor_blind_it(tmp_path):
    """pid 1 of the agent's namespace is strace. At root it is host root's; rootless it runs as the same host uid
    as the agent, so only the kernel's rules for a namespace's init and strace's blocked fatal signals stand
    between a `kill` and an untraced episode: the commands after the signals must still be traced."""
    task = load_task(make_harbor_task(tmp_path, "signals", instruction="x", test_py="def test_ok():\n    pass\n"))
    with Episode(task, EpisodeConfig(command_timeout_s=10)) as ep:
        kill = ep.run_command("for s in TERM INT HUP QUIT USR1 PIPE ALRM; do kill -$s 1; done; sleep 0.5; "
                              "ls /proc/1/root/ 2>&1 | head -1; echo sent")
        after = ep.run_command("echo traced > /app/after.txt")
        errors = list(ep.errors)
    assert "sent" in kill["observation"] and "Permission denied" in kill["observation"], kill["observation"]
    assert [w["path"] for w in after["writes"]] == ["/app/after.txt"] and after["untraced_changes"] == []
    assert not any("restarted" in e or "exited" in e for e in errors), errors


def test_the_sandboxs_own_top_level_entries_cannot_be_replaced(tmp_path):
    """`/bin -> usr/bin`, the mount points and /tests stay the harness's: at root they are host root's in a sticky
    `/`; rootless the agent would own them, so `/` is read-only. Replacing /bin would hand the verifier's
    `/bin/bash` to the agent (the attack an adversarial review found against the first rootless version)."""
    task = load_task(make_harbor_task(tmp_path, "entries", instruction="x", test_py="def test_ok():\n    pass\n"))
    with Episode(task, EpisodeConfig(command_timeout_s=10)) as ep:
        attack = ep.run_command("mkdir -p /app/x && printf '#!/usr/bin/sh\\nexit 0\\n' > /app/x/bash; "
                                "rm -f /bin; ln -s /app/x /bin; rmdir /tests; ln -s /app/x /tests; mv /lib64 /app/l; "
                                "echo bin=$(readlink /bin) lib64=$(readlink /lib64); test -d /tests && echo tests-dir")
        verifier = ep.verify()
    assert attack["observation"].splitlines()[-2:] == [f"bin=usr/bin lib64={os.readlink('/lib64')}", "tests-dir"], \
        attack["observation"]
    assert verifier["reward"] == 1.0 and verifier["tampering"] == [] and verifier["error"] is None, verifier


def test_the_harness_session_keyring_is_not_the_agents(tmp_path):
    """A Slurm job keeps Kerberos or AFS tickets in its session keyring, and possession (not uid) lets a process
    read them: the sandbox joins a new one before exec. A key in this test's session keyring stays unreadable, to
    the agent and to the verifier, and this process keeps it (spawn.py joins the new one in a thread of its own)."""
    import ctypes

    numbers = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)
    if numbers is None:
        pytest.skip(f"keyctl syscall numbers unknown for {os.uname().machine}")
    add_key, keyctl = numbers
    libc = ctypes.CDLL(None, use_errno=True)
    secret = b"depgpo-keyring-secret"
    serial = libc.syscall(add_key, b"user", b"depgpo-test", secret, len(secret), -3)  # KEY_SPEC_SESSION_KEYRING
    assert serial > 0, os.strerror(ctypes.get_errno())
    read = ("import ctypes; l = ctypes.CDLL(None, use_errno=True); b = ctypes.create_string_buffer(64); "
            f"r = l.syscall({keyctl}, 11, {serial}, b, 64); print('read', r, b.value.decode() if r > 0 else '')")
    verifier_reads = f"import subprocess, sys\n\ndef test_unreadable():\n    out = subprocess.run([sys.executable, '-c', " \
        f"{read!r}], capture_output=True, text=True).stdout\n    assert out.startswith('read -1'), out\n"
    task = load_task(make_harbor_task(tmp_path, "keys", instruction="x", test_py=verifier_reads))
    try:
        own = ctypes.create_string_buffer(64)
        assert libc.syscall(keyctl, 11, serial, own, 64) == len(secret)  # this process can read it
        with Episode(task, EpisodeConfig(command_timeout_s=10)) as ep:
            out = ep.run_command(f'python3 -c "{read}"')["observation"]
            verifier = ep.verify()
        assert libc.syscall(keyctl, 11, serial, own, 64) == len(secret)  # still this process's
    finally:
        libc.syscall(keyctl, 21, serial)  # KEYCTL_INVALIDATE
    assert "read -1" in out and "depgpo-keyring-secret" not in out, out
    assert verifier["reward"] == 1.0, verifier["output"][-800:]
