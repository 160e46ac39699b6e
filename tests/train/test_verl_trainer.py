"""The verl GPU trainer's advantage step on CPU: verl's own `_compute_advantage` (V1 trainer) and
`compute_advantage_for_multi_trajectories`, with our turn-level estimators fed from the agent loop's extra fields.

What cannot run here: vLLM, the FSDP workers, and TransferQueue's Ray-backed store (its `tq.init()` did not come up
on a 2-core machine). The trainer's key-value calls are served by `InMemoryTransferQueue`, a stand-in at that
boundary only; everything between the fetch and the write-back is verl's code and ours.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from depgpo.agent.config import VerlRunSettings, agent_config
from depgpo.config import compose

pytestmark = pytest.mark.slow
pytest.importorskip("transfer_queue", reason="verl's V1 trainer imports TransferQueue (pip install -e '.[verl]')")

OVERRIDES = ["scale=ci"]


def _padded(rows: list[list], fill) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [fill] * (width - len(r)) for r in rows])


def _rewards(outputs: list) -> list[float]:
    """1, 0, 1, ... instead of the verifier's rewards, so that every group of three is mixed and the advantages are
    not all 0 (the tiny CI policy often solves a task every time or never); turns and factors stay the loop's."""
    return [float(i % 2 == 0) for i in range(len(outputs))]


def _verl_batch(outputs: list, uids: list[str]):
    """The padded batch verl's trainer builds from the stored agent-loop outputs (rewards on the last model token)."""
    from verl.protocol import DataProto

    mask = _padded([o.response_mask for o in outputs], 0).float()
    last = (mask * torch.arange(mask.shape[1])).argmax(dim=1)
    scores = torch.zeros_like(mask)
    scores[torch.arange(len(outputs)), last] = torch.tensor(_rewards(outputs))
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_rewards": scores,
                                        "token_level_scores": scores})
    data.non_tensor_batch["uid"] = np.array(uids, dtype=object)
    return data


def _distinct_factors(num_turns: int) -> list[float]:
    """Mean-1 factors that differ per turn (1, 2, ... rescaled): the CI policy's trajectories often fall back to
    unit factors, which would not show whether each turn's factor reaches its own tokens."""
    raw = [float(t + 1) for t in range(num_turns)]
    return [f * num_turns / sum(raw) for f in raw]


def _explicit_depgpo(outputs, uids, factors=None, norm_by_std=True) -> torch.Tensor:
    """What the local trainer computes: the estimator called with turn ids and factors passed explicitly."""
    from depgpo.algos.advantages import compute_depgpo_advantage

    data = _verl_batch(outputs, uids)
    turn_ids = _padded([o.extra_fields["turn_ids"] for o in outputs], -1).long()
    adv, _ = compute_depgpo_advantage(data.batch["token_level_rewards"], data.batch["response_mask"],
                                      np.array(uids, dtype=object), norm_adv_by_std_in_grpo=norm_by_std,
                                      turn_ids=turn_ids,
                                      step_factors=factors or [o.extra_fields["step_factors"] for o in outputs])
    return adv


