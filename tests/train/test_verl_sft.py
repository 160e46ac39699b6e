"""SFT through verl's SFT trainer (`sft.backend: verl`): the data set verl reads gives the local trainer's tokens and
loss positions, verl loads it through its own `data.custom_cls` hook, and the composed config is verl's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytest.importorskip("verl")

from depgpo.config import compose  # noqa: E402
from depgpo.policy.chat import conversation_segments, messages_to_turns  # noqa: E402
from depgpo.policy.model import train_tokenizer  # noqa: E402
from depgpo.train.sft import IGNORE_INDEX, encode_segments  # noqa: E402
from depgpo.train.verl_sft import (  # noqa: E402
    ConversationDataset,
    compose_verl_sft_config,
    export_checkpoint,
    initial_model,
    run_verl_sft,
    write_parquet,
)

pytestmark = pytest.mark.slow


def bash_call(call_id: str, command: str) -> dict:
    call = {"name": "bash", "arguments": json.dumps({"command": command})}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": call}]}


# verl's trainer has no copying steps (the tiny scale's sft.copy): verl_sft refuses them
NO_COPY = ["sft.copy.steps=0", "sft.copy.mix=0"]

CONVERSATIONS = [
    {"task": "greet", "messages": [
        {"role": "user", "content": "Write hello to /app/greeting.txt"},
        bash_call("c0", "ls /app"), {"role": "tool", "tool_call_id": "c0", "content": "config\n"},
        bash_call("c1", "echo hello > /app/greeting.txt"), {"role": "tool", "tool_call_id": "c1", "content": ""},
        {"role": "assistant", "content": "<done/>"}]},
    {"task": "port", "messages": [
        {"role": "user", "content": "Set port = 8080 in /app/app.ini " + "(it is 80 now) " * 30},  # long, within 768
        bash_call("c0", "sed -i 's/^port = 80$/port = 8080/' /app/app.ini"),
        {"role": "tool", "tool_call_id": "c0", "content": "x" * 900},
        {"role": "assistant", "content": "<done/>"}]},
]


@pytest.fixture()
def data(tmp_path):
    jsonl = tmp_path / "conversations.jsonl"
    jsonl.write_text("".join(json.dumps(c) + "\n" for c in CONVERSATIONS))
    parquet = tmp_path / "train.parquet"
    assert write_parquet(jsonl, parquet) == 2
    return jsonl, parquet


def test_verl_reads_the_local_trainers_tokens(data):
    from verl.trainer.sft_trainer import create_sft_dataset

    _, parquet = data
    cfg = compose(["scale=paper"])
    verl_cfg = compose_verl_sft_config(cfg, model_path="/models/policy", train_parquet=str(parquet),
                                       out_dir="/tmp/unused", n_gpus=4)
    tokenizer = train_tokenizer(["ls /app", "echo hello > /app/greeting.txt", "sed -i s/80/8080/ /app/app.ini"], 300)
    dataset = create_sft_dataset(str(parquet), verl_cfg.data, tokenizer, None)  # verl's loader, our class
    assert isinstance(dataset, ConversationDataset) and len(dataset) == 2
    for item, conversation in zip(dataset, CONVERSATIONS):
        segments = conversation_segments(*messages_to_turns(conversation["messages"]), cfg.agent.observation_chars)
        ids, labels = encode_segments(tokenizer, segments)
        ids, labels = ids[:verl_cfg.data.max_length], labels[:verl_cfg.data.max_length]
        assert item["input_ids"].tolist() == ids
        assert item["loss_mask"].tolist() == [int(label != IGNORE_INDEX) for label in labels]
        assert item["position_ids"].tolist() == list(range(len(ids)))
        assert 0 < sum(item["loss_mask"].tolist()) < len(ids)  # the commands and <done/>, not the prompt or output


def test_observation_cut_and_length_follow_our_config(data):
    """As the local trainer: observations cut to agent.observation_chars, conversations to sft.max_seq_len, and a
    conversation left without assistant tokens dropped."""
    _, parquet = data
    tokenizer = train_tokenizer(["sed -i s/80/8080/ /app/app.ini", "x" * 50], 300)
    full = [encode_segments(tokenizer, conversation_segments(*messages_to_turns(c["messages"]), 100))
            for c in CONVERSATIONS]
    first_written = [labels.index(next(label for label in labels if label != IGNORE_INDEX)) for _, labels in full]
    assert len(full[0][0]) < first_written[1]  # the second conversation's long prompt outlasts the whole first one

    def dataset(max_seq_len: int) -> ConversationDataset:
        cfg = compose(["scale=tiny", *NO_COPY, "agent.observation_chars=100", f"sft.max_seq_len={max_seq_len}"])
        verl_cfg = compose_verl_sft_config(cfg, model_path="/models/policy", train_parquet=str(parquet),
                                           out_dir="/tmp/unused")
        assert verl_cfg.data.observation_chars == 100 and verl_cfg.data.max_length == max_seq_len
        assert verl_cfg.data.custom_cls.path == "pkg://depgpo.train.verl_sft"
        return ConversationDataset(str(parquet), tokenizer, verl_cfg.data)

    cut = dataset(first_written[1] + 3)  # the second conversation keeps 3 of its written tokens
    assert [item["input_ids"].tolist() for item in cut] == [full[0][0], full[1][0][:first_written[1] + 3]]
    assert cut[1]["loss_mask"].tolist()[-3:] == [1, 1, 1]
    dropped = dataset(len(full[0][0]))  # the second one has nothing the model wrote left: gone
    assert [item["input_ids"].tolist() for item in dropped] == [full[0][0]]


def test_paper_sft_maps_table5_onto_verl():
    cfg = compose(["scale=paper", "data=seta"])
    assert cfg.sft.backend == "verl"
    verl_cfg = compose_verl_sft_config(cfg, model_path="/models/Qwen3.5-9B", train_parquet="/data/train.parquet",
                                       out_dir="/results/sft/verl", n_gpus=6)
    assert verl_cfg.data.micro_batch_size_per_gpu == 1 and verl_cfg.data.train_batch_size == 6  # Table 5
    assert verl_cfg.trainer.total_epochs == 1 and verl_cfg.data.max_length == cfg.data.max_seq_len
    assert verl_cfg.trainer.n_gpus_per_node == 6 and verl_cfg.optim.lr == cfg.sft.lr
    assert "hf_model" in verl_cfg.checkpoint.save_contents  # RL and evaluation read a Hugging Face directory
    assert verl_cfg.optim.lr_scheduler_type == cfg.sft.schedule
    tiny = compose(["scale=tiny", *NO_COPY, "sft.warmup_steps=7"])
    tiny_verl = compose_verl_sft_config(tiny, model_path="/m", train_parquet="/t", out_dir="/o")
    assert tiny_verl.optim.lr_scheduler_type == "cosine" and tiny_verl.optim.lr_warmup_steps == 7
    with pytest.raises(ValueError, match="sft.copy.steps=300, sft.copy.mix=0.25: .* set both to 0"):
        compose_verl_sft_config(compose(["scale=tiny"]), model_path="/m", train_parquet="/t", out_dir="/o")
    with pytest.raises(Exception, match="no_such_key"):  # struct mode: an unknown key fails composition
        compose_verl_sft_config(compose(["scale=paper", "sft.verl_overrides=['trainer.no_such_key=1']"]),
                                model_path="/m", train_parquet="/t", out_dir="/o")


def test_paths_reach_verl_as_they_are():
    """Hydra's override grammar reads commas as sweeps and = ( ) ' as syntax: such paths are quoted on the way."""
    odd = "/models/Qwen 3.5, 9B=(final)'s"
    verl_cfg = compose_verl_sft_config(compose(["scale=paper"]), model_path=odd, train_parquet="/data/a,b.parquet",
                                       out_dir="/results/sft/verl")
    assert verl_cfg.model.path == odd and verl_cfg.data.train_files == "/data/a,b.parquet"


def test_export_takes_the_step_verls_tracker_names(tmp_path):
    for step in (5, 10):
        hf = tmp_path / "verl" / f"global_step_{step}" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (hf / "model.safetensors").write_text(str(step))
    (tmp_path / "verl" / "global_step_10" / "huggingface" / "model.safetensors").unlink()  # step 10 died mid-save
    (tmp_path / "verl" / "latest_checkpointed_iteration.txt").write_text("5")
    checkpoint = export_checkpoint(tmp_path / "verl", tmp_path / "checkpoint")
    assert (checkpoint / "model.safetensors").read_text() == "5"
    (tmp_path / "verl" / "latest_checkpointed_iteration.txt").write_text("10")
    with pytest.raises(RuntimeError, match="no complete checkpoint"):
        export_checkpoint(tmp_path / "verl", tmp_path / "checkpoint")


def test_without_gpus_it_refuses_and_writes_nothing(data, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    jsonl, _ = data
    with pytest.raises(RuntimeError, match="sft.backend=verl needs GPUs"):
        run_verl_sft(jsonl, tmp_path / "sft", compose(["scale=tiny", "sft.backend=verl"]))
    assert not (tmp_path / "sft").exists()
    # the stage says it before any work, as a config error naming the setting and the alternative
    proc = subprocess.run([sys.executable, "-m", "depgpo", "sft", "--data", str(jsonl), "--out", str(tmp_path / "sft"),
                           "scale=tiny", "sft.backend=verl"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "error: config: sft.backend=verl needs GPUs" in proc.stderr
    assert "sft.backend=local" in proc.stderr and not (tmp_path / "sft").exists()


# Settings for verl's trainer without flash-attn and on the CPU stand-in (FSDP1 refuses CPU parameters).
CPU_VERL = ("sft.verl_overrides=['+model.override_config.attn_implementation=sdpa','model.use_remove_padding=false',"
            "'engine.use_torch_compile=false','engine.strategy=fsdp2','trainer.device=cpu']")


def test_verls_sft_trainer_trains_on_our_data(tmp_path):
    """verl's own SFT trainer (FSDP2 engine, its loop, its checkpoint) on our data set and config, run on a CPU
    stand-in for verl's GPU platform (bench/verl_engine_step.py), in a child process: the loss of the exported
    Hugging Face model on the conversations falls well below the initial model's."""
    proc = subprocess.run([sys.executable, "-m", "tests.train.test_verl_sft", str(tmp_path)], capture_output=True,
                          text=True, timeout=900, cwd=REPO)  # as a module from the root: it imports tests.helpers
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (tmp_path / "sft" / "checkpoint" / "config.json").is_file()
    assert (tmp_path / "sft" / "checkpoint" / "tokenizer.json").is_file()
    assert result["final_loss"] < 0.5 * result["initial_loss"], result


