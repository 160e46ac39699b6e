"""RL on GPUs through verl 0.9.1: its V1 synchronous trainer, with our turn-level estimators fed by our agent loop.

verl's `PPOTrainer._compute_advantage` fetches a fixed set of fields (uid, mask, scores, log-probs) and calls an
estimator with rewards, mask and uid only. DepGPO needs each token's turn and each turn's step factor, GiGPO each
turn's anchor state: our agent loop (depgpo.agent.verl_loop) returns them in `extra_fields`, which verl stores per
trajectory in its TransferQueue. `DepGPOTrainerSync` (trainer mode "depgpo_sync") fetches them for the same keys
and hands them to the estimator for the duration of verl's own `_compute_advantage` (`depgpo.algos.verl_registry`),
so KL-in-reward, rollout correction and the write-back stay verl's code. GRPO, DAPO and DPPO need nothing extra
and run verl's path unchanged.

    depgpo rl --policy SFT_CHECKPOINT --train rl_train.txt --out RUN_DIR scale=paper rl.backend=verl ...

starts `verl.trainer.main_ppo.run_ppo` with `verl_overrides(cfg)` (depgpo.train.verl_config) plus the data set of
training tasks and this trainer. It needs GPUs and vLLM; what runs on CPU is tested in tests/train/test_verl_trainer.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from depgpo.algos.methods import estimators
from depgpo.algos.verl_registry import TurnBatch, turn_batch

TRAINER_MODE = "depgpo_sync"


def turn_batch_from_extra_fields(extra_fields: list[dict], gigpo: dict) -> TurnBatch:
    """The estimator's per-trajectory turn data from the agent loop's extra fields (one dict per row, in the
    batch's row order), with GiGPO's hyperparameters."""
    missing = [i for i, extra in enumerate(extra_fields) if "turn_ids" not in extra]
    if missing:
        raise ValueError(f"rows {missing[:5]} have no extra_fields.turn_ids: the rollouts did not come from the "
                         f"depgpo_terminal agent loop (set actor_rollout_ref.rollout.agent.default_agent_loop)")
    return TurnBatch(turn_ids=[list(e["turn_ids"]) for e in extra_fields],
                     step_factors=[list(e.get("step_factors") or []) for e in extra_fields],
                     anchor_keys=[list(e.get("anchor_keys") or []) for e in extra_fields],
                     gigpo=dict(gigpo))


def _register_trainer():
    """Define and register the trainer class (verl's V1 trainer imports TransferQueue and Ray: only when used)."""
    import transfer_queue as tq
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    if TRAINER_MODE in TRAINER_REGISTRY:
        return TRAINER_REGISTRY[TRAINER_MODE]

    from depgpo.agent.config import VerlRunSettings

    @register_trainer(TRAINER_MODE)
    class DepGPOTrainerSync(PPOTrainerSync):
        """verl's synchronous trainer; turn-level estimators (depgpo.algos.methods) also see each trajectory's
        turns."""

        def __init__(self, config, *args, **kwargs):
            # verl's trainer base tests `trainer_mode == "sync"` by name (replay buffer, batch sizes, checkpoints):
            # once this class is chosen, the run is the synchronous one in every other respect.
            config.trainer.v1.trainer_mode = "sync"
            super().__init__(config, *args, **kwargs)

        def _compute_advantage(self, batch, metrics):
            declared = estimators().get(self.config.algorithm.adv_estimator)  # None: one of verl's own
            if declared is None or not declared.turn_level:
                return super()._compute_advantage(batch, metrics)
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
            extra_fields = data.pop("extra_fields").tolist()  # rows in batch.keys order, as verl's own fetch
            gigpo = VerlRunSettings.from_verl_config(self.config).gigpo
            with turn_batch(turn_batch_from_extra_fields(extra_fields, gigpo)):
                return super()._compute_advantage(batch, metrics)

    return DepGPOTrainerSync


def write_dataset(task_dirs: list[Path], path: Path) -> Path:
    """verl's RL data set (Parquet): one row per training task; the agent loop reads extra_info.task_dir (the run's
    settings travel in verl's config, VerlRunSettings)."""
    import pandas as pd

    from depgpo.tasks import load_task

    rows = []
    for index, task_dir in enumerate(task_dirs):
        task = load_task(task_dir)
        rows.append({"data_source": "depgpo", "agent_name": "depgpo_terminal",
                     "prompt": [{"role": "user", "content": task.instruction}],
                     "extra_info": {"index": index, "task_dir": str(Path(task_dir).resolve())}})
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


AGENT_LOOPS_YAML = "- name: depgpo_terminal\n  _target_: depgpo.agent.verl_loop.TerminalAgentLoop\n"


def run_specific_verl_overrides(train: Path, out_dir: Path) -> list[str]:
    """The overrides of verl's config that one run adds to `verl_overrides(cfg)`: its data set, the agent-loop
    registry file (both written into `out_dir/verl`) and this trainer."""
    from depgpo.tasks import task_dirs

    data = write_dataset(task_dirs(train), out_dir / "verl" / "train.parquet")
    loops = out_dir / "verl" / "agent_loops.yaml"
    loops.write_text(AGENT_LOOPS_YAML)
    return [f"data.train_files={data}", f"data.val_files={data}",
            "trainer.val_before_train=false",  # evaluation is its own stage (depgpo evaluate, three rounds)
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
            f"trainer.v1.trainer_mode={TRAINER_MODE}"]


def export_policy(checkpoints: Path, target: Path) -> Path:
    """The last verl (FSDP) checkpoint as a Hugging Face model directory, where evaluation reads a run's policy."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    step = find_latest_ckpt_path(str(checkpoints))
    if step is None:
        raise FileNotFoundError(f"{checkpoints}: verl wrote no global_step_* checkpoint (trainer.save_freq?)")
    subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                    "--local_dir", str(Path(step) / "actor"), "--target_dir", str(target)], check=True)
    return target


def run_verl_rl(cfg: DictConfig, policy: Path, train: Path, out_dir: Path) -> None:
    """Train one RL run with verl on this node's GPUs; done.json marks it finished (as the local trainer does)."""
    import ray
    import torch
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    from depgpo.train.verl_config import compose_verl_config, validate_verl_config

    out_dir = Path(out_dir)
    if (out_dir / "done.json").is_file():
        return
    n_gpus = torch.cuda.device_count()
    if n_gpus == 0:
        raise RuntimeError("rl.backend=verl needs GPUs (vLLM rollouts); on CPU use rl.backend=local")
    verl_cfg = compose_verl_config(cfg, policy=str(Path(policy).resolve()), n_gpus=n_gpus,
                                   out_dir=str((out_dir / "verl" / "checkpoints").resolve()),
                                   extra_overrides=run_specific_verl_overrides(train, out_dir))
    auto_set_device(verl_cfg)  # what verl's main_ppo.main does before run_ppo
    validate_verl_config(verl_cfg)

    class DepGPOTaskRunner(TaskRunnerV1.__ray_actor_class__):
        """verl's task runner, with our estimators, agent loop and trainer registered in its Ray actor."""

        def run(self, config):
            import depgpo.agent.verl_loop  # noqa: F401
            import depgpo.algos.verl_registry  # noqa: F401

            _register_trainer()
            return super().run(config)

    run_ppo(verl_cfg, task_runner_class=ray.remote(DepGPOTaskRunner))
    export_policy(out_dir / "verl" / "checkpoints", out_dir / "checkpoint")
    (out_dir / "done.json").write_text(json.dumps({"updates": cfg.rl.updates, "backend": "verl",
                                                   "config": OmegaConf.to_container(cfg)}))