@pytest.fixture(scope="module")
def loop_outputs(sft_policy):
    """Six trajectories (two tasks x three seeds) from the registered agent loop on the CPU generation backend."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from depgpo.agent.verl_loop import HFServerManager, TerminalAgentLoop
    from depgpo.policy.model import load_policy
    from depgpo.train.verl_config import compose_verl_config

    _, checkpoint, train = sft_policy
    task_dirs = train.read_text().split()[:2]
    model, tokenizer = load_policy(checkpoint)
    verl_cfg = compose_verl_config(compose(OVERRIDES), policy=str(checkpoint))
    loop = TerminalAgentLoop(trainer_config=DictConfigWrap(verl_cfg), server_manager=HFServerManager(model, tokenizer),
                             tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
                             data_config=DictConfigWrap(verl_cfg.data))
    outputs, uids = [], []
    for group, task_dir in enumerate(task_dirs):
        for seed in range(3):
            outputs.append(asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0}, extra_info={
                "task_dir": task_dir, "seed": 100 + seed})))
            uids.append(f"uid{group}")
    return outputs, uids


def test_synthetic_turn_batch_reaches_the_estimator_through_verls_compute_advantage():
    """Hand-made batch, two groups: verl's dispatch hands our estimator the active TurnBatch's turns and factors."""
    from verl.protocol import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    import depgpo.algos.verl_registry  # noqa: F401
    from depgpo.algos.advantages import TurnBatch, turn_batch

    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    turn_ids = [[0, 0, -1, 1], [0, -1, 1, 1], [0, 0, 0], [0]]
    rewards = torch.zeros(4, 4)
    rewards[0, 3] = 1.0  # group A: trajectory 0 succeeds, 1 fails; group B: 2 succeeds, 3 fails
    rewards[2, 2] = 1.0
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_rewards": rewards})
    data.non_tensor_batch["uid"] = np.array(["A", "A", "B", "B"], dtype=object)
    factors = [[0.5, 1.5], [1.8, 0.2], [1.0], [1.0]]
    with turn_batch(TurnBatch(turn_ids=turn_ids, step_factors=factors)):
        out = compute_advantage_for_multi_trajectories(
            data, batch_keys=[f"u{i}_0_0" for i in range(4)], adv_estimator="depgpo", num_repeat=2,
            config=AlgoConfig(adv_estimator="depgpo", norm_adv_by_std_in_grpo=False))
    grpo = 0.5  # reward minus group mean, not divided by the std
    expected = torch.tensor([[grpo * 0.5, grpo * 0.5, 0, grpo * 1.5],
                             [-grpo * 1.8, 0, -grpo * 0.2, -grpo * 0.2],
                             [grpo, grpo, grpo, 0],
                             [-grpo, 0, 0, 0]])
    assert torch.allclose(out.batch["advantages"], expected)


def test_estimator_without_turns_names_the_fix():
    from depgpo.algos.advantages import compute_depgpo_advantage

    with pytest.raises(ValueError, match="depgpo_sync"):
        compute_depgpo_advantage(torch.zeros(1, 2), torch.ones(1, 2), np.array(["a"], dtype=object))


@pytest.mark.sandbox
def test_agent_loop_extra_fields_give_the_local_trainers_advantages(loop_outputs):
    """Real agent-loop outputs through verl's dispatch (DepGPO and GiGPO) equal the explicit calls."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    import depgpo.algos.verl_registry  # noqa: F401
    from depgpo.algos.advantages import compute_gigpo_advantage, turn_batch
    from depgpo.train.verl_trainer import turn_batch_from_extra_fields

    outputs, uids = loop_outputs
    cfg = compose([*OVERRIDES, "method=gigpo"])
    turns = turn_batch_from_extra_fields([o.extra_fields for o in outputs], VerlRunSettings.from_config(cfg).gigpo)
    keys = [f"{u}-{i}_0_0" for i, u in enumerate(uids)]
    for estimator in ("depgpo", "gigpo"):
        with turn_batch(turns):
            out = compute_advantage_for_multi_trajectories(
                _verl_batch(outputs, uids), batch_keys=keys, adv_estimator=estimator, num_repeat=3,
                config=AlgoConfig(adv_estimator=estimator, norm_adv_by_std_in_grpo=True))
        if estimator == "depgpo":
            expected = _explicit_depgpo(outputs, uids)
        else:
            data = _verl_batch(outputs, uids)
            rewards = _rewards(outputs)
            expected, _ = compute_gigpo_advantage(
                data.batch["token_level_rewards"], data.batch["response_mask"], np.array(uids, dtype=object),
                turn_ids=_padded([o.extra_fields["turn_ids"] for o in outputs], -1).long(),
                anchor_keys=[o.extra_fields["anchor_keys"] for o in outputs],
                step_rewards=[[0.0] * (o.num_turns - 1) + [r] for o, r in zip(outputs, rewards)],
                **cfg.algorithm.gigpo)
        assert torch.allclose(out.batch["advantages"], expected.float(), atol=1e-6), estimator


