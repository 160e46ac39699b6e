"""`pip install .` without extras, in a fresh virtual environment: the tracer, the sandbox, offline inference and
credit work there, and torch is not installed (pyproject.toml: training is the `train` extra).

The environment is built once for the module, from PyPI or pip's cache (~35 s here with a warm cache), from a copy of
the files the build reads, so that the build's own `build/` and `*.egg-info` stay out of the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.credit_examples import COUNT_DATASET_TOKENS
from tests.helpers.extending_doc import EXTENDING, copy_fixtures, trainer_example
from tests.helpers.harbor_builder import make_harbor_task

pytestmark = pytest.mark.slow

TRAINING_ONLY = ("torch", "transformers", "verl", "tensordict", "snakemake", "submitit")


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> Path:
    """The bin/ of a virtual environment holding this package and its base dependencies only."""
    root = tmp_path_factory.mktemp("bare")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # From inside .venv, `-m venv` builds on the base interpreter: nothing of .venv's packages is visible there.
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    install = subprocess.run([str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", str(source)],
                             capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout + install.stderr
    return root / "venv" / "bin"


def run(bare: Path, program: str, *args: str, cwd: Path | None = None, env: dict | None = None,
        timeout: int = 120) -> subprocess.CompletedProcess:
    # PYTHONPATH cleared: the test's own (the checkout's src/) must not leak into the bare environment.
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | (env or {})
    return subprocess.run([str(bare / program), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=environment)


def test_the_base_install_has_no_torch_and_imports_the_credit_side(bare, tmp_path):
    for module in TRAINING_ONLY:
        probe = run(bare, "python", "-c", f"import {module}", cwd=tmp_path)
        assert probe.returncode != 0 and f"No module named '{module}'" in probe.stderr, (module, probe.stderr)
    imports = run(bare, "python", "-c", "import depgpo.cli, depgpo.credit, depgpo.env, depgpo.inference, "
                  "depgpo.trajectory, depgpo.tasks, depgpo.report.cli, sys; print(sys.modules['depgpo'].__file__)",
                  cwd=tmp_path)
    assert imports.returncode == 0, imports.stderr
    assert str(bare.parent) in imports.stdout  # the installed copy, not the checkout's src/


@pytest.mark.sandbox
def test_run_episode_then_credit_without_torch(bare, tmp_path):
    """The paper's Table 12 (docs/credit.md#worked-examples) through the two commands of the bare install."""
    answer_test = "def test_answer():\n    assert open('/app/answer.txt').read().strip() == '63841'\n"
    task = make_harbor_task(tmp_path, "table12", instruction=COUNT_DATASET_TOKENS.trajectory["instruction"],
                            test_py=answer_test,
                            files={"data/sample.jsonl": COUNT_DATASET_TOKENS.setup_files["/app/data/sample.jsonl"]})
    commands = tmp_path / "commands.json"
    commands.write_text(json.dumps([c["text"] for c in COUNT_DATASET_TOKENS.trajectory["commands"]]))
    out = tmp_path / "episode"
    episode = run(bare, "depgpo", "run-episode", str(task), "--commands", str(commands), "--out", str(out),
                  cwd=tmp_path)
    assert episode.returncode == 0, episode.stdout + episode.stderr
    trajectory = json.loads((out / "trajectory.json").read_text())
    assert trajectory["verifier"]["reward"] == 1.0 and trajectory["verifier"]["E_source"] == "trace"
    credit = run(bare, "depgpo", "credit", str(out / "trajectory.json"), "--format", "json", "--graph",
                 str(tmp_path / "graph.png"), cwd=tmp_path)
    assert credit.returncode == 0, credit.stderr
    result = json.loads(credit.stdout.splitlines()[0])
    assert [(c["role"], c["credit"]) for c in result["commands"]] == [
        ("supporting read", 0.5), ("direct write", 1.0), ("read with no downstream use", 0.0)]
    assert result["step_factors"] == [1.0, 2.0, 0.0] and result["fallback"] is None
    assert (tmp_path / "graph.png").stat().st_size > 0  # matplotlib is a base dependency: --graph works too


def test_the_extending_doc_runs_without_torch(bare, tmp_path):
    copy_fixtures(tmp_path)
    doc = run(bare, "python", "-m", "doctest", str(EXTENDING), cwd=tmp_path)
    assert doc.returncode == 0, doc.stdout + doc.stderr


def test_the_trainer_example_runs_without_torch_and_the_package_is_typed(bare, tmp_path):
    """docs/extending.md's trainer example (depgpo.credit.trainer) prints what the page shows, torch absent; the
    installed copy ships py.typed, so a type checker reads its annotations."""
    code, shown = trainer_example()
    (tmp_path / "trainer_example.py").write_text(code)
    example = run(bare, "python", "trainer_example.py", cwd=tmp_path)
    assert example.returncode == 0, example.stderr
    assert example.stdout == shown
    marker = run(bare, "python", "-c", "import depgpo, pathlib, sys; print(pathlib.Path(depgpo.__file__).parent / "
                 "'py.typed', 'torch' in sys.modules)", cwd=tmp_path)
    path, torch_loaded = marker.stdout.split()
    assert str(bare.parent) in path and Path(path).is_file() and torch_loaded == "False", marker.stdout + marker.stderr


def test_a_training_stage_names_the_extra_it_needs(bare, tmp_path):
    data = tmp_path / "conversations.jsonl"
    data.write_text("")
    sft = run(bare, "depgpo", "sft", "--data", str(data), "--out", str(tmp_path / "sft"), cwd=tmp_path,
              env={"DEPGPO_CONFIG_DIR": str(REPO / "config")})  # an installed copy has no config/ beside it
    assert sft.returncode == 2, sft.stdout + sft.stderr
    assert sft.stderr.strip() == ("error: depgpo sft is unavailable: No module named 'torch' "
                                  "(pip install 'depgpo[train]'; envs/setup.sh installs every extra)")
