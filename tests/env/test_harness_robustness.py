"""No command crashes the harness: each case ends as a recorded command (or a recorded, failed episode) and the
next episode runs. The cases are the ones that crashed or hurt the harness before (issue: a byte name raised
UnicodeEncodeError, a deep directory chain RecursionError, huge outputs took quadratic time, a trajectory was
rewritten per command, files filled the host's disk, a killed harness left its directories behind, planted lock
files were followed, printed markers cut commands; then a deep chain in a system directory, sparse files the judge
hashed whole, a fork bomb's survivors that starved the verifier, a verifier that could not start reported as one
that wrote no reward).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from depgpo.env.episode import Episode, EpisodeConfig, HarnessFailure
from depgpo.env.sandbox.layout import SandboxLimits, sweep_leftovers
from depgpo.env.sandbox.privilege import UidLease, cgroup_group, owned_private_dir, resolve
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

PASSING_TEST = "def test_ok():\n    pass\n"


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return load_task(make_harbor_task(tmp_path_factory.mktemp("robust"), "robust", instruction="x",
                                      test_py=PASSING_TEST, verifier_timeout=20))


def episode(task, out: Path | None = None, **config) -> Episode:
    return Episode(task, EpisodeConfig(**{"command_timeout_s": 30, **config}), out_dir=out)


def test_names_in_any_bytes_and_any_depth_are_recorded(task, tmp_path):
    deep = "d/" * 1200  # 2,400 bytes: one mkdir, 1,200 directories
    with episode(task, tmp_path / "out") as ep:
        named = ep.run_command("touch /tmp/$'\\xff' /app/$'\\xfe\\xff.txt'; ls /app | od -c | head -1")
        chain = ep.run_command(f"mkdir -p /app/{deep} && echo x > /app/{deep}f && echo made")
        verifier = ep.verify()
        root = ep.layout.root
    assert named["exit_code"] == 0 and any("\\udcfe" in w["path"] or "\udcfe" in w["path"] for w in named["writes"])
    assert chain["exit_code"] == 0 and chain["observation"] == "made\n", chain["observation"][-600:]
    assert any(w["path"].endswith("/f") for w in chain["writes"])
    assert verifier["reward"] == 1.0
    assert not root.exists()  # removed, however deep
    json.loads((tmp_path / "out" / "trajectory.json").read_text())


def test_a_long_one_line_command_is_typed_whole(task):
    """Longer than the line discipline's 4,095-byte canonical line: typed before readline took the terminal, its
    tail was dropped (24 of 40 commands ran without `| wc -c`)."""
    with episode(task) as ep:
        outputs = [ep.run_command("echo " + "x" * 6000 + " | wc -c")["observation"] for _ in range(12)]
    assert outputs == ["6001\n"] * 12


def test_special_files_in_the_workdir_do_not_block_the_harness(task):
    with episode(task) as ep:
        record = ep.run_command("mkfifo /app/pipe.txt; (exec 3<>/app/pipe.txt; sleep 300) & "
                                "mknod /app/null c 1 3 2>/dev/null; echo ok")
        verifier = ep.verify()
    assert record["exit_code"] == 0 and verifier["reward"] == 1.0


def test_huge_single_line_output_is_cut_not_kept(task):
    with episode(task) as ep:
        record = ep.run_command("head -c 20000000 /dev/zero | tr '\\0' a; echo; echo tail-line")
    assert record["exit_code"] == 0
    assert record["observation"].startswith("aaaa") and record["observation"].endswith("tail-line\n")
    omitted = int(record["observation"].split("; ")[1].split(" interior")[0])
    assert 19_980_000 < omitted < 20_000_000  # the whole line was counted, only 10,000 bytes kept


def test_trajectory_is_written_once_and_commands_appended_as_they_end(task, tmp_path):
    out = tmp_path / "out"
    with episode(task, out) as ep:
        ep.run_command("mkdir -p /app/many && cd /app/many && seq 3000 | xargs touch")
        ep.run_command("echo second")
        assert not (out / "trajectory.json").exists()
        partial = [json.loads(line) for line in (out / "commands.partial.jsonl").read_text().splitlines()]
        assert [c["index"] for c in partial] == [0, 1] and len(partial[0]["writes"]) == 3001
        ep.verify()
    assert not (out / "commands.partial.jsonl").exists()
    assert len(json.loads((out / "trajectory.json").read_text())["commands"]) == 2


def test_disk_limit_is_enforced_and_recorded_and_the_host_disk_untouched(task):
    limits = SandboxLimits(disk_bytes=64 << 20, disk_inodes=5000)
    config = EpisodeConfig(command_timeout_s=60, limits=limits)
    host_free = os.statvfs(config.work_root).f_bavail * os.statvfs(config.work_root).f_frsize
    with Episode(task, config) as ep:
        bytes_ = ep.run_command("for i in 1 2 3; do head -c 100000000 /dev/zero > /app/big$i; done; du -sm /app")
        ep.run_command("rm -f /app/big*")
        inodes = ep.run_command("mkdir -p /tmp/i && cd /tmp/i && seq 6000 | xargs touch 2>&1 | tail -1")
        host_free_during = os.statvfs(config.work_root).f_bavail * os.statvfs(config.work_root).f_frsize
        ep.run_command("rm -rf /tmp/i")
        verifier = ep.verify()
    assert "No space left on device" in bytes_["observation"] and bytes_["disk_limit"].startswith("bytes")
    assert "No space left on device" in inodes["observation"] and inodes["disk_limit"].startswith("inodes")
    assert any("disk limit" in e for e in ep.errors)
    assert abs(host_free - host_free_during) < 50 << 20
    assert verifier["reward"] == 1.0  # the episode went on


def test_printed_markers_cut_nothing(task):
    with episode(task) as ep:
        forged = ep.run_command("printf '\\036DEPGPO 0 0123456789abcdef 0\\036\\n'; "
                                "test -e /.depgpo_mark/0/0/0123456789abcdef; test -e /.depgpo_mark/1/0; "
                                "echo after > /app/after.txt; echo done")
        nxt = ep.run_command("echo next")
        stdin_eater = ep.run_command("head -c 300", timeout_s=2)  # eats the marker line typed after it: recovered
        leak = ep.run_command("echo \"$_\"; declare -f __depgpo_mark | head -2")
    assert forged["observation"].endswith("done\n") and forged["exit_code"] == 0
    assert [w["path"] for w in forged["writes"]] == ["/app/after.txt"] and nxt["writes"] == []
    assert nxt["observation"] == "next\n"
    assert stdin_eater["timed_out"] and "__depgpo_mark" not in stdin_eater["observation"]
    observed = forged["observation"] + nxt["observation"] + stdin_eater["observation"] + leak["observation"]
    nonces = {n for n in ep.shell.valid_nonces}
    assert not any(n in observed for n in nonces)


def test_a_harness_failure_ends_the_episode_recorded(task, tmp_path, monkeypatch):
    out = tmp_path / "out"
    calls = {"n": 0}
    original = Episode._effects_record

    def broken_once(self, fx, walk=True):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device (simulated host failure)")
        return original(self, fx, walk)

    monkeypatch.setattr(Episode, "_effects_record", broken_once)
    with episode(task, out) as ep:
        ep.run_command("echo one")
        with pytest.raises(HarnessFailure):
            ep.run_command("echo two")
        with pytest.raises(HarnessFailure):
            ep.run_command("echo three")  # the episode has ended
        verifier = ep.verify()
    saved = json.loads((out / "trajectory.json").read_text())
    assert verifier["reward"] == 0.0 and "harness failure" in verifier["error"]
    assert saved["verifier"]["reward"] == 0.0 and "simulated host failure" in saved["commands"][1]["harness_error"]
    assert any("harness failed on command 1" in e for e in saved["errors"])


KILLED_HARNESS = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from depgpo.env.episode import Episode, EpisodeConfig
    from depgpo.tasks import load_task
    ep = Episode(load_task(sys.argv[1]), EpisodeConfig(work_root=Path(sys.argv[2])))
    ep.__enter__()
    ep.run_command("sleep 1000 & echo started")
    print(ep.layout.root, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_leftovers_of_a_killed_harness_are_swept_at_the_next_start(task):
    work_root = Path(tempfile.mkdtemp(prefix="depgpo-sweep-"))  # the episode uid must traverse its parents
    work_root.chmod(0o711)
    done = subprocess.run([sys.executable, "-c", KILLED_HARNESS, str(task.root), str(work_root)],
                          capture_output=True, text=True, timeout=60)
    left = Path(done.stdout.strip())
    assert done.returncode == -9 and left.is_dir()
    # Root: its disk-limit tmpfs stays mounted on the host until swept. Rootless: the tmpfs lived in the holder's
    # mount namespace, and the holder died with the harness (PR_SET_PDEATHSIG): only the directory is left.
    assert os.path.ismount(left / "fs") is (not resolve().rootless)
    with Episode(task, EpisodeConfig(work_root=work_root)) as ep:
        ep.run_command("true")
        assert not left.exists()
    assert list(work_root.iterdir()) == []
    work_root.rmdir()


def test_a_harness_with_another_work_root_sweeps_none_of_this_ones_cgroups(task):
    """Every episode's start sweeps the cgroups of dead episodes; before 2026-12-07 it judged by its own work root
    only, so a harness with another one (a test's temporary root beside a benchmark's) removed the verifier's empty
    cgroups of live episodes, whose verifier then failed to enter them ("Exception occurred in preexec_fn")."""
    other = Path(tempfile.mkdtemp(prefix="depgpo-other-"))
    other.chmod(0o711)
    try:
        with episode(task) as ep:
            ep.run_command("echo 1 > /app/ok")
            sweep_leftovers(other)  # what an episode started under `other` does first
            verifier = ep.verify()
            dirs = ep._verifier_cgroups.dirs
        assert verifier["reward"] == 1.0 and verifier["error"] is None, verifier
        assert all(other.name not in str(d) and cgroup_group(ep.layout.root.parent) in str(d) for d in dirs)
    finally:
        other.rmdir()


def test_planted_lease_and_work_directories_are_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    planted = tmp_path / "planted"
    planted.symlink_to(tmp_path)
    with pytest.raises(RuntimeError, match="planted"):
        owned_private_dir(planted)
    world_writable = tmp_path / "open"
    world_writable.mkdir(mode=0o777)
    world_writable.chmod(0o777)
    with pytest.raises(RuntimeError, match="writable only by it"):
        UidLease(world_writable)
    leases = tmp_path / "leases"
    owned_private_dir(leases)
    for slot in range(4096):  # every slot's lock file a symlink to the victim: none is followed
        (leases / f"{slot}.lock").symlink_to(victim)
    with pytest.raises(RuntimeError, match="no free sandbox uid"):
        UidLease(leases)
    assert victim.read_text() == "keep me\n"


def test_a_command_that_floods_the_tracer_ends_the_episode_not_the_host(task, tmp_path):
    limits = SandboxLimits(trace_bytes=16 << 20)
    out = tmp_path / "out"
    with Episode(task, EpisodeConfig(command_timeout_s=60, limits=limits), out_dir=out) as ep:
        with pytest.raises(HarnessFailure, match="trace"):
            ep.run_command("python3 -c \"import os\nfor i in range(400000): os.access('/no/such/file', 0)\"")
        verifier = ep.verify()
    assert verifier["reward"] == 0.0 and "trace" in verifier["error"]
    assert json.loads((out / "trajectory.json").read_text())["verifier"]["reward"] == 0.0


# ---------------------------------------------------------------- the harness defects of the issue (item 4)

BOMB = textwrap.dedent("""\
    import os, sys, time
    n = 0
    while True:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(float(sys.argv[1]))
            os._exit(0)
        n += 1
    print(n, "survivors", flush=True)
    time.sleep(float(sys.argv[2]))
    """)


def test_deep_chains_in_system_and_writable_directories_are_walked_and_what_is_unlistable_recorded(task):
    """A 1,100-deep chain under /usr/local/share ended the verify step in a RecursionError (os.walk recursed in
    SandboxLayout.upper_entries). One deeper than PATH_MAX cannot be listed by path: the walks say so."""
    past_path_max = "python3 -c \"import os\nfor _ in range(2100): os.mkdir('p'); os.chdir('p')\""
    with episode(task, verifier_view="full") as ep:  # the full view walks the agent's upper layers
        system = ep.run_command(f"mkdir -p /usr/local/share/{'d/' * 1100} && echo made")
        ep.run_command(f"cd /app && {past_path_max}; cd /usr/local/share && {past_path_max}; echo 1 > /app/ok")
        verifier = ep.verify()
        unwalked = ep.layout.agent_upper_unwalked
    assert verifier["reward"] == 1.0 and verifier["error"] is None, verifier
    assert any(e.startswith("the stat walk of the writable directories could not list 1 directories: /app/p/p/")
               and "(File name too long)" in e for e in ep.errors), ep.errors
    if ep.privilege.rootless:  # on the host's own root the system directories are read-only rootless
        assert "Read-only file system" in system["observation"]
    else:
        assert system["observation"] == "made\n"
        assert len(unwalked) == 1 and unwalked[0].startswith("usr/local/share/p/p/")  # counted as the agent's
        assert any(e.startswith("the walk of the upper layers (counted as the agent's) could not list 1")
                   for e in ep.errors), ep.errors


def test_sparse_and_huge_files_cost_the_judge_their_data_at_most(task, tmp_path):
    """16 sparse 1000 MB files cost the episode 14.7 s against 1.2 s (every file was hashed whole, 0.85 s each):
    now a file is hashed by its data extents, a file or an episode past its bounds is not hashed at all, and the
    judge counts such a file as changed, never as unchanged."""
    mmap_write = ("python3 -c \"import mmap, os\nfd = os.open('/app/s1.bin', os.O_RDWR)\nm = mmap.mmap(fd, 0)\n"
                  "m[500000000] = 1\nm.close()\"")
    with episode(task, tmp_path / "out", limits=SandboxLimits(hash_file_bytes=48 << 20)) as ep:
        t0 = time.monotonic()
        sparse = ep.run_command("for i in $(seq 16); do truncate -s 1000M /app/s$i.bin; done; "
                                "head -c 50M /dev/urandom > /app/dense.bin; wc -c /app/s*.bin /app/dense.bin | tail -1")
        spent = ep.layout.hashing.spent
        into_a_hole = ep.run_command(mmap_write)  # neither time changes on tmpfs: the content hash must
        ep.run_command("echo 1 > /app/ok")
        verifier = ep.verify()
        elapsed = time.monotonic() - t0
    assert sparse["observation"].split()[0] == str(16 * 1000 * 2**20 + 50 * 2**20) and verifier["reward"] == 1.0
    hashes = {w["path"]: w["hash_after"] for w in sparse["writes"]}
    assert all(hashes[f"/app/s{i}.bin"].startswith("sparse-sha256:") for i in range(1, 17))
    assert hashes["/app/dense.bin"].startswith("unhashed:52428800:") and spent == 0  # over its 48 MiB: not read
    [changed] = into_a_hole["writes"]
    assert changed["path"] == "/app/s1.bin" and changed["hash_after"] != hashes["/app/s1.bin"]
    assert elapsed < 8, elapsed  # was 15 s and more: 0.85 s a file
    assert any(e.startswith("1 files were not hashed") and "/app/dense.bin (more than 48 MiB of data)" in e
               for e in ep.errors), ep.errors
    saved = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    assert saved["final"]["files"]["/app/dense.bin"]["hash"].startswith("unhashed:")


def test_a_task_file_too_large_to_hash_counts_as_changed_for_the_judge(tmp_path):
    """The task's own file, untouched: hashed, it is the task's; past the hashing bound, unknown (a change the
    metadata would not show cannot hide behind it)."""
    from depgpo.env.judging.tampering import agent_change
    big = load_task(make_harbor_task(tmp_path, "big", instruction="x", test_py=PASSING_TEST, verifier_timeout=20,
                                     files={"big.txt": "x" * (3 << 20), "small.txt": "y\n"}))
    for limit, expected in ((64 << 20, None), (2 << 20, "unknown")):
        with episode(big, limits=SandboxLimits(hash_file_bytes=limit)) as ep:
            ep.run_command("cat /app/big.txt /app/small.txt > /dev/null")
            verifier = ep.verify()
            answers = [agent_change(p, ep.layout, ep._initial_hashes, ep.system.path)
                       for p in ("/app/big.txt", "/app/small.txt")]
        assert verifier["reward"] == 1.0 and answers == [expected, None]


def test_survivors_of_a_fork_bomb_do_not_starve_the_verifier(task):
    """504 processes left by a bounded fork bomb held the episode's process limit: the verifier's nsenter could not
    fork, reported as "wrote neither reward.json nor reward.txt". The verifier has a budget of its own now."""
    with episode(task) as ep:
        bomb = ep.run_command(f"echo 1 > /app/ok; python3 -c {shlex.quote(BOMB)} 600 0")
        verifier = ep.verify()
    assert int(bomb["observation"].split()[0]) > 400
    assert verifier["reward"] == 1.0 and verifier["error"] is None, verifier


def test_a_verifier_that_cannot_fork_says_so(tmp_path):
    """The tests run the agent's program, which forks until the verifier's own process limit: what the verifier
    could not start next is its words, not a bare 0."""
    test_py = textwrap.dedent("""\
        import subprocess

        def test_program():
            bomb = subprocess.Popen(['python3', '/app/prog.py', '6', '6'], stdout=subprocess.PIPE, text=True)
            assert bomb.stdout.readline().endswith('survivors\\n')
            assert subprocess.run(['true']).returncode == 0
        """)
    forking = load_task(make_harbor_task(tmp_path, "fork", instruction="x", test_py=test_py, verifier_timeout=30))
    with episode(forking) as ep:
        ep.run_command(f"cat > /app/prog.py <<'EOF'\n{BOMB}EOF")
        verifier = ep.verify()
    assert verifier["reward"] == 0.0 and verifier["reward_source"] == "reward.txt"  # its script's own verdict
    assert verifier["error"].startswith("the verifier could not fork (EAGAIN x"), verifier["error"]


def test_a_verifier_that_cannot_start_says_so(tmp_path):
    """bwrap cannot mount uv onto an agent-made symlink at ~/.local/bin in the full view: the verifier never started,
    which is not a verifier that wrote no reward. In the image view its home is its own: the symlink is not seen."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "uv-0.9.5-py3-none-manylinux_2_17_x86_64.whl", "w") as wheel:
        for name in ("uv", "uvx"):
            wheel.writestr(f"uv-0.9.5.data/scripts/{name}", "#!/bin/sh\nexit 0\n")
    uv_task = make_harbor_task(tmp_path, "uv", instruction="x", test_py=PASSING_TEST, verifier_timeout=20)
    test_sh = uv_task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace(
        "mkdir -p", "curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\nmkdir -p", 1))
    work_root = Path(tempfile.mkdtemp(prefix="depgpo-uv-"))  # its tools directory (this fake uv) is its own
    work_root.chmod(0o711)
    try:
        planted = "mkdir -p /root/.local && ln -s /nowhere /root/.local/bin"
        for plant, view in (("true", "full"), (planted, "full"), (planted, "image")):
            with episode(load_task(uv_task), wheel_cache=wheels, work_root=work_root, verifier_view=view) as ep:
                ep.run_command(plant)
                verifier = ep.verify()
            if plant == "true" or view == "image":
                assert verifier["reward"] == 1.0 and verifier["error"] is None, verifier
            else:
                assert verifier["reward"] == 0.0 and verifier["reward_source"] == "error"
                assert verifier["error"].startswith("the verifier could not be started: bwrap: Can't bind mount"), \
                    verifier["error"]
    finally:
        subprocess.run(["rm", "-rf", "--", str(work_root)], capture_output=True)


