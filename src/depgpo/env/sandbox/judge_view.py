"""The verifier's view of an episode: the image as it was built, and the agent's work only in its workdir.

The agent changes its world and the verifier has to judge it there, so anything of the agent's that the verifier
sees is a channel into the judge: a start-up hook on a Python path, a `.curlrc` in its home, an APT hook in /etc, a
symlink at `/pytest.ini`, a process that rewrites a tool after the verifier started. A list of rule-bearing names
cannot close that channel; not seeing the agent's changes can. In the `image` view (the default) the verifier runs
over a set of system directories of its own (/usr /etc /opt /var: overlays over the same lower layers with an
empty upper layer, mounted by sandbox_init beside the agent's), homes (/root /home /run /tmp) seeded from the image
as the agent's were at start, and a `/` with the image's top-level entries; the one place it sees the agent's work
is the task's workdir, bound from the agent's. Its own writes stay in its own layers. A task whose verifier must see
the agent's changes elsewhere (an `apt-get install` the tests use, a file in /etc) sets `view = "full"` in its
task.toml's [verifier] table; `depgpo data check --oracle` says which do: it runs the oracle in both views.
docs/threat-model.md#the-verifiers-view says what each view closes.
"""

from __future__ import annotations

from dataclasses import replace

from depgpo.env.sandbox.layout import SandboxLayout
from depgpo.tasks.task import VERIFIER_VIEWS as VIEWS
from depgpo.trajectory.scope import is_under

JUDGE = "judge"  # the view's directories: fs/judge/... and judge-merged/ beside the agent's


def checked_view(view: str, where: str) -> str:
    if view not in VIEWS:
        raise ValueError(f"{where}: verifier view {view!r}: choose one of {', '.join(VIEWS)} "
                         f"(image: the verifier sees the agent's work only in the workdir; docs/threat-model.md)")
    return view


def judge_layout(layout: SandboxLayout, view: str) -> SandboxLayout:
    """The layout the verifier runs in and the rules read: the agent's own (`full`), or the image view of it, in
    which nothing of the system directories' upper layer is the agent's."""
    if view == "full":
        return layout
    return replace(layout, view=JUDGE, agent_upper=frozenset(), agent_upper_unwalked=())


def agent_visible(layout: SandboxLayout, path: str) -> bool:
    """Whether what the verifier finds at `path` can be the agent's: anywhere in the full view, else only in the
    workdir (or the top-level directory around a deeper one: SandboxLayout.agent_area)."""
    return not layout.view or is_under(path, (layout.agent_area,))


def prepare_view(layout: SandboxLayout) -> None:
    """Make the image view's directories (before the shell starts: sandbox_init mounts its overlays where their
    mount points exist). Its homes are seeded like the agent's (seed.seed_files), its workdir is the agent's."""
    for name in layout.cow_dirs:
        (layout.merged / name).mkdir(parents=True, exist_ok=True)
        for part in ("upper", "work"):
            (layout._fs_part(part) / name).mkdir(parents=True, exist_ok=True)
    homes = [host for inside, host in layout.writable.items() if inside != layout.workdir]
    for home in homes:
        home.mkdir(parents=True, exist_ok=True)
    (layout._fs_part("tmp")).chmod(0o1777)
    for inside, host in layout.writable.items():  # a workdir inside a home: its mount point in the view's home
        if inside != layout.workdir and is_under(layout.workdir, (inside,)):
            (host / layout.workdir[len(inside):].lstrip("/")).mkdir(parents=True, exist_ok=True)
    layout.give_to_episode([*homes, layout.upper, layout._fs_part("work")])
    layout.prepare_rootfs()
