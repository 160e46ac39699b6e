"""The policy: its conversation format, its model and tokenizer, and turn-by-turn generation.

Modules: `chat` (ChatML rendering and parsing of bash turns; text only, no torch), `model` (tiny Qwen3 + trained
tokenizer, SmolLM2 from its GGUF, save/load) and `generate` (`Policy`, the per-turn sampler with verl's token
layout, and `sequence_logprobs` for the loss), `device` (the `device` setting). Import the submodule you need;
`chat` loads neither torch nor transformers, `device` only torch.
"""