def test_a_verifier_timed_out_beside_busy_agent_processes_says_they_ran(tmp_path):
    slow = make_harbor_task(tmp_path, "slow", instruction="x", test_py=PASSING_TEST, verifier_timeout=3)
    (slow / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 30\n")
    with episode(load_task(slow)) as ep:
        ep.run_command("for i in 1 2 3 4; do (while :; do :; done) & done; echo started")
        verifier = ep.verify()
    assert verifier["reward"] == 0.0 and verifier["error"].startswith("verifier timed out after 3"), verifier["error"]
    assert " agent processes ran beside it and used " in verifier["error"], verifier["error"]


def test_a_fork_loop_that_outlasts_its_command_leaves_a_verifier_that_runs(task):
    """bash retries a fork that hits the process limit, so the loop outlasts its command; the recovery kills the
    shell, whose chain lives on: the verifier found no shell to take the network from and the episode ended as a
    harness failure. It runs beside a restarted shell now. The shell ignores SIGINT here: under load a C-c could
    land between two fork retries and end the loop, and the kill this test is about never came (CI, 2026-12-07)."""
    with episode(task, command_timeout_s=4) as ep:
        looped = ep.run_command("trap '' INT; echo 1 > /app/ok; for i in $(seq 700); do sleep 600 & done 2>/dev/null")
        verifier = ep.verify()
    assert looped["timed_out"] and "kill" in looped.get("recovery", [])
    assert verifier["reward"] == 1.0 and verifier["error"] is None, verifier
    assert any("the verifier ran beside a restarted one" in e for e in ep.errors)