def main(root: Path) -> None:
    import os

    sys.path.insert(0, str(REPO / "bench"))
    from gpu_check import conversation_loss
    from verl_engine_step import use_cpu_platform

    use_cpu_platform()
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29612", "RANK": "0", "WORLD_SIZE": "1",
                       "LOCAL_RANK": "0"}.items():
        os.environ.setdefault(key, value)
    from verl.trainer.sft_trainer import run_sft

    out = root / "sft"
    jsonl = root / "conversations.jsonl"
    jsonl.write_text("".join(json.dumps(c) + "\n" for c in CONVERSATIONS))
    cfg = compose(["scale=tiny", *NO_COPY, "sft.epochs=30", "sft.batch_size=2", CPU_VERL])
    write_parquet(jsonl, out / "verl_data" / "train.parquet")
    start = initial_model(cfg, jsonl, out)
    run_sft(compose_verl_sft_config(cfg, model_path=start, train_parquet=str(out / "verl_data" / "train.parquet"),
                                    out_dir=str(out / "verl")))
    checkpoint = export_checkpoint(out / "verl", out / "checkpoint")
    print(json.dumps({"initial_loss": conversation_loss(Path(start), jsonl, cfg, "cpu"),
                      "final_loss": conversation_loss(checkpoint, jsonl, cfg, "cpu")}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
