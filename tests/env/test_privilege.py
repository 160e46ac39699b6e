"""The privilege level (env/sandbox/privilege.py): chosen by who runs the harness, refused with a reason where it cannot
work, recorded in the trajectory. Run at root and again as an ordinary user (tests/test_rootless.py)."""

from __future__ import annotations

import json
import os

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.sandbox.privilege import PrivilegeError, processes_in_userns, resolve
from depgpo.tasks import load_task
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.sandbox
IS_ROOT = os.geteuid() == 0


def test_auto_is_root_exactly_when_the_harness_is():
    assert resolve("auto").rootless is not IS_ROOT
    assert resolve().name == ("root" if IS_ROOT else "rootless")


def test_a_level_that_cannot_work_here_is_refused_with_what_to_do():
    with pytest.raises(PrivilegeError, match=r"privilege='sudo'.*auto, root, rootless"):
        resolve("sudo")
    impossible, hint = ("rootless", "ordinary user") if IS_ROOT else ("root", "privilege=auto")
    with pytest.raises(PrivilegeError, match=hint):
        resolve(impossible)
    with pytest.raises(PrivilegeError):
        EpisodeConfig(privilege=impossible)


def test_the_trajectory_says_how_the_sandbox_was_built(tmp_path):
    task = load_task(make_harbor_task(tmp_path, "level", instruction="x", test_py="def test_ok():\n    pass\n"))
    with Episode(task, EpisodeConfig(command_timeout_s=10), out_dir=tmp_path / "out") as ep:
        usr = ep.run_command("touch /usr/local/new-file 2>&1; echo done")
        home = ep.run_command("echo ok > /root/note.txt && cat /root/note.txt")
        ep.verify()
        holder = ep.layout.namespaces.holder_pid if ep.privilege.rootless else None
        inode = os.stat(f"/proc/{holder}/ns/user").st_ino if holder else None
    environment = json.loads((tmp_path / "out/trajectory.json").read_text())["environment"]
    assert environment["privilege"] == ("root" if IS_ROOT else "rootless")
    assert home["observation"] == "ok\n" and [w["path"] for w in home["writes"]] == ["/root/note.txt"]
    if IS_ROOT:  # the host's /usr, copy-on-write
        assert "done" in usr["observation"] and "Read-only" not in usr["observation"]
    else:  # the host's /usr is host root's: read-only rootless, and the trajectory says so
        assert "Read-only file system" in usr["observation"]
        assert any("rootless on the host's root" in note for note in environment["notes"])
        assert processes_in_userns(inode) == [] and processes_in_userns(inode, children=True) == []
