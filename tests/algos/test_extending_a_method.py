"""A method added from outside the package, through the route docs/extending.md describes: a plugin module that
declares an estimator and a method (named in DEPGPO_PLUGINS, as an installed package would name it under the
`depgpo.methods` entry points), and a config/method file. The local trainer takes an update with the plugin's
estimator, and `depgpo report` lists the method in Table 1; a run nobody declared is named in Table 1's notes.

Each check runs in its own process: plugins load once per process, when the registry is first read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from depgpo.config import config_dir
from tests.helpers import REPO

PLUGIN = '''
"""A toy estimator: GRPO's advantage on the last turn only (a "last command" weighting), zero on earlier turns."""
import torch

from depgpo.algos.advantages import active_turns, grpo_advantage
from depgpo.algos.methods import Estimator, Method, register_estimator, register_method

CALLS = []


def compute_last_turn_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, config=None):
    turns = active_turns("last_turn").for_mask(response_mask)
    turn_ids = turns.turn_id_tensor(response_mask)
    last = turn_ids == turn_ids.max(dim=1, keepdim=True).values
    norm = config.get("norm_adv_by_std_in_grpo", True) if config is not None else True
    advantages = grpo_advantage(token_level_rewards, response_mask, index, epsilon, norm) * last
    CALLS.append(advantages.clone())
    return advantages, advantages


register_estimator(Estimator("last_turn", compute_last_turn_advantage, ("anchor_keys",)))
register_method(Method("last_turn", "Last turn only", "last_turn", color="tab:cyan"))
'''
METHOD_YAML = textwrap.dedent("""\
    # @package _global_
    # A toy method from a plugin (tests/algos/test_extending_a_method.py): GRPO's settings, its own estimator.
    defaults:
      - base/common
      - _self_
    method:
      name: last_turn
    algorithm:
      adv_estimator: last_turn
    """)


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("plugin")
    (root / "toy_method.py").write_text(PLUGIN)
    configs = root / "config"
    shutil.copytree(config_dir(), configs)
    (configs / "method" / "last_turn.yaml").write_text(METHOD_YAML)
    return {**os.environ, "DEPGPO_PLUGINS": "toy_method", "DEPGPO_CONFIG_DIR": str(configs),
            "PYTHONPATH": os.pathsep.join([str(root), str(REPO), os.environ.get("PYTHONPATH", "")])}


def python(code: str, env: dict[str, str], cwd: Path) -> str:
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def test_the_local_trainer_takes_an_update_with_the_plugins_estimator(plugin_env, tmp_path):
    out = python("""
        import toy_method
        from depgpo.config import compose, run_name
        from depgpo.train.rl import RLTrainer
        from tests.train.test_rl_step import batch
        from depgpo.policy.model import build_tiny_qwen3, save_policy, train_tokenizer

        tokenizer = train_tokenizer(["echo hello > /app/greeting.txt", "done"] * 10, 300)
        save_policy(build_tiny_qwen3(tokenizer), tokenizer, "policy")
        cfg = compose(["scale=ci", "method=last_turn", "device=cpu"])
        trainer = RLTrainer(cfg, "policy", [], "run")
        metrics = trainer.step(batch(trainer))
        assert len(toy_method.CALLS) == 1 and toy_method.CALLS[0].abs().sum() > 0, toy_method.CALLS
        print(run_name(cfg), metrics["train/reward_mean"])
    """, plugin_env, tmp_path)
    assert out.split() == ["last_turn", "0.5"]


def test_the_report_lists_the_plugins_method_in_table1_and_names_an_undeclared_run(plugin_env, tmp_path):
    out = python(f"""
        from pathlib import Path
        from tests.report.test_report import SETA, build_results, markdown_cells, report, write_eval

        results = build_results(Path("results"))
        write_eval(results / SETA.path, "last_turn", 3, {{0: [0, 1, 2], 1: [0, 1, 2]}})
        write_eval(results / SETA.path, "mystery", 3, {{0: [0, 1, 2], 1: [0, 1, 2]}})
        assert report(results, "--out", "report") == 0
        rows = markdown_cells(Path("report/table1.md"))
        print("ROWS", sorted(rows))
        print(Path("report/table1.md").read_text())
    """, plugin_env, tmp_path)
    rows = next(line for line in out.splitlines() if line.startswith("ROWS"))
    assert "'Last turn only'" in rows and "'GRPO'" in rows and "'DepGPO'" in rows
    assert "eval/mystery is in no table" in out