class InMemoryTransferQueue:
    """Stand-in for TransferQueue's key-value API (kv_batch_get / kv_batch_put), which verl's trainer calls; the real
    store is a set of Ray actors. Fields are kept per key as verl stores them (jagged per-token tensors, objects)."""

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        from transfer_queue import KVBatchMeta

        for i, key in enumerate(keys):
            row = self.rows.setdefault(key, {})
            for name, value in (fields.items() if fields is not None else []):
                row[name] = value[i]
        return KVBatchMeta(keys=list(keys), tags=[{} for _ in keys], partition_id=partition_id)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from tensordict import NonTensorStack, TensorDict

        names = [n for n in select_fields if all(n in self.rows[k] for k in keys)]
        fields = {}
        for name in names:
            values = [self.rows[k][name] for k in keys]
            if isinstance(values[0], torch.Tensor) and values[0].dim() == 1:
                fields[name] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
            elif isinstance(values[0], torch.Tensor):
                fields[name] = torch.stack(values)
            else:
                fields[name] = NonTensorStack(*values)
        return TensorDict(fields, batch_size=len(keys))


@pytest.mark.sandbox
def test_trainer_subclass_computes_depgpo_advantages_in_verls_advantage_step(loop_outputs, monkeypatch, tmp_path):
    """The batch as verl hands it over: keys in another order than the rollouts were made, and one padding row (verl's
    padding_utils pads a batch to a size its devices divide with a copy of row 0: one masked token, reward 0, its own
    "pad..." uid, row 0's extra fields)."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import trainer_base

    from depgpo.train import verl_trainer
    from depgpo.train.verl_config import compose_verl_config

    outputs, uids = loop_outputs
    factors = [_distinct_factors(o.num_turns) for o in outputs]
    expected = _explicit_depgpo(outputs, uids, factors).float()
    assert (expected != 0).any(dim=1).all()  # every trajectory has a non-zero advantage: not a 0 == 0 comparison
    assert not torch.allclose(expected, _explicit_depgpo(outputs, uids, [[1.0] * o.num_turns for o in outputs]))
    store = InMemoryTransferQueue()
    monkeypatch.setattr(trainer_base.tq, "kv_batch_get", store.kv_batch_get)
    monkeypatch.setattr(trainer_base.tq, "kv_batch_put", store.kv_batch_put)

    keys = [f"{u}-{i}_0_0" for i, u in enumerate(uids)]
    batch = _verl_batch(outputs, uids)
    store.kv_batch_put(keys + ["padding_0_0"], "train", fields={
        "uid": [*uids, "pad0"],
        "response_mask": [torch.tensor(o.response_mask, dtype=torch.float32) for o in outputs] + [torch.zeros(1)],
        "rm_scores": [batch.batch["token_level_scores"][i, : len(o.response_mask)] for i, o in enumerate(outputs)]
                     + [torch.zeros(1)],
        "extra_fields": [{**o.extra_fields, "step_factors": f} for o, f in zip(outputs, factors)]
                        + [{**outputs[0].extra_fields, "step_factors": factors[0]}]})

    trainer_cls = verl_trainer._register_trainer()
    assert trainer_base.TRAINER_REGISTRY[verl_trainer.TRAINER_MODE] is trainer_cls
    trainer = trainer_cls.__new__(trainer_cls)  # the advantage step reads only the config and the store
    cfg = compose([*OVERRIDES, "method=depgpo"])
    trainer.config = compose_verl_config(cfg, policy="/unused")  # our settings ride in it, composed once
    batch_keys = [keys[3], "padding_0_0", keys[0], keys[5], keys[2], keys[4], keys[1]]
    trainer._compute_advantage(KVBatchMeta(keys=batch_keys, tags=[{} for _ in batch_keys], partition_id="train"), {})

    width = batch.batch["response_mask"].shape[1]
    stored = torch.stack([torch.nn.functional.pad(store.rows[k]["advantages"], (0, width - len(store.rows[k][
        "advantages"]))) for k in keys])
    assert torch.allclose(stored, expected, atol=1e-6)
    assert torch.equal(store.rows["padding_0_0"]["advantages"], torch.zeros(1))


def test_trainer_runs_as_verls_sync_mode():
    """verl's trainer base compares trainer_mode with "sync" by name; once chosen, ours must pass for it."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from depgpo.train import verl_trainer

    trainer_cls = verl_trainer._register_trainer()
    config = OmegaConf.create({"trainer": {"v1": {"trainer_mode": verl_trainer.TRAINER_MODE}}})
    seen = {}

    def base_init(self, config, *args, **kwargs):
        seen["mode"] = config.trainer.v1.trainer_mode

    original = PPOTrainerSync.__init__
    try:
        PPOTrainerSync.__init__ = base_init  # verl's own __init__ starts Ray workers; only the mode it sees matters
        trainer_cls(config=config)
    finally:
        PPOTrainerSync.__init__ = original
    assert seen["mode"] == "sync"


