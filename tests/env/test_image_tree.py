"""The sandbox's view of a task's file system equals its image's (docs/sandbox.md, ENV and WORKDIR): for Dockerfiles
in the shapes real tasks use (COPY and ADD into, above and beside the WORKDIR, nested and repeated WORKDIRs, ENV,
COPY --chmod, files and symlinks, a RUN that writes under the WORKDIR's parent), every path `podman export` gives
is in the agent's tree, at the same place, with the same type, mode, owner, link target and content, and the agent's
tree has nothing else outside what the harness mounts (tests/helpers/image_tree.HARNESS_PATHS).

podman really builds each Dockerfile (on a tiny base made from this host's binaries, in a private store), the
episode really runs the listing in its sandbox; as an ordinary user, tests/test_rootless.py runs this file again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import textwrap
from pathlib import Path

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.images import backend as images
from depgpo.tasks import load_task
from tests.helpers.image_tree import AGENT_LISTING, differences, exported_tree, listed_tree, mini_base

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(shutil.which("podman") is None,
                                                      reason="podman builds the images (envs/setup.sh test)")]
BASE = "localhost/depgpo-test-tree-base:1"

# name -> (Dockerfile after FROM, build-context files {path: content | "-> target" for a symlink})
SHAPES = {
    "copy-then-deeper-workdir": ("WORKDIR /app\nCOPY data /app/data\nWORKDIR /app/project\n",
                                 {"data/orders.csv": "id,total\n1,9.50\n2,3.25\n"}),
    "workdir-beside-a-copied-tree": ("WORKDIR /srv\nCOPY app /srv/app\nWORKDIR /srv/app/bin\n",
                                     {"app/conf/settings.ini": "[db]\nhost = localhost\n",
                                      "app/bin/run": "#!/bin/sh\necho run\n", "app/conf/current": "-> settings.ini"}),
    "everything-at-once": (textwrap.dedent("""\
        ENV APP_HOME=/app LEVEL=3
        WORKDIR $APP_HOME
        COPY --chmod=750 run.sh ./run.sh
        ADD notes.txt /app/docs/notes.txt
        COPY data /data
        WORKDIR src
        WORKDIR ../src/pkg
        COPY pkg/ ./
        RUN mkdir -p ../../logs /mnt /root/.config /home/builder /opt/tool /usr/local/share/x \\
            && echo built > ../../logs/build.log && chmod 600 ../../logs/build.log \\
            && mkdir ../../shared && chmod 1777 ../../shared && ln -s ../../data/rows.csv rows.csv \\
            && echo cfg > /root/.config/tool.ini && echo hi > /home/builder/.profile \\
            && echo tool > /opt/tool/VERSION && echo x > /usr/local/share/x/y
        WORKDIR /app/src/pkg/deeper
        """), {"run.sh": "#!/bin/sh\necho run\n", "notes.txt": "notes\n", "data/rows.csv": "a,b\n",
               "pkg/mod.py": "X = 1\n", "pkg/link": "-> mod.py"}),
    "workdir-in-usr-beside-a-copy": ("COPY shared /usr/src/shared\nWORKDIR /usr/src/app\nCOPY app.txt .\n",
                                     {"shared/lib.txt": "shared\n", "app.txt": "app\n"}),
}


@pytest.fixture(scope="module")
def tree_store(tmp_path_factory):
    """A private podman store (vfs, under tmp) with the tiny base image."""
    base = tmp_path_factory.mktemp("tree-oci")
    saved = os.environ.get("CONTAINERS_STORAGE_CONF")
    conf = base / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{base}/graph"\nrunroot = "{base}/run"\n')
    os.environ["CONTAINERS_STORAGE_CONF"] = str(conf)
    mini_base(base / "rootfs")
    with tarfile.open(base / "base.tar", "w") as tar:
        tar.add(base / "rootfs", arcname=".", filter=_as_root)  # root's, as in real images, whoever runs this
    subprocess.run(["podman", "import", str(base / "base.tar"), BASE], check=True, capture_output=True)
    yield base
    if saved is None:
        os.environ.pop("CONTAINERS_STORAGE_CONF", None)
    else:
        os.environ["CONTAINERS_STORAGE_CONF"] = saved


def _as_root(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member


def _task(root: Path, dockerfile: str, files: dict[str, str]) -> Path:
    task = root / "tree-task"
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "instruction.md").write_text("List the file system.")
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 30\n')
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE}\n{dockerfile}")
    for rel, content in files.items():
        path = task / "environment" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content.startswith("-> "):
            path.symlink_to(content[3:])
        else:
            path.write_text(content)
    return task


@pytest.mark.parametrize("shape", SHAPES)
def test_the_agent_sees_the_images_tree_file_by_file(shape, tree_store, tmp_path):
    task = load_task(_task(tmp_path, *SHAPES[shape]))
    config = EpisodeConfig(command_timeout_s=60, backend="image", runtime="podman", image_cache=tmp_path / "cache")
    with Episode(task, config, out_dir=tmp_path / "out") as episode:
        record = episode.run_command(AGENT_LISTING, turn=0)
        assert record["observation"].strip() == "listed", record
        seen = listed_tree(episode.layout.host_path("/tmp/tree.txt").read_text(),
                           episode.layout.host_path("/tmp/sums.txt").read_text())
        image = episode.system.image
    expected = exported_tree("podman", image, tmp_path)
    assert differences(expected, seen, episode.layout.workdir) == {"missing": {}, "extra": {}, "differ": {}}
    assert any(e[0] == "l" for e in expected.values()) and any(e[5] for e in expected.values())  # not vacuous


# The issue's two shapes as held-out Harbor tasks: the oracle reads the files beside the workdir and writes there.
HELD_OUT = {
    "orders": ("WORKDIR /app\nCOPY data /app/data\nWORKDIR /app/project\n", {"data/orders.csv": "id\n1\n2\n"},
               'mapfile -t rows < /app/data/orders.csv\necho $(( ${#rows[@]} - 1 )) > count.txt\n'
               'echo counted >> /app/data/audit.log\n',
               '[ "$(< /app/project/count.txt)" = 2 ] && [ "$(< /app/data/audit.log)" = counted ]'),
    "settings": ("WORKDIR /srv\nCOPY app /srv/app\nWORKDIR /srv/app/bin\n",
                 {"app/conf/settings.ini": "[db]\nhost = db.internal\n"},
                 'while IFS= read -r line; do [[ $line == host* ]] && echo "${line#*= }"; done '
                 '< ../conf/settings.ini > host.txt\necho "port = 5432" >> /srv/app/conf/settings.ini\n',
                 '[ "$(< /srv/app/bin/host.txt)" = db.internal ] && [[ "$(< /srv/app/conf/settings.ini)" == *5432 ]]'),
}


# Harbor's standard test.sh starts so (its curl only fetches uv); data check read the redirections as packages.
HARBOR_PREAMBLE = "apt-get update\napt-get install -y curl > /dev/null 2>&1\n"


@pytest.mark.parametrize("name", HELD_OUT)
def test_held_out_tasks_of_the_issues_shapes_score_1_with_their_oracle_and_0_with_nothing(name, tree_store,
                                                                                          tmp_path):
    from depgpo.env.checks.task_check import check_task

    dockerfile, files, solve, check = HELD_OUT[name]
    task_dir = _task(tmp_path, dockerfile, files)
    (task_dir / "tests" / "test.sh").write_text(
        f"#!/bin/bash\n{HARBOR_PREAMBLE}if {check}; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}")
    rewards = {}
    for run, commands in (("oracle", [solve]), ("nothing", ["true"])):
        config = EpisodeConfig(command_timeout_s=60, backend="image", runtime="podman", image_cache=tmp_path / "c")
        with Episode(load_task(task_dir), config, out_dir=tmp_path / run) as episode:
            for turn, command in enumerate(commands):
                assert episode.run_command(command, turn=turn)["exit_code"] == 0
            rewards[run] = episode.verify()["reward"]
    assert rewards == {"oracle": 1.0, "nothing": 0.0}
    images._resolved.clear()
    report = check_task(task_dir, "image", "podman", wheels=tmp_path / "wheels", oracle=True)
    assert report.ok and report.oracle_reward == 1.0, report.problems


def test_data_check_names_a_package_the_image_lacks_and_the_oracle_indeed_fails(tree_store, tmp_path):
    """The verdict equals the oracle's outcome the other way round too: jq is not in the image, and offline the
    test-time apt-get cannot add it."""
    from depgpo.env.checks.task_check import check_task

    task_dir = _task(tmp_path, "WORKDIR /app\n", {})
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\napt-get update\napt-get install -y jq > /dev/null 2>&1\n"
        "if jq -e .ok /app/out.json; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\necho '{\"ok\": true}' > /app/out.json\n")
    report = check_task(task_dir, "image", "podman", wheels=tmp_path / "wheels")
    assert report.problems == ["test.sh apt-installs jq at test time, which the image lacks (episodes have no "
                               "network)"]
    config = EpisodeConfig(command_timeout_s=60, backend="image", runtime="podman", image_cache=tmp_path / "c")
    with Episode(load_task(task_dir), config, out_dir=tmp_path / "oracle") as episode:
        episode.run_command((task_dir / "solution" / "solve.sh").read_text(), turn=0)
        assert episode.verify()["reward"] == 0.0


def test_the_host_backend_keeps_the_files_beside_a_deeper_workdir_too(tmp_path):
    """Where the host stands for the image (COPY and WORKDIR only), COPY data /app/data then WORKDIR /app/project
    also leaves /app/data where the agent and the verifier look, writable as in the container."""
    from tests.helpers.harbor_builder import make_harbor_task

    task_dir = make_harbor_task(
        tmp_path, "orders-on-host", instruction="Count the orders.", files={"data/orders.csv": "id\n1\n2\n"},
        dockerfile_extra="WORKDIR /app/project\n", test_py="""\
            from pathlib import Path
            def test_count():
                assert Path("/app/project/count.txt").read_text().strip() == "2"
                assert Path("/app/data/audit.log").read_text() == "counted\\n"
            """)
    rewards = {}
    for run, command in (("oracle", HELD_OUT["orders"][2]), ("nothing", "true")):
        config = EpisodeConfig(command_timeout_s=60, backend="host")
        with Episode(load_task(task_dir), config, out_dir=tmp_path / run) as episode:
            assert episode.run_command(command, turn=0)["exit_code"] == 0
            rewards[run] = episode.verify()["reward"]
    assert rewards == {"oracle": 1.0, "nothing": 0.0}
