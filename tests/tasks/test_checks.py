"""The two renderings of a file check judge the same bytes alike, in real episodes: the file is the lines, each ending
in a newline, the last newline optional; a CR, a NUL, an empty line more, a longer or an empty file fail."""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path

import pytest

from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.tasks import load_task
from depgpo.tasks.checks import FileLines
from depgpo.tasks.generate import build_task, write_task

LINES = ("max_clients = 4990", "workers = 389")
PATH = "/app/app.ini"
CASES = {  # bytes the agent leaves at PATH -> whether the check passes
    "exact": (b"max_clients = 4990\nworkers = 389\n", 1.0),
    "no final newline": (b"max_clients = 4990\nworkers = 389", 1.0),
    "an empty line more": (b"max_clients = 4990\nworkers = 389\n\n", 0.0),
    "CRLF": (b"max_clients = 4990\r\nworkers = 389\r\n", 0.0),
    "a NUL inside": (b"max_clients = 4990\nwork\x00ers = 389\n", 0.0),
    "a NUL at the end": (b"max_clients = 4990\nworkers = 389\n\x00", 0.0),
    "a line more": (b"max_clients = 4990\nworkers = 389\ncache = 1\n", 0.0),
    "a long tail": (b"max_clients = 4990\nworkers = 389\n" + b"x" * 20000, 0.0),
    "empty": (b"", 0.0),
    "a prefix": (b"max_clients = 4990\nworkers = 38", 0.0),
}


def task_with_file_check(tmp_path: Path, verifier: str) -> Path:
    spec = replace(build_task("config_edit", "pool", 0, seed=3), checks=[FileLines(PATH, LINES)])
    return write_task(spec, tmp_path / verifier, {}, verifier=verifier)


@pytest.mark.sandbox
@pytest.mark.parametrize("verifier", ["shell", "pytest"])
def test_both_renderings_judge_the_same_bytes_alike(tmp_path, verifier):
    task = load_task(task_with_file_check(tmp_path, verifier))
    rewards = {}
    for name, (content, _) in CASES.items():
        with Episode(task, EpisodeConfig(command_timeout_s=20)) as episode:
            payload = base64.b64encode(content).decode()
            episode.run_command(f"printf %s {payload} | base64 -d > {PATH}", turn=0)
            rewards[name] = episode.verify()["reward"]
    assert rewards == {name: expected for name, (_, expected) in CASES.items()}