def test_run_specific_overrides_compose_into_verls_config_and_its_dataset_reads_our_tasks(sft_policy, tmp_path):
    """The paper run's full verl config composes (struct mode), selects our trainer and agent loop, and verl's own
    RLHFDataset reads the task rows that the agent loop needs."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from depgpo.policy.model import load_policy
    from depgpo.train.verl_config import compose_verl_config, validate_verl_config
    from depgpo.train.verl_trainer import TRAINER_MODE, run_specific_verl_overrides

    _, checkpoint, train = sft_policy
    overrides = ["scale=paper", "model=qwen3.5-9b", "data=seta", "method=depgpo"]
    cfg = compose(overrides)
    assert cfg.rl.backend == "verl"
    verl_cfg = compose_verl_config(cfg, policy=str(checkpoint), n_gpus=8, out_dir=str(tmp_path / "ckpt"),
                                   extra_overrides=run_specific_verl_overrides(train, tmp_path))
    validate_verl_config(verl_cfg)  # what verl's main_ppo checks before training
    assert verl_cfg.trainer.v1.trainer_mode == TRAINER_MODE
    settings = VerlRunSettings.from_verl_config(verl_cfg)  # composed once, with verl's config: typed, plain data
    assert settings == VerlRunSettings.from_config(cfg) and settings.gigpo == dict(cfg.algorithm.gigpo)
    assert settings.agent_config() == agent_config(cfg, credit=True)
    assert verl_cfg.trainer.total_epochs >= verl_cfg.trainer.total_training_steps  # the update count stops the run
    loops = OmegaConf.load(verl_cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert loops[0].name == verl_cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "depgpo_terminal"

    _, tokenizer = load_policy(checkpoint)
    dataset = RLHFDataset(data_files=[verl_cfg.data.train_files], tokenizer=tokenizer, config=verl_cfg.data)
    task_dirs = train.read_text().split()
    assert len(dataset) == len(task_dirs)
    row = dataset[0]
    assert row["extra_info"]["task_dir"] == str(Path(task_dirs[0]).resolve())
    assert "overrides" not in row["extra_info"] and row["agent_name"] == "depgpo_terminal"


def test_verl_backend_without_gpus_says_what_to_use(sft_policy, tmp_path):
    import torch

    from depgpo.train.verl_trainer import run_verl_rl

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    _, checkpoint, train = sft_policy
    with pytest.raises(RuntimeError, match="rl.backend=local"):
        run_verl_rl(compose(["scale=paper"]), checkpoint, train, tmp_path)
    assert not (tmp_path / "done.json").exists()
