"""No command crashes the harness: each case ends as a recorded command (or a recorded, failed episode) and the
next episode runs. The cases are the ones that crashed or hurt the harness before (issue: a byte name raised
UnicodeEncodeError, a deep directory chain RecursionError, huge outputs took quadratic time, a trajectory was
rewritten per command, files filled the host's disk, a killed harness left its directories behind, planted lock
files were followed, printed markers cut commands).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from depgpo.env.episode import Episode, EpisodeConfig, HarnessFailure
from depgpo.env.sandbox.layout import SandboxLimits
from depgpo.env.sandbox.privilege import UidLease, owned_private_dir, resolve
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

PASSING_TEST = "def test_ok():\n    pass\n"


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return load_task(make_harbor_task(tmp_path_factory.mktemp("robust"), "robust", instruction="x",
                                      test_py=PASSING_TEST, verifier_timeout=20))


def episode(task, out: Path | None = None, **config) -> Episode:
    return Episode(task, EpisodeConfig(command_timeout_s=30, **config), out_dir=out)


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
